"""Child process for the crash test: appends with SYNC_FLUSH from concurrent writers and
prints ``queue_id seq commitlog_offset`` for every append the store said is durable."""

from __future__ import annotations

import asyncio
import sys

from rocketq.broker.store_writer import StoreWriter
from rocketq.store import MessageStore, MessageStoreConfig, PutStatus, StoreMessage


def crash_config(root: str) -> MessageStoreConfig:
    return MessageStoreConfig(storePathRootDir=root, mappedFileSizeCommitLog=256 * 1024,
                              maxMessageSize=64 * 1024, mappedFileSizeConsumeQueue=20 * 500,
                              flushDiskType="SYNC_FLUSH", maxHashSlotNum=4096,
                              maxIndexNum=16384)


async def main(root: str) -> None:
    store = MessageStore(crash_config(root))
    writer = StoreWriter(store)
    out = sys.stdout

    async def write(queue_id: int) -> None:
        seq = 0
        while True:  # runs until the parent kills the process
            body = b"q%d-s%d-" % (queue_id, seq) + b"p" * (50 + seq % 200)
            r = await writer.put_message(StoreMessage.create(
                "Crash", body, queue_id, keys=f"q{queue_id}s{seq}", tags=f"t{seq % 3}"))
            if r.status is PutStatus.PUT_OK:
                out.write(f"{queue_id} {seq} {r.commitlog_offset}\n")
                out.flush()
            seq += 1

    await asyncio.gather(*(write(q) for q in range(4)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
