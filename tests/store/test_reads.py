"""ConsumeQueue reads: statuses, tag filters, byte limits, timestamps, zero-copy views."""

from __future__ import annotations

import os
import time

from rocketq.protocol.message import decode_record, decode_records, tags_code
from rocketq.store import GetStatus, MessageStore, StoreMessage
from rocketq.store.consumequeue import UNIT


def put(store, n, topic="T", queue_id=0, tags=None, body=b"m"):
    return [store.put_message(StoreMessage.create(topic, body + b"%d" % i, queue_id, tags=tags))
            for i in range(n)]


def test_consume_queue_units_point_into_commitlog(store):
    results = put(store, 5, tags="TagA")
    store.wait_dispatched()
    cq = store.consume_queues[("T", 0)]
    for r in results:
        phys, size, code = cq.unit(r.queue_offset)
        assert (phys, size, code) == (r.commitlog_offset, r.size, 2598919)
    path = os.path.join(store.config.store_path_consume_queue, "T", "0", "0" * 20)
    with open(path, "rb") as fh:
        assert UNIT.unpack(fh.read(20)) == (0, results[0].size, 2598919)


def test_get_statuses_follow_rocketmq(store):
    g = store.get_messages("Nope", 0, 0, 32)
    assert g.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    put(store, 10)
    store.wait_dispatched()
    g = store.get_messages("T", 0, 3, 4)
    assert g.status is GetStatus.FOUND and g.message_count == 4
    assert g.next_begin_offset == 7 and (g.min_offset, g.max_offset) == (0, 10)
    assert [r.queue_offset for r in g.decode()] == [3, 4, 5, 6]
    assert [r.body for r in g.decode()] == [b"m3", b"m4", b"m5", b"m6"]
    g.release()
    g = store.get_messages("T", 0, 10, 32)
    assert g.status is GetStatus.OFFSET_OVERFLOW_ONE and g.next_begin_offset == 10
    g = store.get_messages("T", 0, 50, 32)
    assert g.status is GetStatus.OFFSET_OVERFLOW_BADLY and g.next_begin_offset == 10


def test_tag_filter_by_hash(store):
    for i in range(30):
        store.put_message(StoreMessage.create("T", b"%d" % i, 0, tags=["A", "B", "C"][i % 3]))
    store.put_message(StoreMessage.create("T", b"untagged", 0))
    store.wait_dispatched()
    wanted = {tags_code("A"), tags_code("C")}
    g = store.get_messages("T", 0, 0, 100, tag_codes=wanted)
    tags = [r.tags for r in g.decode()]
    assert tags.count("A") == 10 and tags.count("C") == 10 and "B" not in tags
    assert None not in tags  # an untagged message does not match a tag subscription
    assert g.next_begin_offset == 31
    g.release()
    g = store.get_messages("T", 0, 0, 100, tag_codes={tags_code("Z")})
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 31


def test_record_filter_and_byte_limit(store):
    put(store, 20, body=b"x" * 1000)
    store.wait_dispatched()
    g = store.get_messages("T", 0, 0, 32, max_bytes=5000)
    assert g.message_count == 4  # 4 records of ~1100 bytes fit in 5000
    g.release()
    g = store.get_messages("T", 0, 0, 32,
                           record_filter=lambda v: decode_record(v).body.endswith(b"x15"))
    assert [r.body[-3:] for r in g.decode()] == [b"x15"]
    g.release()


def test_raw_bytes_are_the_records_back_to_back(store):
    results = put(store, 6)
    store.wait_dispatched()
    with store.get_messages("T", 0, 0, 32) as g:
        data = g.data()
        assert len(data) == sum(r.size for r in results)
        assert [r.commitlog_offset for r in decode_records(data)] == [
            r.commitlog_offset for r in results]


def test_offset_by_time_and_earliest(store):
    first = put(store, 3)
    time.sleep(0.02)
    middle = int(time.time() * 1000)
    time.sleep(0.02)
    later = put(store, 3)
    store.wait_dispatched()
    assert store.get_offset_by_time("T", 0, 0) == 0
    assert store.get_offset_by_time("T", 0, middle) == 3
    assert store.get_offset_by_time("T", 0, later[0].store_timestamp) == 3
    assert store.get_offset_by_time("T", 0, later[-1].store_timestamp + 10_000) == 6
    assert store.get_earliest_message_time("T", 0) == first[0].store_timestamp
    assert store.get_message_store_timestamp("T", 0, 4) == later[1].store_timestamp


def test_dispatch_listener_is_told_of_new_units(config):
    store = MessageStore(config)
    seen = []
    store.add_dispatch_listener(lambda topic, qid, max_offset: seen.append((topic, qid,
                                                                            max_offset)))
    try:
        put(store, 3, queue_id=2)
        store.wait_dispatched()
        assert ("T", 2, 3) in seen or seen[-1] == ("T", 2, 3)
        assert max(m for t, q, m in seen if (t, q) == ("T", 2)) == 3
    finally:
        store.close()


def test_delete_topic_drops_its_queues(store):
    put(store, 3, topic="Gone")
    put(store, 3, topic="Kept")
    store.wait_dispatched()
    assert store.delete_topics(["Gone"]) == 1
    assert store.get_messages("Gone", 0, 0, 32).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    assert not os.path.exists(os.path.join(store.config.store_path_consume_queue, "Gone"))
    assert store.get_max_offset("Kept", 0) == 3
    r = store.put_message(StoreMessage.create("Gone", b"again", 0))
    assert r.queue_offset == 0


def test_reads_racing_forced_deletion_get_the_records_or_a_clean_gone(tmp_path):
    """Readers on two threads page through a queue while its CommitLog files are deleted
    under them (the path forced deletion takes): each read returns whole, right records or
    says they are gone; none slices a file already unmapped ("released memoryview")."""
    import sys
    import threading

    from .conftest import small_config

    store = MessageStore(small_config(tmp_path / "store"))
    failures: list[BaseException] = []
    statuses: set[GetStatus] = set()
    stop = threading.Event()
    body = b"x" * 900

    def read() -> None:
        offset = 0
        while not stop.is_set():
            try:
                with store.get_messages("T", 0, offset, 8) as got:
                    statuses.add(got.status)
                    for record in got.decode():
                        assert record.body == b"%06d" % record.queue_offset + body
                    offset = got.next_begin_offset
                    if got.status is not GetStatus.FOUND:
                        offset = store.get_min_offset("T", 0)
            except BaseException as exc:  # noqa: BLE001 - any failure fails the test
                failures.append(exc)
                return

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # many more thread switches, inside the windows that matter
    threads = [threading.Thread(target=read) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        written = 0
        deadline = time.monotonic() + 3
        for _ in range(30):  # bounded rounds: fill some files, delete all but the last
            if failures or time.monotonic() > deadline:
                break
            for _ in range(300):
                store.put_message(StoreMessage.create("T", b"%06d" % written + body, 0))
                written += 1
            store.wait_dispatched()
            files = store.commitlog.files
            while len(files.files) > 1 and not failures:
                files.remove_first([files.files[0]])
                files.retry_closing()
                time.sleep(0.0005)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        sys.setswitchinterval(switch)
        store.close()
    assert not failures, repr(failures[0])
    assert GetStatus.FOUND in statuses
