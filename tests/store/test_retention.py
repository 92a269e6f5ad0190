"""Retention: expired CommitLog files go at deleteWhen or when the disk fills; the logic files
that only point at deleted messages go with them, and min offsets move."""

from __future__ import annotations

import os
import time

from rocketq.store import GetStatus, MessageStore, StoreMessage

from ..conftest import wait_for
from .conftest import small_config


def fill_files(store, n_files, queue_ids=(0, 1)):
    size = store.config.mappedFileSizeCommitLog
    i = 0
    while len(store.commitlog.files.files) < n_files or \
            store.commitlog.files.last.wrote_position < size // 2:
        store.put_message(StoreMessage.create("T", os.urandom(900), queue_ids[i % len(queue_ids)]))
        i += 1
    store.wait_dispatched()
    return i


def age_files(store, hours, count):
    old = time.time() - hours * 3600
    for f in store.commitlog.files.files[:count]:
        os.utime(f.path, (old, old))


def hour_now():
    return f"{time.localtime().tm_hour:02d}"


def other_hour():
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


def test_expired_files_deleted_at_delete_when(tmp_path):
    store = MessageStore(small_config(tmp_path, fileReservedTime=72, deleteWhen=hour_now(),
                                      diskMaxUsedSpaceRatio=99, diskSpaceCleanForciblyRatio=99,
                                      mappedFileSizeConsumeQueue=20 * 10))
    try:
        fill_files(store, 5)
        files = store.commitlog.files.files
        age_files(store, 73, 2)
        second_start = files[2].from_offset
        min_before = store.get_min_offset("T", 0)
        cq_files_before = len(store.consume_queues[("T", 0)].files.files)
        assert store.clean_expired_files() == 2
        assert store.commitlog.min_offset == second_start
        assert not os.path.exists(files[0].path) and not os.path.exists(files[1].path)
        # Consumers start at the first message still in the CommitLog.
        min_after = store.get_min_offset("T", 0)
        assert min_after > min_before
        g = store.get_messages("T", 0, min_after, 1)
        assert g.status is GetStatus.FOUND and g.decode()[0].commitlog_offset >= second_start
        g.release()
        assert store.get_messages("T", 0, 0, 1).status is GetStatus.OFFSET_TOO_SMALL
        assert len(store.consume_queues[("T", 0)].files.files) < cq_files_before
        # Unexpired files stay.
        assert store.clean_expired_files() == 0
    finally:
        store.close()


def test_nothing_deleted_outside_delete_when_with_free_disk(tmp_path):
    store = MessageStore(small_config(tmp_path, deleteWhen=other_hour(),
                                      diskMaxUsedSpaceRatio=99, diskSpaceCleanForciblyRatio=99))
    try:
        fill_files(store, 3)
        age_files(store, 100, 3)
        assert store.clean_expired_files() == 0
        assert store.clean_expired_files(manual=True) == 2  # never the file being written
        assert len(store.commitlog.files.files) == 1
    finally:
        store.close()


def test_full_disk_deletes_expired_at_once_and_forcibly_the_oldest(tmp_path):
    # Thresholds of 0 % make any real disk count as "over the ratio". The store's own
    # periodic clean is put off, so that only the calls here delete (on a loaded machine the
    # test can outlast the 10 s interval, and a clean between two calls took their files).
    # Its one clean at once, when it first sees the disk over diskMaxUsedSpaceRatio, is
    # awaited before any file is aged: run late, it took the files of the second call here.
    store = MessageStore(small_config(tmp_path, deleteWhen=other_hour(),
                                      diskMaxUsedSpaceRatio=0, diskSpaceCleanForciblyRatio=99,
                                      cleanResourceInterval=3_600_000))
    try:
        fill_files(store, 4)
        assert wait_for(lambda: store.last_clean_time > 0)
        age_files(store, 100, 1)
        assert store.clean_expired_files() == 1
        store.config.diskSpaceCleanForciblyRatio = 0
        remaining = len(store.commitlog.files.files)
        assert store.clean_expired_files() == remaining - 1
        assert len(store.commitlog.files.files) == 1
        r = store.put_message(StoreMessage.create("T", b"still works", 0))
        store.wait_dispatched()
        g = store.get_messages("T", 0, r.queue_offset, 1)
        assert g.decode()[0].body == b"still works"
        g.release()
    finally:
        store.close()


def test_retention_survives_restart(tmp_path):
    config = small_config(tmp_path, mappedFileSizeConsumeQueue=20 * 10)
    store = MessageStore(config)
    fill_files(store, 4)
    age_files(store, 100, 2)
    store.clean_expired_files(manual=True)
    min_offset = store.get_min_offset("T", 0)
    max_offset = store.get_max_offset("T", 0)
    cl_min = store.commitlog.min_offset
    store.close()
    store = MessageStore(config)
    try:
        assert store.commitlog.min_offset == cl_min
        assert store.get_min_offset("T", 0) == min_offset
        assert store.get_max_offset("T", 0) == max_offset
    finally:
        store.close()
