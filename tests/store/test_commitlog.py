"""CommitLog appends, roll-over, reads and bad input, on real files."""

from __future__ import annotations

import os
import threading
import zlib

import pytest

from rocketq.protocol.message import (
    BLANK_MAGIC,
    SIZE_AND_MAGIC,
    decode_record,
    encode_batch,
    encode_properties,
)
from rocketq.store import (
    BatchMessage,
    MessageIllegalError,
    MessageStore,
    MessageTooLargeError,
    PropertiesTooLargeError,
    PutStatus,
    StoreClosedError,
    StoreMessage,
)


def msg(topic="TopicTest", body=b"x" * 128, queue_id=0, **kw):
    return StoreMessage.create(topic, body, queue_id, **kw)


def test_round_trip_every_field(store):
    m = StoreMessage.create("Orders", b"payload", 2, tags="paid", keys=["order-17", "o2"],
                            properties={"region": "eu", "UNIQ_KEY": "U1"}, born_host="10.1.2.3",
                            born_port=4444, flag=9, reconsume_times=3, born_timestamp=1234)
    r = store.put_message(m)
    assert r.status is PutStatus.PUT_OK and r.queue_offset == 0 and r.commitlog_offset == 0
    rec = store.look_message_by_offset(r.commitlog_offset)
    assert rec.topic == "Orders" and rec.body == b"payload" and rec.queue_id == 2
    assert rec.tags == "paid" and rec.keys == ["order-17", "o2"]
    assert rec.properties["region"] == "eu" and rec.msg_id == "U1"
    assert rec.born_host == ("10.1.2.3", 4444) and rec.born_timestamp == 1234
    assert rec.store_host == ("127.0.0.1", 10911) and rec.flag == 9 and rec.reconsume_times == 3
    assert rec.commitlog_offset == 0 and rec.store_timestamp == r.store_timestamp
    assert rec.offset_msg_id == r.msg_id
    assert store.look_message_by_id(r.msg_id).body == b"payload"


def test_roll_over_across_files_with_blank_filler(store, config):
    results = [store.put_message(msg(body=os.urandom(1000), queue_id=i % 2)) for i in range(300)]
    files = store.commitlog.files.files
    assert len(files) >= 4
    size = config.mappedFileSizeCommitLog
    for f in files:
        assert os.path.basename(f.path) == f"{f.from_offset:020d}"
        assert os.path.getsize(f.path) == size
    # Every file but the last ends with the blank filler record.
    for f in files[:-1]:
        last_record_end = max(r.commitlog_offset + r.size for r in results
                              if f.from_offset <= r.commitlog_offset < f.from_offset + size)
        pos = last_record_end - f.from_offset
        total, magic = SIZE_AND_MAGIC.unpack_from(f.view, pos)
        assert magic == BLANK_MAGIC and pos + total == size
    # No record straddles a file boundary; queue offsets are dense per queue.
    for r in results:
        assert r.commitlog_offset // size == (r.commitlog_offset + r.size - 1) // size
    assert [r.queue_offset for r in results[0::2]] == list(range(150))
    assert [r.queue_offset for r in results[1::2]] == list(range(150))
    store.wait_dispatched()
    got = []
    offset = 0
    while True:
        g = store.get_messages("TopicTest", 1, offset, 32)
        if not g.message_count:
            break
        got.extend(rec.body for rec in g.decode())
        offset = g.next_begin_offset
        g.release()
    assert len(got) == 150


def test_batch_append_gets_consecutive_offsets(store):
    results = store.put_messages([msg(body=b"%d" % i) for i in range(10)])
    assert [r.queue_offset for r in results] == list(range(10))
    offsets = [r.commitlog_offset for r in results]
    sizes = [r.size for r in results[:-1]]
    assert all(b == a + s for a, b, s in zip(offsets[:-1], offsets[1:], sizes, strict=True))


