"""Flush modes: ASYNC_FLUSH in the background, SYNC_FLUSH with group commit."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from rocketq.broker.store_writer import StoreWriter
from rocketq.protocol.message import encode_batch
from rocketq.store import BatchMessage, MessageStore, PutStatus, StoreMessage

from .conftest import small_config


def count_fsyncs(monkeypatch, delay: float = 0.0):
    calls = []
    real = os.fdatasync

    def counting(fd):
        calls.append(fd)
        if delay:
            time.sleep(delay)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    return calls


def test_async_flush_reaches_disk_in_background(tmp_path):
    store = MessageStore(small_config(tmp_path, flushIntervalCommitLog=50))
    try:
        r = store.put_message(StoreMessage.create("T", b"x" * 100, 0))
        end = r.commitlog_offset + r.size
        deadline = time.monotonic() + 5
        while store.commitlog.files.flushed_offset < end and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.commitlog.files.flushed_offset >= end
    finally:
        store.close()


def test_sync_flush_put_returns_only_when_durable(tmp_path):
    store = MessageStore(small_config(tmp_path, flushDiskType="SYNC_FLUSH"))
    try:
        for _ in range(5):
            r = store.put_message(StoreMessage.create("T", b"x" * 100, 0))
            assert r.status is PutStatus.PUT_OK
            assert store.commitlog.files.flushed_offset >= r.commitlog_offset + r.size
        # A batch waits too, unless its own properties say WAIT=false.
        body = encode_batch([(0, b"b%d" % i, "") for i in range(4)])
        last = store.put_messages(BatchMessage("T", body, properties=b"WAIT\x01true\x02"))[-1]
        assert store.commitlog.files.flushed_offset >= last.commitlog_offset + last.size
        waits = []
        store.group_commit.wait = lambda *a: waits.append(a) or True
        store.put_messages(BatchMessage("T", body, properties=b"WAIT\x01false\x02"))
        store.put_messages(BatchMessage("T", body))
        assert len(waits) == 1
    finally:
        store.close()


def test_group_commit_shares_fsyncs_across_concurrent_writers(tmp_path, monkeypatch):
    fsyncs = count_fsyncs(monkeypatch, delay=0.005)
    store = MessageStore(small_config(tmp_path, flushDiskType="SYNC_FLUSH",
                                      mappedFileSizeCommitLog=1 << 20))

    async def writer(n, w):
        out = []
        for i in range(10):
            out.append(await w.put_message(
                StoreMessage.create("T", b"%d-%d" % (n, i), n % 4)))
        return out

    async def main():
        w = StoreWriter(store)
        try:
            return await asyncio.gather(*(writer(n, w) for n in range(64)))
        finally:
            w.close()

    try:
        before = len(fsyncs)
        results = [r for rs in asyncio.run(main()) for r in rs]
        used = len(fsyncs) - before
        assert all(r.status is PutStatus.PUT_OK for r in results)
        flushed = store.commitlog.files.flushed_offset
        assert all(r.commitlog_offset + r.size <= flushed for r in results)
        # 640 durable appends; with 64 writers waiting together, far fewer fsyncs.
        assert used < 640 / 8, used
    finally:
        store.close()


def test_wait_false_skips_waiting(tmp_path, monkeypatch):
    store = MessageStore(small_config(tmp_path, flushDiskType="SYNC_FLUSH",
                                      syncFlushTimeout=200))
    try:
        count_fsyncs(monkeypatch, delay=0.4)  # a very slow disk from here on
        t0 = time.monotonic()
        r = store.put_message(StoreMessage.create("T", b"x", 0, properties={"WAIT": "false"}))
        assert r.status is PutStatus.PUT_OK
        assert time.monotonic() - t0 < 0.15
    finally:
        store.close()


@pytest.mark.parametrize("use_async", [False, True])
def test_sync_flush_timeout_reports_flush_disk_timeout(tmp_path, monkeypatch, use_async):
    store = MessageStore(small_config(tmp_path, flushDiskType="SYNC_FLUSH",
                                      syncFlushTimeout=100))
    try:
        count_fsyncs(monkeypatch, delay=0.5)
        m = StoreMessage.create("T", b"x", 0)
        if use_async:
            r = asyncio.run(StoreWriter(store).put_message(m))
        else:
            r = store.put_message(m)
        assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
        # The message is stored all the same, as in RocketMQ.
        assert store.look_message_by_offset(r.commitlog_offset).body == b"x"
    finally:
        store.close()


def test_sync_flush_does_not_block_the_event_loop(tmp_path, monkeypatch):
    store = MessageStore(small_config(tmp_path, flushDiskType="SYNC_FLUSH"))
    count_fsyncs(monkeypatch, delay=0.2)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        r = await StoreWriter(store).put_message(StoreMessage.create("T", b"x", 0))
        task.cancel()
        return r, ticks

    try:
        r, ticks = asyncio.run(main())
        assert r.status is PutStatus.PUT_OK
        assert ticks >= 5  # the loop kept running during the 200 ms fsync
    finally:
        store.close()


def test_a_send_waiting_while_its_broker_is_demoted_is_not_reported_stored(tmp_path,
                                                                           monkeypatch):
    # Controller mode: a master demoted while a send waits for its fsync (or its replicas)
    # may cut that message when it follows the new master; it must not answer SEND_OK.
    store = MessageStore(small_config(tmp_path, flushDiskType="SYNC_FLUSH",
                                      syncFlushTimeout=5000))
    try:
        count_fsyncs(monkeypatch, delay=0.2)  # the send waits here

        async def main():
            w = StoreWriter(store)
            try:
                steady = await w.put_message(StoreMessage.create("T", b"a", 0))
                send = asyncio.ensure_future(w.put_message(StoreMessage.create("T", b"b", 0)))
                await asyncio.sleep(0.05)  # appended, waiting for the disk
                assert not send.done()
                w.role_changes += 1  # demoted meanwhile
                return steady, await send
            finally:
                w.close()

        steady, demoted = asyncio.run(main())
        assert steady.status is PutStatus.PUT_OK
        assert demoted.status is PutStatus.FLUSH_SLAVE_TIMEOUT
    finally:
        store.close()


def test_quick_fsyncs_run_on_the_loop_and_slow_ones_go_back_to_a_thread(tmp_path,
                                                                       monkeypatch):
    from rocketq.broker import store_writer

    store = MessageStore(small_config(tmp_path, flushDiskType="SYNC_FLUSH"))
    threads = []
    delay = 0.0
    # The disk's speed is the test's to set, not the machine's (whose fsyncs take anything
    # from microseconds to tens of milliseconds while other tests write): a quick disk
    # answers at once, a slow one in 0.2 s, ten times the limit for running inline.
    monkeypatch.setattr(store_writer, "INLINE_FSYNC_MAX", 0.02)

    def traced(fd):
        name = threading.current_thread().name
        if name == "MainThread" or name.startswith("rocketq-store-fsync"):
            threads.append(threading.get_ident())  # not the housekeeper's flushes
        if delay:
            time.sleep(delay)

    monkeypatch.setattr(os, "fdatasync", traced)

    async def main():
        nonlocal delay
        w = StoreWriter(store)
        loop_thread = threading.get_ident()
        try:
            for i in range(20):  # a quick disk: after a few rounds on the thread, inline
                assert (await w.put_message(StoreMessage.create("T", b"q%d" % i, 0))
                        ).status is PutStatus.PUT_OK
            assert threads[0] != loop_thread and threads[-1] == loop_thread
            delay = 0.2  # the disk turns slow: one round holds the loop, then a thread
            for i in range(3):
                assert (await w.put_message(StoreMessage.create("T", b"s%d" % i, 0))
                        ).status is PutStatus.PUT_OK
            assert threads[-3] == loop_thread and threads[-1] != loop_thread
        finally:
            w.close()

    try:
        asyncio.run(main())
    finally:
        store.close()
