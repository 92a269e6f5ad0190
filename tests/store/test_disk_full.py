"""A full disk, as the store sees it: the four keys (diskMaxUsedSpaceRatio,
diskSpaceCleanForciblyRatio, diskSpaceWarningLevelRatio, cleanFileForciblyEnable), the refusal
of puts while reads go on, and the report of files deleted before every group read them.

The disk's usage is given by the test (``retention.disk_used_ratio`` replaced); the tests on a
real small filesystem are in ``tests/broker/test_disk_full.py``."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from rocketq.store import (
    DiskFullError,
    GetStatus,
    MessageStore,
    StoreMessage,
    housekeeping,
    retention,
)

from .conftest import small_config
from .test_retention import age_files, fill_files, other_hour


@pytest.fixture
def usage(monkeypatch):
    """The disk usage every store directory reports, percent: set ``usage["ratio"]``, or
    ``usage["of"]`` to a function of the directory. The housekeeper looks at the disks once,
    as the store starts, and then leaves it to the test."""
    state: dict = {"ratio": 10.0, "of": None}

    def ratio(path: str) -> float:
        return state["of"](path) if state["of"] else state["ratio"]

    monkeypatch.setattr(retention, "disk_used_ratio", ratio)
    monkeypatch.setattr(housekeeping, "DISK_CHECK_INTERVAL", 3600.0)
    return state


def read_all(store, topic="T", queue_id=0):
    bodies, offset = [], 0
    while True:
        with store.get_messages(topic, queue_id, offset, 32) as found:
            got = found.decode()
            if not got:
                return bodies
            bodies += [m.body for m in got]
            offset = found.next_begin_offset


def config(root, **overrides):
    return small_config(root, cleanResourceInterval=3_600_000, **overrides)


def test_puts_refused_over_the_warning_level_until_back_at_the_forcibly_ratio(tmp_path, usage):
    store = MessageStore(config(tmp_path, deleteWhen=other_hour()))
    try:
        first = store.put_message(StoreMessage.create("T", b"before", 0))
        usage["ratio"] = 91.0
        remark = store.check_disk()
        assert remark is not None and "disk is full" in remark
        assert store.config.storePathCommitLog in remark and "91%" in remark
        with pytest.raises(DiskFullError, match="disk is full"):
            store.put_message(StoreMessage.create("T", b"refused", 0))
        assert store.counters.puts_refused_disk_full == 1
        # Reads go on.
        store.wait_dispatched()
        with store.get_messages("T", 0, 0, 10) as found:
            assert [m.body for m in found.decode()] == [b"before"]
        # Between the two ratios the store stays full (RocketMQ's hysteresis) ...
        usage["ratio"] = 88.0
        assert store.check_disk() is not None
        # ... and takes puts again at diskSpaceCleanForciblyRatio.
        usage["ratio"] = 85.0
        assert store.check_disk() is None
        after = store.put_message(StoreMessage.create("T", b"after", 0))
        assert after.queue_offset == first.queue_offset + 1
    finally:
        store.close()


def test_a_full_consume_queue_or_index_directory_counts_too(tmp_path, usage):
    store = MessageStore(config(tmp_path))
    try:
        for full in (store.config.store_path_consume_queue, store.config.store_path_index):
            usage["of"] = lambda path, full=full: 95.0 if path == full else 10.0
            remark = store.check_disk()
            assert remark is not None and full in remark
            usage["of"] = None
            assert store.check_disk() is None
    finally:
        store.close()


def test_clean_file_forcibly_disabled_deletes_nothing_unexpired(tmp_path, usage):
    store = MessageStore(config(tmp_path, deleteWhen=other_hour(),
                                      cleanFileForciblyEnable=False))
    try:
        fill_files(store, 5)
        age_files(store, 100, 1)  # one file past fileReservedTime
        usage["ratio"] = 99.0
        assert store.clean_expired_files() == 1  # the expired one goes at once
        files = len(store.commitlog.files.files)
        for _ in range(3):
            assert store.clean_expired_files() == 0
        assert len(store.commitlog.files.files) == files
        assert store.refusal is not None  # the disk stays full: puts are refused instead
        with pytest.raises(DiskFullError):
            store.put_message(StoreMessage.create("T", b"x", 0))
    finally:
        store.close()


def test_forced_deletion_names_the_groups_that_lose_messages(tmp_path, usage, caplog):
    committed = [("slow-group", "T", 0, 3), ("slow-group", "T", 1, 0),
                 ("fast-group", "T", 0, 10**9)]
    store = MessageStore(config(tmp_path, deleteWhen=other_hour()),
                         consumer_offsets=lambda: committed)
    try:
        fill_files(store, 5)
        files = list(store.commitlog.files.files)
        # Each file on disk is 2 points of usage over 80 %: deleting goes on, one file at a
        # time, until usage is back at diskSpaceCleanForciblyRatio (85).
        usage["of"] = lambda path: 80.0 + 2 * len(store.commitlog.files.files)
        units = {q: [store.consume_queues[("T", q)].unit(i)
                     for i in range(store.get_max_offset("T", q))] for q in (0, 1)}
        caplog.set_level(logging.INFO, logger="rocketq.store")
        deleted = store.clean_expired_files()
        assert deleted == 3 and store.commitlog.files.files == files[3:]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                    and "before every consumer group read it" in r.getMessage()]
        assert len(warnings) == 3  # once per file
        expected_lost = 0
        for f, text in zip(files[:3], warnings, strict=True):
            assert os.path.basename(f.path) in text and "cleanFileForciblyEnable=true" in text
            assert "slow-group" in text and "fast-group" not in text
            end = f.from_offset + f.file_size
            for q, first in ((0, 3), (1, 0)):
                in_file = [i for i, u in enumerate(units[q])
                           if f.from_offset <= u[0] < end and i >= first]
                if in_file:
                    assert f"queue T:{q} offsets {in_file[0]}..{in_file[-1]}" in text
                expected_lost += len(in_file)
        c = store.counters
        assert c.commitlog_files_deleted == 3 and c.commitlog_files_deleted_unconsumed == 3
        assert c.messages_deleted_unconsumed == expected_lost
        assert store.get_messages("T", 0, 0, 1).status is GetStatus.OFFSET_TOO_SMALL
    finally:
        store.close()


def no_space_for(size):
    """A ``posix_fallocate`` that fails with ENOSPC for files of ``size`` bytes."""
    real = os.posix_fallocate

    def fallocate(fd, offset, length):
        if length == size:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, offset, length)
    return fallocate


def test_a_put_whose_unit_would_need_a_consume_queue_file_without_room_is_refused(
        tmp_path, monkeypatch, usage):
    # The ConsumeQueue file a unit goes in is made before the put is acknowledged: when the
    # disk has no room for it, the put is refused and nothing of it is stored, rather than
    # acknowledged and then unreadable until space is freed.
    store = MessageStore(config(tmp_path, mappedFileSizeConsumeQueue=20 * 4))
    try:
        for i in range(4):
            store.put_message(StoreMessage.create("T", b"%d" % i, 0))
        store.put_message(StoreMessage.create("T", b"q1", 1))
        store.wait_dispatched()
        end = store.commitlog.max_offset
        monkeypatch.setattr(os, "posix_fallocate", no_space_for(20 * 4))
        with pytest.raises(DiskFullError, match="disk is full") as refused:
            store.put_message(StoreMessage.create("T", b"4", 0))  # needs a new file
        assert store.config.store_path_consume_queue in str(refused.value)
        assert "T:0" in str(refused.value)
        with pytest.raises(DiskFullError):  # a batch too, whole
            store.put_messages([StoreMessage.create("T", b"b%d" % i, 0) for i in range(3)])
        assert store.commitlog.max_offset == end  # nothing stored
        assert store.counters.puts_refused_disk_full == 2
        # A queue whose file has room still takes messages, and every one is readable.
        store.put_message(StoreMessage.create("T", b"q1 more", 1))
        assert store.wait_dispatched(timeout=5)
        assert read_all(store) == [b"0", b"1", b"2", b"3"]
        assert read_all(store, queue_id=1) == [b"q1", b"q1 more"]
        monkeypatch.undo()
        after = store.put_message(StoreMessage.create("T", b"4", 0))
        assert after.queue_offset == 4  # the refused puts took no queue offset
        store.wait_dispatched()
        assert read_all(store) == [b"0", b"1", b"2", b"3", b"4"]
        # Files are made ahead for a whole batch that crosses several of them.
        store.put_messages([StoreMessage.create("T", b"%d" % i, 0) for i in range(5, 15)])
        store.wait_dispatched()
        assert read_all(store) == [b"%d" % i for i in range(15)]
    finally:
        store.close()


def test_units_a_consume_queue_file_had_no_room_for_are_written_once_there_is_room(
        tmp_path, monkeypatch, usage):
    # Where the put could not make the file first (a slave dispatching its master's log),
    # the dispatcher retries: the messages become readable as soon as there is room.
    master = MessageStore(config(tmp_path / "master", mappedFileSizeConsumeQueue=20 * 4))
    slave = MessageStore(config(tmp_path / "slave", mappedFileSizeConsumeQueue=20 * 4,
                                brokerRole="SLAVE"))
    try:
        for i in range(6):
            master.put_message(StoreMessage.create("T", b"%d" % i, 0))
        log_bytes = master.commitlog.read_chunk(0, master.commitlog.max_offset)
        slave.append_replica(0, log_bytes[:master.commitlog.max_offset // 2])
        assert slave.wait_dispatched(timeout=5)
        monkeypatch.setattr(os, "posix_fallocate", no_space_for(20 * 4))
        slave.append_replica(slave.commitlog.max_offset,
                             log_bytes[slave.commitlog.max_offset:])
        assert not slave.wait_dispatched(timeout=0.5)
        assert read_all(slave) == [b"0", b"1", b"2", b"3"]  # reads go on
        assert slave.dispatcher.failure is not None
        monkeypatch.undo()
        assert slave.wait_dispatched(timeout=5)
        assert read_all(slave) == [b"%d" % i for i in range(6)]
        assert slave.dispatcher.failure is None
        assert slave.check_disk() is None
    finally:
        log_bytes = None
        slave.close()
        master.close()


def test_no_room_for_the_next_index_file_refuses_puts_and_keeps_every_key(
        tmp_path, monkeypatch, usage):
    # The index makes its next file ahead of time: when it cannot, puts are refused while
    # the file being written still has room for the keys of what was acknowledged.
    store = MessageStore(config(tmp_path, maxHashSlotNum=8, maxIndexNum=10))
    index_file_size = 40 + 8 * 4 + 10 * 20
    try:
        store.put_message(StoreMessage.create("T", b"0", 0, keys="k0"))
        assert store.wait_dispatched(timeout=5)
        assert store.index.spare is not None
        monkeypatch.setattr(os, "posix_fallocate", no_space_for(index_file_size))
        acked = 1
        with pytest.raises(DiskFullError, match="index directory"):
            for i in range(1, 40):
                store.put_message(StoreMessage.create("T", b"%d" % i, 0, keys=f"k{i}"))
                acked += 1
                store.wait_dispatched(timeout=5)
        assert acked < 20  # refused once the spare was taken, not when keys were lost
        for i in range(acked):
            assert [m.body for m in store.query_messages("T", f"k{i}")] == [b"%d" % i]
        monkeypatch.undo()
        assert store.check_disk() is None and store.index.spare is not None
        store.put_message(StoreMessage.create("T", b"more", 0, keys="more"))
        assert store.wait_dispatched(timeout=5)
        assert [m.body for m in store.query_messages("T", "more")] == [b"more"]
    finally:
        store.close()
