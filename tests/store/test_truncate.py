"""Cutting the CommitLog's tail (a demoted master in controller mode): the log, the queues
and the queue counters agree afterwards, and after a reopen."""

from __future__ import annotations

from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage


def test_truncate_forgets_the_tail_and_its_queue_units(tmp_path):
    store = MessageStore(MessageStoreConfig(storePathRootDir=str(tmp_path),
                                            mappedFileSizeCommitLog=64 << 10))
    try:
        results = [store.put_message(StoreMessage.create("Cut", b"m%d-" % i + b"x" * 500, 0))
                   for i in range(300)]  # several files
        store.wait_dispatched(timeout=5)
        cut = results[200].commitlog_offset
        assert store.truncate(cut) == cut
        assert store.commitlog.max_offset == cut
        assert store.get_max_offset("Cut", 0) == 200
        again = store.put_message(StoreMessage.create("Cut", b"after", 0))
        assert again.commitlog_offset == cut and again.queue_offset == 200
        store.wait_dispatched(timeout=5)
        bodies = [m.body for m in store.get_messages("Cut", 0, 199, 5).decode()]
        assert bodies == [b"m199-" + b"x" * 500, b"after"]
    finally:
        store.close()
    reopened = MessageStore(MessageStoreConfig(storePathRootDir=str(tmp_path),
                                               mappedFileSizeCommitLog=64 << 10))
    try:
        assert reopened.get_max_offset("Cut", 0) == 201
    finally:
        reopened.close()
