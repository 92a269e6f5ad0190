"""The offset log (broker/offsets/log.py) through what a review found: a demoted master whose
log is cut, a commit while puts are refused (the dispatch then runs on the appending thread),
values a record cannot hold, a slave's copy of its master's table, records that could not be
written, and a repeated commit while its record is still settling."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading

import orjson
import pytest

from rocketq.broker.offsets.log import OffsetLog
from rocketq.broker.offsets.log_records import OffsetRecord, encode_record
from rocketq.broker.offsets.requests import OffsetRequests
from rocketq.broker.offsets.table import COMMIT, ConsumerOffsets
from rocketq.broker.replication.slave_sync import SlaveSync
from rocketq.broker.store_writer import StoreWriter
from rocketq.ha import HAServer
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient
from rocketq.store import MessageStore
from rocketq.store.config import ASYNC_MASTER, SLAVE

from ..store.conftest import small_config
from .test_offset_log import Broker


def replicate(src: Broker, dst: Broker) -> None:
    """Copy the bytes of ``src``'s CommitLog that ``dst`` lacks, as the HA stream does, and
    wait until ``dst`` dispatched them."""
    at = dst.store.commitlog.max_offset
    for _ in range(10_000):
        if at >= src.store.commitlog.max_offset:
            break
        chunk = src.store.commitlog.read_chunk(at, 1 << 16)
        assert chunk is not None
        at = dst.store.append_replica(at, bytes(chunk))
    dst.store.wait_dispatched()


def checkpoint(b: Broker) -> dict:
    b.offsets.persist(force=True)
    with open(os.path.join(b.config_dir, "consumerOffset.json"), "rb") as fh:
        return orjson.loads(fh.read())


def follower_of(master: Broker, root) -> Broker:
    """A broker whose log is ``master``'s so far, then made a master itself."""
    b = Broker(root)
    b.store.set_role(SLAVE)
    replicate(master, b)
    b.store.set_role(ASYNC_MASTER)
    return b


def sync_from(slave: Broker, master: Broker) -> None:
    """What replication/slave_sync.py does with the master's GET_ALL_CONSUMER_OFFSET answer."""
    sync = SlaveSync(RemotingClient(), lambda: "", None, slave.offsets, None, None)
    sync._offsets(orjson.loads(orjson.dumps(master.offsets.wrapper())))


# ---------------------------------------------------------------------- 1. truncation
@pytest.mark.parametrize("held", [False, True], ids=["whole-log-dispatched", "held-at-confirm"])
def test_a_demoted_master_applies_the_new_masters_records_and_drops_its_cut_commits(
        tmp_path, held):
    a = Broker(tmp_path / "a")
    b = None
    try:
        for i in range(5):
            a.offsets.commit("g", "T", 0, i + 1)
        a.store.wait_dispatched()
        assert checkpoint(a)["offsetLogOffset"] == 5
        b = follower_of(a, tmp_path / "b")
        assert b.offsets.table("g", "T") == {0: 5} and b.offsets.log_offset == 5
        keep = a.store.commitlog.max_offset
        if held:  # the tail waits for the replicas' acknowledgement: never dispatched here
            a.store.limit_dispatch(lambda: keep)
        # a's own commits, which its group never agreed on, ...
        a.offsets.commit("g", "T", 0, 100)
        a.offsets.commit("g", "T", 1, 50)
        a.store.wait_dispatched()
        assert a.offsets.log_offset == (5 if held else 7)
        # ... and the new master's, at the same queue offsets of the offset log.
        b.offsets.commit("g", "T", 2, 7)
        b.offsets.commit("g", "T", 0, 6)
        b.store.wait_dispatched()
        # a is demoted: it cuts what b does not share, and follows b.
        a.store.set_role(SLAVE)
        assert a.store.truncate(keep) == keep
        a.store.limit_dispatch(None)
        assert a.offsets.log_offset == 5
        assert a.offsets.table("g", "T") == {0: 5}  # the cut commits are gone at once
        replicate(b, a)
        assert a.offsets.table("g", "T") == b.offsets.table("g", "T") == {0: 6, 2: 7}
        assert a.offsets.log_offset == b.offsets.log_offset == 7
        assert checkpoint(a)["offsetLogOffset"] == 7
    finally:
        a.close()
        if b is not None:
            b.close()