def test_batch_message_elements_become_records_of_one_queue(store, config):
    """A BatchMessage's elements are encoded straight from the request body: consecutive
    queue offsets, each element's flag, body and properties plus the suffix; the batch's own
    properties are not stored. Forty 2 KiB elements cross a 64 KiB file boundary."""
    elements = [(i % 3, b"%04d" % i + b"y" * 2048, encode_properties({"UNIQ_KEY": f"U{i}"}))
                for i in range(40)]
    batch = BatchMessage("Batched", encode_batch(elements), 2, suffix=b"CLUSTER\x01c1\x02",
                         properties=b"UNIQ_KEY\x01WHOLE\x02", born_timestamp=77,
                         born_host=b"\x0a\x00\x00\x05", born_port=99, reconsume_times=1)
    store.put_message(msg(topic="Batched", queue_id=2))  # the batch continues a queue
    results = store.put_messages(batch)
    assert [r.queue_offset for r in results] == list(range(1, 41))
    assert len({r.commitlog_offset // config.mappedFileSizeCommitLog for r in results}) == 2
    for (flag, body, props), r in zip(elements, results, strict=True):
        rec = store.look_message_by_offset(r.commitlog_offset)
        assert (rec.topic, rec.queue_id, rec.queue_offset) == ("Batched", 2, r.queue_offset)
        assert rec.body == body and rec.flag == flag
        assert rec.body_crc == zlib.crc32(body) & 0x7FFFFFFF
        assert rec.properties == {"UNIQ_KEY": props[9:-1], "CLUSTER": "c1"}
        assert rec.born_host == ("10.0.0.5", 99) and rec.born_timestamp == 77
        assert rec.reconsume_times == 1 and rec.offset_msg_id == r.msg_id
    store.wait_dispatched()
    assert store.get_max_offset("Batched", 2) == 41
    with store.get_messages("Batched", 2, 1, 64) as got:
        assert [m.body for m in got.decode()] == [body for _, body, _ in elements]


@pytest.mark.parametrize("body, error", [
    (b"", "empty batch"),
    (b"\x00\x00\x00\x07", "truncated"),
    (encode_batch([(0, b"ok", "")]) + b"\x00" * 30, "bad body length|truncated|add up"),
    (encode_batch([(0, b"ok", ""), (0, b"x" * (16 * 1024 + 1), "")]), "maxMessageSize"),
    (encode_batch([(0, b"ok", "p\x01" + "v" * 32760 + "\x02")]), "limit is 32767"),
])
def test_bad_batch_is_refused_whole(store, body, error):
    store.put_message(msg())
    end = store.commitlog.max_offset
    with pytest.raises(MessageIllegalError, match=error):
        store.put_messages(BatchMessage("TopicTest", body, 0, suffix=b"CLUSTER\x01c\x02"))
    assert store.commitlog.max_offset == end
    assert store.put_message(msg()).queue_offset == 1


def test_concurrent_appends_are_serialised(store):
    per_thread = 300

    def writer(n):
        for i in range(per_thread):
            store.put_message(msg(body=b"%d-%d" % (n, i), queue_id=0))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.wait_dispatched()
    assert store.get_max_offset("TopicTest", 0) == 4 * per_thread
    seen = {}
    offset = 0
    while offset < 4 * per_thread:
        g = store.get_messages("TopicTest", 0, offset, 32)
        for rec in g.decode():
            assert rec.queue_offset == offset
            n, i = rec.body.split(b"-")
            # Each writer's messages keep their order in the queue.
            assert int(i) == seen.get(n, -1) + 1
            seen[n] = int(i)
            offset += 1
        g.release()
    assert all(v == per_thread - 1 for v in seen.values())


def test_bad_input_is_refused_and_store_keeps_working(store, config):
    with pytest.raises(MessageTooLargeError, match="maxMessageSize"):
        store.put_message(msg(body=b"x" * (config.maxMessageSize + 1)))
    with pytest.raises(PropertiesTooLargeError, match="32767"):
        store.put_message(msg(properties={"big": "v" * 40000}))
    for bad in ("", "has space", "a/b", "t" * 128):
        with pytest.raises(MessageIllegalError):
            store.put_message(msg(topic=bad))
    with pytest.raises(MessageIllegalError):
        store.put_message(msg(queue_id=-1))
    # A bad message in a batch refuses the whole batch before anything is written.
    with pytest.raises(MessageIllegalError):
        store.put_messages([msg(), msg(topic="bad topic")])
    assert store.commitlog.max_offset == 0
    r = store.put_message(msg())
    assert r.status is PutStatus.PUT_OK and r.commitlog_offset == 0
    store.wait_dispatched()
    assert store.get_max_offset("TopicTest", 0) == 1


def test_put_after_close_raises(config):
    s = MessageStore(config)
    s.close()
    with pytest.raises(StoreClosedError):
        s.put_message(msg())


def test_records_are_rocketmq_v1_bytes(store):
    r = store.put_message(msg(body=b"abc", tags="T"))
    raw = store.record_bytes(r.commitlog_offset)
    assert int.from_bytes(raw[4:8], "big", signed=True) == -626843481
    assert len(raw) == r.size
    rec = decode_record(raw, check_crc=True)
    assert rec.body == b"abc" and rec.commitlog_offset == r.commitlog_offset
