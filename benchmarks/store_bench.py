"""Message store benchmark: disk bandwidth, append (ASYNC_FLUSH and SYNC_FLUSH group commit)
and pull-read throughput, measured in one run on this machine.

    python benchmarks/store_bench.py            # a table
    python benchmarks/store_bench.py --json     # one JSON object

Messages are 128-byte bodies with the properties a RocketMQ client sends (UNIQ_KEY, WAIT), so
the dispatcher builds ConsumeQueue units and index entries for each, as a broker does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time

from rocketq.broker.store_writer import StoreWriter
from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage

BODY_SIZE = 128
QUEUES = 8
TOPIC = "BenchmarkTopic"


def make_messages(count: int) -> list[StoreMessage]:
    body = os.urandom(BODY_SIZE)
    born = int(time.time() * 1000)
    return [StoreMessage(TOPIC, body, i % QUEUES, born_timestamp=born,
                         properties=f"UNIQ_KEY\x01{i:032X}\x02WAIT\x01true\x02".encode())
            for i in range(count)]


def disk_write_mb_s(directory: str, size_mb: int) -> float:
    """Sequential write bandwidth of a plain file, fsync included."""
    path = os.path.join(directory, "raw-disk-test")
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(size_mb):
            os.write(fd, chunk)
        os.fsync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return size_mb / elapsed


def config(root: str, flush: str) -> MessageStoreConfig:
    return MessageStoreConfig(storePathRootDir=root, flushDiskType=flush,
                              mappedFileSizeCommitLog=1 << 30)


def bench_async(root: str, count: int, batch: int) -> dict[str, float]:
    store = MessageStore(config(root, "ASYNC_FLUSH"))
    try:
        messages = make_messages(count)
        record_size = store.put_message(messages[0]).size
        t0 = time.perf_counter()
        if batch <= 1:
            put = store.put_message
            for m in messages[1:]:
                put(m)
        else:
            puts = store.put_messages
            for i in range(1, count, batch):
                puts(messages[i:i + batch])
        append_s = time.perf_counter() - t0
        store.wait_dispatched(timeout=600)
        total_s = time.perf_counter() - t0
        return {
            "msgs_s": (count - 1) / append_s,
            "mb_s": (count - 1) * record_size / append_s / 1e6,
            "with_dispatch_msgs_s": (count - 1) / total_s,
        }
    finally:
        store.close()


def bench_sync(root: str, writers: int, seconds: float) -> float:
    store = MessageStore(config(root, "SYNC_FLUSH"))
    store_writer = StoreWriter(store)
    body = os.urandom(BODY_SIZE)

    async def writer(n: int, deadline: float) -> int:
        done = 0
        while time.perf_counter() < deadline:
            await store_writer.put_message(StoreMessage(
                TOPIC, body, n % QUEUES, properties=f"UNIQ_KEY\x01{n:08X}{done:024X}\x02".encode()))
            done += 1
        return done

    async def main() -> float:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(writer(n, t0 + seconds) for n in range(writers)))
        return sum(counts) / (time.perf_counter() - t0)

    try:
        return asyncio.run(main())
    finally:
        store.close()
        store_writer.close()


def bench_read(root: str, count: int, pull_size: int) -> float:
    store = MessageStore(config(root, "ASYNC_FLUSH"))
    try:
        messages = make_messages(count)
        for i in range(0, count, 256):
            store.put_messages(messages[i:i + 256])
        store.wait_dispatched(timeout=600)
        got = 0
        t0 = time.perf_counter()
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                result = store.get_messages(TOPIC, queue_id, offset, pull_size)
                if not result.message_count:
                    break
                result.data()  # the PULL_MESSAGE body, as a broker would send it
                got += result.message_count
                offset = result.next_begin_offset
                result.release()
        elapsed = time.perf_counter() - t0
        assert got == count, (got, count)
        return got / elapsed
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--count", type=int, default=1_000_000,
                        help="messages for the ASYNC_FLUSH and read runs (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=64,
                        help="messages per append call in the batched run (default 64)")
    parser.add_argument("--sync-seconds", type=float, default=3.0,
                        help="duration of each SYNC_FLUSH run (default 3 s)")
    parser.add_argument("--disk-mb", type=int, default=512, help="size of the raw disk test")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)

    base = tempfile.mkdtemp(prefix="rocketq-store-bench-", dir=args.dir)
    try:
        def fresh(name: str) -> str:
            path = os.path.join(base, name)
            shutil.rmtree(path, ignore_errors=True)
            return path

        disk = disk_write_mb_s(base, args.disk_mb)
        single = bench_async(fresh("async1"), max(args.count // 4, 1000), 1)
        shutil.rmtree(os.path.join(base, "async1"), ignore_errors=True)
        batched = bench_async(fresh("async"), args.count, args.batch)
        shutil.rmtree(os.path.join(base, "async"), ignore_errors=True)
        sync_1 = bench_sync(fresh("sync1"), 1, args.sync_seconds)
        shutil.rmtree(os.path.join(base, "sync1"), ignore_errors=True)
        sync_64 = bench_sync(fresh("sync64"), 64, args.sync_seconds)
        shutil.rmtree(os.path.join(base, "sync64"), ignore_errors=True)
        read = bench_read(fresh("read"), args.count, 32)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    result = {
        "disk_write_mb_s": round(disk, 1),
        "async_append_msgs_s": round(batched["msgs_s"]),
        "async_append_mb_s": round(batched["mb_s"], 1),
        "async_append_ratio_to_disk": round(batched["mb_s"] / disk, 3),
        "async_append_with_dispatch_msgs_s": round(batched["with_dispatch_msgs_s"]),
        "async_append_single_msgs_s": round(single["msgs_s"]),
        "sync_append_1_msgs_s": round(sync_1),
        "sync_append_64_msgs_s": round(sync_64),
        "sync_group_commit_speedup": round(sync_64 / sync_1, 1) if sync_1 else None,
        "read_msgs_s": round(read),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    rows = [
        ("raw disk sequential write (fsync'd)", f"{disk:,.0f} MB/s", ""),
        (f"ASYNC_FLUSH append, batches of {args.batch}", f"{batched['msgs_s']:,.0f} msgs/s",
         f"{batched['mb_s']:,.1f} MB/s = {batched['mb_s'] / disk:.1%} of disk"),
        ("  ... until ConsumeQueue + index caught up", f"{batched['with_dispatch_msgs_s']:,.0f} "
         "msgs/s", ""),
        ("ASYNC_FLUSH append, one call per message", f"{single['msgs_s']:,.0f} msgs/s",
         f"{single['mb_s']:,.1f} MB/s"),
        ("SYNC_FLUSH, 1 writer", f"{sync_1:,.0f} msgs/s", ""),
        ("SYNC_FLUSH, 64 concurrent writers", f"{sync_64:,.0f} msgs/s",
         f"{sync_64 / sync_1:,.1f}x one writer (group commit)" if sync_1 else ""),
        ("pull read, 32 per call, raw records", f"{read:,.0f} msgs/s", ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"rocketq store benchmark: {BODY_SIZE}-byte messages, {args.count:,} messages, "
          f"{os.cpu_count()} cores, Python {sys.version.split()[0]}")
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>18}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
