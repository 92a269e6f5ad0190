"""CommitLog appends with ``pwrite`` (``putCommitLogDataByFileChannel``; appends under
``PWRITE_MIN_SIZE`` are still copied into the mapping): what lands in the file reads back the
same through the mapping, through ``os.pread`` and after a reopen, and the write-path keys take
their defaults from ``flushDiskType``."""

from __future__ import annotations

import os
import struct

import pytest

from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage
from rocketq.store.mapped_file import PWRITE_MIN_SIZE
from rocketq.store.mapped_file_queue import MappedFileQueue

from .conftest import small_config


def record(seq: int, size: int) -> bytes:
    """A record-shaped chunk: its size first (as TOTALSIZE), then bytes that say which."""
    body = (b"%08d" % seq) * (size // 8 + 1)
    return struct.pack(">i", size) + body[:size - 4]


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_pwrite_appends_read_back_through_the_mapping_and_pread(tmp_path, kind):
    files = MappedFileQueue(str(tmp_path / "log"), 1 << 20)
    files.set_write_mode(pwrite=True, zero_ahead=False)
    sizes = (8, 5, 333, PWRITE_MIN_SIZE - 1, PWRITE_MIN_SIZE, 4100, 70_000, 12, 4096)
    records = [record(i, size) for i, size in enumerate(sizes)]
    try:
        f = files.last_for_write()
        expected = 0
        for r in records:
            assert f.append(kind(r)) == expected
            expected += len(r)
        assert f.wrote_position == expected
        data = b"".join(records)
        assert f.view[:expected] == data  # readers keep reading the mapping
        assert os.pread(f.fd, expected, 0) == data
        assert f.view[expected:expected + 4096] == bytes(4096)
        assert files.flush() == expected
    finally:
        files.close()
    reopened = MappedFileQueue(str(tmp_path / "log"), 1 << 20)
    reopened.load()
    try:
        assert reopened.files[0].view[:len(data)] == data
    finally:
        reopened.close()


def test_a_sync_flush_store_writes_with_pwrite_and_recovers_the_same_records(tmp_path):
    config = small_config(tmp_path / "store", flushDiskType="SYNC_FLUSH")
    assert config.putCommitLogDataByFileChannel and config.warmMapedFileEnable
    bodies = [b"%05d" % i * (1 + i % 300) for i in range(400)]  # several 64 KiB files
    with MessageStore(config) as store:
        assert store.commitlog.files.pwrite
        results = [store.put_message(StoreMessage.create("T", b, i % 2))
                   for i, b in enumerate(bodies)]
        assert all(r.status.name == "PUT_OK" for r in results)
        assert len(store.commitlog.files.files) > 3
        store.wait_dispatched()
        for r, b in zip(results, bodies, strict=True):
            assert store.look_message_by_offset(r.commitlog_offset).body == b
        end = store.commitlog.max_offset
    with MessageStore(small_config(tmp_path / "store", flushDiskType="SYNC_FLUSH")) as store:
        assert store.commitlog.max_offset == end
        for r, b in zip(results, bodies, strict=True):
            assert store.look_message_by_offset(r.commitlog_offset).body == b
        for queue_id in (0, 1):
            with store.get_messages("T", queue_id, 0, 32) as found:
                assert [m.body for m in found.decode()] == bodies[queue_id::2][:32]


def test_the_write_path_keys_follow_the_flush_type_unless_given(tmp_path):
    root = str(tmp_path)
    sync = MessageStoreConfig(storePathRootDir=root, flushDiskType="SYNC_FLUSH")
    assert sync.warmMapedFileEnable is True and sync.putCommitLogDataByFileChannel is True
    asynchronous = MessageStoreConfig(storePathRootDir=root)
    assert asynchronous.warmMapedFileEnable is False
    assert asynchronous.putCommitLogDataByFileChannel is True
    given = MessageStoreConfig.from_dict({
        "storePathRootDir": root, "flushDiskType": "SYNC_FLUSH",
        "warmMapedFileEnable": "false", "putCommitLogDataByFileChannel": "false",
        "warmMappedFileAheadSize": "33554432"})
    assert given.warmMapedFileEnable is False and given.putCommitLogDataByFileChannel is False
    assert given.warmMappedFileAheadSize == 32 << 20
    asked = MessageStoreConfig.from_dict({"storePathRootDir": root,
                                          "putCommitLogDataByFileChannel": "false"})
    assert asked.putCommitLogDataByFileChannel is False and asked.warmMapedFileEnable is False
    with pytest.raises(ValueError, match="warmMapedFileEnable must be true or false"):
        MessageStoreConfig.from_dict({"storePathRootDir": root, "warmMapedFileEnable": "yes!"})
    with pytest.raises(ValueError, match="warmMappedFileAheadSize must be at least"):
        MessageStoreConfig(storePathRootDir=root, warmMappedFileAheadSize=4096)


def test_an_async_flush_store_writes_batches_with_pwrite_and_warms_nothing(tmp_path):
    with MessageStore(small_config(tmp_path / "store")) as store:
        store.put_message(StoreMessage.create("T", b"mapped", 0))
        files = store.commitlog.files
        assert files.pwrite and files.last.write_lock is None
        names = {t.name for t in store._threads}
        assert "rocketq-store-commitlog-warmer" not in names