def test_cut_commits_in_a_newer_checkpoint_go_with_the_masters_next_copy(tmp_path):
    a = Broker(tmp_path / "a")
    b = None
    try:
        a.offsets.commit("g", "T", 0, 1)
        a.offsets.commit("h", "T", 0, 4)
        a.store.wait_dispatched()
        b = follower_of(a, tmp_path / "b")
        keep = a.store.commitlog.max_offset
        a.offsets.commit("g", "T", 1, 50)  # cut below
        a.offsets.remove_group("h")  # cut below: h's offset comes back
        a.store.wait_dispatched()
        checkpoint(a)  # the checkpoint holds them, and covers records that are cut
        b.offsets.commit("g", "T", 0, 2)
        b.store.wait_dispatched()
        a.store.set_role(SLAVE)
        a.store.truncate(keep)
        assert a.offsets.log_offset == 2
        replicate(b, a)
        assert a.offsets.log_offset == 3
        sync_from(a, b)  # the copy settles what the checkpoint could not
        assert a.offsets.offsets == b.offsets.offsets == {"T@g": {0: 2}, "T@h": {0: 4}}
    finally:
        a.close()
        if b is not None:
            b.close()


# ---------------------------------------------------------------------- 2. no self-deadlock
def test_commits_while_puts_are_refused_do_not_deadlock_on_the_inline_dispatch(tmp_path):
    """A refused put first retries the dispatcher on the appending thread (housekeeping's
    ``_still_refused``); the dispatch applies offset records under the table's lock, which
    a commit must not hold while it appends."""
    b = Broker(tmp_path)
    store = b.store
    held = store.commitlog.max_offset
    worker: threading.Thread | None = None
    errors: list[BaseException] = []

    def changes() -> None:
        try:
            b.offsets.commit("g", "T", 1, 2)
            arm()
            b.offsets.remove_group("h")
        except BaseException as exc:  # reported below
            errors.append(exc)

    def arm() -> None:
        # What a ConsumeQueue write that found no room leaves: puts refused until a
        # dispatch succeeds again.
        store._dispatch_failed(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        store._next_logics_probe = 0.0

    # Only the worker's own dispatch passes the records appended before it starts.
    store.limit_dispatch(lambda: 1 << 62 if threading.current_thread() is worker else held)
    try:
        b.offsets.commit("h", "T", 0, 1)
        b.offsets.commit("g", "T", 0, 1)  # appended, not dispatched yet
        assert b.store.get_max_offset("rmq_sys_CONSUMER_OFFSET_LOG", 0) == 0
        worker = threading.Thread(target=changes, daemon=True)
        arm()
        assert store.refusal is not None
        worker.start()
        worker.join(10)
        if worker.is_alive():  # the store's locks are held for good: leave it open
            pytest.fail("the commit deadlocked on its own inline dispatch")
        assert not errors, errors
        store.limit_dispatch(None)
        store.wait_dispatched()
        assert b.offsets.offsets == {"T@g": {0: 1, 1: 2}}
        assert b.offsets.log_offset == 4 and b.log.written == 4
    finally:
        if worker is None or not worker.is_alive():
            b.close()


# ---------------------------------------------------------------------- 3. bad values
def test_values_a_record_cannot_hold_are_refused_before_anything_changes(tmp_path):
    for bad in (OffsetRecord(COMMIT, "g", "T", 1 << 31, 0),
                OffsetRecord(COMMIT, "g", "T", -1, 0),
                OffsetRecord(COMMIT, "g", "T", 0, 1 << 63),
                OffsetRecord(COMMIT, "g" * 70_000, "T", 0, 0)):
        with pytest.raises(ValueError):
            encode_record(bad)
    b = Broker(tmp_path)
    try:
        with pytest.raises(ValueError, match="queueId"):
            b.offsets.commit("g", "T", 1 << 40, 5)
        with pytest.raises(ValueError, match="commitOffset"):
            b.offsets.commit("g", "T", 0, 1 << 64)
        assert b.offsets.offsets == {} and b.log.written == 0
        # The log itself answers a record it cannot write, it does not raise.
        done = b.log.changed(COMMIT, "g", "T", 1 << 40, 0)
        assert done is not None and done.appended is None and "queue id" in done.error
    finally:
        b.close()


@pytest.mark.slow
def test_update_consumer_offset_refuses_a_queue_id_beyond_a_java_int(st, caplog):
    broker = st.start_broker("broker-a")

    async def update(queue_id, offset):
        client = RemotingClient()
        try:
            return await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": "cg", "topic": "T", "queueId": queue_id,
                    "commitOffset": offset}), 3)
        finally:
            await client.close()

    with caplog.at_level(logging.INFO, logger="rocketq"):
        for queue_id in (1 << 31, 1 << 40, -1):
            r = st.call(update(queue_id, 5))
            assert r.code == ResponseCode.INVALID_PARAMETER, r
            assert "queueId" in r.remark
        assert st.call(update(3, 9)).code == ResponseCode.SUCCESS
    assert broker.offsets.table("cg", "T") == {3: 9}
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


