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


def test_truncate_drops_the_index_entries_of_the_tail(tmp_path):
    """A query by key finds neither a cut record nor, once new records reuse its offsets, a
    record it lands on; the new records with the same keys (a producer sending again) are
    found once each, and so after a reopen (the dropped entries are cleared on disk)."""
    config = MessageStoreConfig(storePathRootDir=str(tmp_path), maxHashSlotNum=64,
                                maxIndexNum=1024)
    store = MessageStore(config)
    try:
        results = [store.put_message(StoreMessage.create("Cut", b"first %d" % i, 0,
                                                         keys=f"k{i} shared"))
                   for i in range(20)]
        store.wait_dispatched(timeout=5)
        cut = results[12].commitlog_offset
        store.truncate(cut)
        for i in range(12, 20):
            assert store.index.query("Cut", f"k{i}", 32, 0, 1 << 62) == [], i
        assert len(store.query_messages("Cut", "shared", 64)) == 12
        # Sent again, one byte shorter each: the old entries would land inside records.
        for i in range(12, 20):
            store.put_message(StoreMessage.create("Cut", b"again%d" % i, 0, keys=f"k{i}"))
        store.wait_dispatched(timeout=5)
        for i in range(12, 20):
            assert [m.body for m in store.query_messages("Cut", f"k{i}")] == [
                b"again%d" % i], i
            assert len(store.index.query("Cut", f"k{i}", 32, 0, 1 << 62)) == 1, i
    finally:
        store.close()
    reopened = MessageStore(config)
    try:
        for i in range(12, 20):
            assert len(reopened.index.query("Cut", f"k{i}", 32, 0, 1 << 62)) == 1, i
        assert [m.body for m in reopened.query_messages("Cut", "k3")] == [b"first 3"]
    finally:
        reopened.close()
