"""The dispatcher thread with the compiled scan: batches are dispatched on it, off the event
loop, while the loop appends single messages and serves reads; a store SIGKILLed in the
middle of that rebuilds, on restart, the very units and index entries the reference Python
dispatcher builds from the same CommitLog."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from rocketq.protocol.message import encode_batch
from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage, records
from rocketq.store.consumequeue import ConsumeQueue
from rocketq.store.dispatch import Dispatcher
from rocketq.store.index import Index
from rocketq.store.index_file import ENTRY
from rocketq.store.messages import BatchMessage

needs_compiled = pytest.mark.skipif(not records.COMPILED,
                                    reason="the compiled records are not in use")
TOPIC = "Load"
QUEUES = 4


def config(root: str) -> MessageStoreConfig:
    return MessageStoreConfig(storePathRootDir=root, mappedFileSizeCommitLog=1 << 20,
                              mappedFileSizeConsumeQueue=20 * 4096, maxHashSlotNum=4096,
                              maxIndexNum=65536, flushIntervalConsumeQueue=50)


def batch(queue_id: int, first: int, n: int) -> BatchMessage:
    return BatchMessage(TOPIC, encode_batch([
        (0, b"m%08d" % (first + i) + b"x" * 100,
         f"KEYS\x01k{first + i}\x02UNIQ_KEY\x01U{first + i:030d}\x02".encode())
        for i in range(n)]), queue_id)


@needs_compiled
def test_batches_dispatch_on_the_thread_while_the_loop_appends_and_reads(tmp_path):
    store = MessageStore(config(str(tmp_path)))
    loop = asyncio.new_event_loop()
    store.dispatch_via(loop.call_soon)  # as a broker does
    threads: set[str] = set()
    woken: dict[int, float] = {}
    store.add_dispatch_listener(lambda topic, queue_id, max_offset: (
        threads.add(threading.current_thread().name),
        woken.__setitem__(queue_id, time.monotonic())))
    sent = {q: 0 for q in range(QUEUES)}
    read: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}

    async def produce() -> None:
        number = 0
        for _ in range(150):  # bounded: 150 rounds of 4 batches and 4 single messages
            for q in range(QUEUES):
                store.put_messages(batch(q, number, 24))  # about 4 KiB: the thread's
                number += 24
                sent[q] += 24
                store.put_messages([StoreMessage(TOPIC, b"m%08d" % number, q)])  # inline
                number += 1
                sent[q] += 1
            await asyncio.sleep(0)

    async def consume() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for q in range(QUEUES):
                with store.get_messages(TOPIC, q, len(read[q]), 64) as result:
                    for record in result.decode():
                        read[q].append(bytes(record.body[:9]))
            if sum(map(len, read.values())) >= 150 * QUEUES * 25:
                return
            await asyncio.sleep(0.001)

    async def main() -> None:
        await asyncio.gather(produce(), consume())

    try:
        loop.run_until_complete(asyncio.wait_for(main(), 90))
        assert store.dispatcher.wait_dispatched(timeout=10)
        # Every message read once, in order, per queue: no unit lost or doubled.
        for q in range(QUEUES):
            assert len(read[q]) == sent[q]
            assert read[q] == sorted(read[q]) and len(set(read[q])) == sent[q]
            assert store.get_max_offset(TOPIC, q) == sent[q]
        assert "rocketq-store-dispatcher" in threads  # the batches went to the thread
        # A batch appended while readers wait is dispatched, and listeners told, at once.
        for q in range(QUEUES):
            before = woken.get(q, 0.0)
            at = time.monotonic()
            store.put_messages(batch(q, 10_000_000, 40))
            limit = at + 2.0
            while woken.get(q, 0.0) <= before and time.monotonic() < limit:
                time.sleep(0.001)
            assert woken.get(q, 0.0) > before, "no listener was told of the new batch"
            assert store.get_max_offset(TOPIC, q) == sent[q] + 40
        assert [r.body[:9] for r in store.query_messages(TOPIC, "k12345")] == [b"m00012345"]
    finally:
        store.dispatch_via(None)
        store.close()
        loop.close()


CHILD = r"""
import sys, time
from rocketq.store import MessageStore, StoreMessage
sys.path.insert(0, sys.argv[2])
from test_dispatch_thread import batch, config
store = MessageStore(config(sys.argv[1]))
number = 0
print("ready", flush=True)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:  # bounded: the parent kills it long before
    for q in range(4):
        store.put_messages(batch(q, number, 40))
        number += 40
        store.put_messages([StoreMessage("Load", b"s%08d" % number, q)])
        number += 1