# ---------------------------------------------------------------------- 4. slave copies
def test_a_copy_at_least_as_new_as_the_log_takes_over_with_its_removals(tmp_path):
    m = Broker(tmp_path / "m")
    s = None
    try:
        m.offsets.commit("g", "T", 0, 5)
        m.offsets.commit("h", "T", 0, 1)
        m.store.wait_dispatched()
        s = Broker(tmp_path / "s")
        s.store.set_role(SLAVE)
        replicate(m, s)
        assert s.offsets.offsets == {"T@g": {0: 5}, "T@h": {0: 1}}
        s.offsets.commit("g", "T", 0, 99)  # a consumer committed to the slave, say
        m.offsets.remove_group("h")
        m.offsets.commit("g", "T", 1, 3)
        m.store.wait_dispatched()
        sync_from(s, m)  # the master's copy covers more of the log than the slave's table
        assert s.offsets.offsets == m.offsets.offsets == {"T@g": {0: 5, 1: 3}}
        replicate(m, s)  # the records the copy holds already: the same table in the end
        assert s.offsets.log_offset == 4 and s.offsets.offsets == {"T@g": {0: 5, 1: 3}}
    finally:
        m.close()
        if s is not None:
            s.close()


def test_a_copy_older_than_the_log_sets_nothing_back_and_still_removes(tmp_path):
    m = Broker(tmp_path / "m")
    s = None
    try:
        m.offsets.commit("g", "T", 0, 5)
        m.offsets.commit("h", "T", 0, 1)
        m.offsets.remove_group("h")
        m.store.wait_dispatched()
        old = orjson.loads(orjson.dumps(m.offsets.wrapper()))  # covers 3 records
        m.offsets.commit("g", "T", 0, 8)
        m.offsets.commit("g", "T", 2, 4)
        m.store.wait_dispatched()
        s = Broker(tmp_path / "s")
        s.store.set_role(SLAVE)
        replicate(m, s)
        s.offsets.commit("x", "T", 0, 7)  # the slave's own, which the master does not have
        assert s.offsets.log_offset == 5
        SlaveSync(RemotingClient(), lambda: "", None, s.offsets, None, None)._offsets(old)
        assert s.offsets.offsets == {"T@g": {0: 8, 2: 4}}
    finally:
        m.close()
        if s is not None:
            s.close()