"""


def snapshot(queues: list[ConsumeQueue], index: Index) -> tuple[dict, list[tuple[int, int]]]:
    """Each queue's units, and the (key hash, CommitLog offset) of every index entry."""
    units = {cq.queue_id: b"".join(bytes(f.mm[:f.wrote_position]) for f in cq.files.files)
             for cq in queues}
    entries = []
    for f in index.files:
        for n in range(1, f.index_count):
            key_hash, phys, _diff, _prev = ENTRY.unpack_from(f.file.mm, f._entries_at + n * 20)
            entries.append((key_hash, phys))
    return units, entries


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [0.4, 0.9])
def test_a_store_killed_mid_dispatch_recovers_the_units_the_reference_builds(tmp_path,
                                                                            kill_after):
    root = str(tmp_path / "store")
    child = subprocess.Popen([sys.executable, "-c", CHILD, root, os.path.dirname(__file__)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(kill_after)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    cfg = config(root)
    store = MessageStore(cfg)  # recovery: the compiled scan, validating
    try:
        assert store.dispatcher.wait_dispatched(timeout=30)
        end = store.commitlog.max_offset
        assert end > 0
        recovered = snapshot([store.queues.get(TOPIC, q) for q in range(QUEUES)],
                             store.index)
    finally:
        store.close()
    # The reference: the Python dispatcher over the same CommitLog, into fresh files.
    with tempfile.TemporaryDirectory() as ref_root:
        ref_cfg = config(ref_root)
        store = MessageStore(cfg, start=False)
        queues: dict[int, ConsumeQueue] = {}

        def get_queue(topic: str, queue_id: int) -> ConsumeQueue:
            if queue_id not in queues:
                queues[queue_id] = ConsumeQueue(ref_cfg.store_path_consume_queue, topic,
                                                queue_id, ref_cfg.mappedFileSizeConsumeQueue)
            return queues[queue_id]

        index = Index(ref_cfg.store_path_index, ref_cfg.maxHashSlotNum, ref_cfg.maxIndexNum)
        index.load()
        store.commitlog.files.load()
        reference = Dispatcher(store.commitlog, index, get_queue)
        reference.compiled = None
        while reference.reput_offset < end:
            count, _ = reference.run(end)
            if not count:
                break
        expected = snapshot([queues[q] for q in sorted(queues)], index)
        for cq in queues.values():
            cq.close()
        index.close()
        store.commitlog.files.close()
    assert recovered[0] == expected[0]
    # The same entries in the same order (their files split where each index filled up).
    assert recovered[1] == expected[1]
    assert sum(len(u) for u in recovered[0].values()) > 20 * 100


@needs_compiled
def test_a_long_poll_is_answered_as_soon_as_a_batch_is_dispatched_on_the_thread(cluster):
    from rocketq import Message
    from rocketq.client.producer import AsyncProducer
    from rocketq.client.pull import AsyncPullConsumer

    from ..conftest import run_async

    async def main() -> list[float]:
        await cluster.start_namesrv()
        await cluster.start_broker()
        delays = []
        async with AsyncProducer("pg", cluster.namesrv) as producer, \
                AsyncPullConsumer("lp", cluster.namesrv, from_where="first",
                                  suspend_timeout=20.0) as consumer:
            await producer.send(Message("LongPolled", b"first"))
            consumer.subscribe("LongPolled")
            assert [m.body for m in await consumer.poll(10)] == [b"first"]
            for n in range(5):
                # The consumer's pulls wait at the broker (20 s at most) when the batch goes
                # out; the dispatcher thread's run must answer them.
                poll = asyncio.ensure_future(consumer.poll(15))
                await asyncio.sleep(0.3)
                bodies = [b"%d-%d-" % (n, i) + b"x" * 200 for i in range(32)]
                at = time.monotonic()
                await producer.send_batch([Message("LongPolled", body) for body in bodies])
                got = await poll
                while len(got) < 32:
                    got += await consumer.poll(15)
                delays.append(time.monotonic() - at)
                assert sorted(m.body for m in got) == sorted(bodies)
        return delays

    delays = run_async(main(), 90)
    assert max(delays) < 3.0, delays  # far below the 20 s a pull may wait