# ---------------------------------------------------------------------- 5. failed records
class Leased:
    """A master's store, table and log with a StoreWriter whose lease the test controls."""

    def __init__(self, root, replicas: bool = False, **store_conf) -> None:
        self.config_dir = str(root / "config")
        os.makedirs(self.config_dir, exist_ok=True)
        self.offsets = ConsumerOffsets(self.config_dir)
        self.store = MessageStore(small_config(root, **store_conf))
        self.writer = StoreWriter(self.store, HAServer(self.store, "127.0.0.1", 0)
                                  if replicas else None)
        self.lease = True
        self.writer.may_write = lambda: self.lease
        self.log = OffsetLog(self.offsets, writer=lambda: self.writer)
        self.log.attach(self.store)
        self.requests = OffsetRequests(self.offsets, lambda: self.store, self.log)

    def update(self, queue_id: int, offset: int) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET as the broker's handler answers it."""
        answer = self.requests.update_consumer_offset(None, RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T",
                                                 "queueId": queue_id, "commitOffset": offset}))
        return asyncio.run(answer) if asyncio.iscoroutine(answer) else answer

    def close(self) -> None:
        self.store.close()
        self.writer.close()


def test_a_commit_whose_record_was_not_written_is_written_at_its_next_commit(tmp_path):
    b = Leased(tmp_path)
    try:
        b.offsets.commit("g", "T", 0, 3)
        b.lease = False  # the lease lapsed: the record is not written
        b.offsets.commit("g", "T", 0, 5)
        assert b.offsets.query("g", "T", 0) == 5 and b.log.written == 1
        b.lease = True
        b.offsets.commit("g", "T", 0, 5)  # the same offset again: written now
        assert b.log.written == 2
        b.offsets.commit("g", "T", 0, 5)  # and only once
        assert b.log.written == 2
        b.store.wait_dispatched()
    finally:
        b.close()  # no checkpoint: the restart has the log alone
    again = Broker(tmp_path)
    try:
        assert again.offsets.query("g", "T", 0) == 5
    finally:
        again.close()


# ---------------------------------------------------------------------- 6. settling
def test_a_repeated_commit_waits_for_the_record_still_settling(tmp_path):
    b = Leased(tmp_path, flushDiskType="SYNC_FLUSH")

    async def go():
        first = b.offsets.commit("g", "T", 0, 5)
        again = b.offsets.commit("g", "T", 0, 5)  # before the first settled
        assert again is not None and again is first and b.log.written == 1
        assert await asyncio.gather(b.log.wait(again), b.log.wait(first)) == [None, None]
        assert b.offsets.commit("g", "T", 0, 5) is None  # settled: nothing to wait for

    try:
        asyncio.run(go())
    finally:
        b.close()


def test_a_commit_whose_record_was_not_written_answers_an_error(tmp_path):
    b = Leased(tmp_path)
    try:
        b.lease = False
        r = b.update(0, 5)
        assert r.code == ResponseCode.SYSTEM_ERROR and "lease" in r.remark
        assert b.offsets.query("g", "T", 0) == 5 and b.log.written == 0
        b.lease = True
        assert b.update(0, 5).code == ResponseCode.SUCCESS and b.log.written == 1
    finally:
        b.close()


def test_a_sync_master_without_a_slave_answers_a_commit_as_settled(tmp_path):
    # A send is SLAVE_NOT_AVAILABLE there; a commit is answered SUCCESS, as RocketMQ answers
    # every commit: its record is in the log and reaches a slave when one connects.
    b = Leased(tmp_path, replicas=True, brokerRole="SYNC_MASTER")
    try:
        assert b.update(0, 5).code == ResponseCode.SUCCESS and b.log.written == 1
        assert b.update(0, 5).code == ResponseCode.SUCCESS and b.log.written == 1
        assert b.offsets.query("g", "T", 0) == 5
    finally:
        b.close()
