"""The store's compiled loops and their pure-Python references agree, and the compiled path
builds the same ConsumeQueue, index and CommitLog bytes as the store's Python path.

``_records``/``_crecords`` (the scan) and ``_encode``/``_cencode`` (the encoders) are fed the
same records, batches and messages, damaged ones included; then real stores are built both
ways from the same messages."""

from __future__ import annotations

import os
import tempfile
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketq.protocol.message import SysFlag, encode_batch, java_hash
from rocketq.protocol.topic import SCHEDULE_TOPIC, TIMER_TOPIC
from rocketq.store import _encode as pure_encode
from rocketq.store import _records as pure
from rocketq.store import records
from rocketq.store.commitlog import BatchMessage, CommitLog, PutResult, PutStatus, StoreMessage
from rocketq.store.consumequeue import ConsumeQueue
from rocketq.store.dispatch import Dispatcher
from rocketq.store.errors import MessageIllegalError
from rocketq.store.index import Index
from rocketq.store.index_file import IndexFile
from rocketq.store.index_hash import index_key_hash

from .conftest import small_config

try:
    from rocketq.store import _cencode as compiled_encode
    from rocketq.store import _crecords as compiled
except ImportError:  # built without a C compiler: only the references are there
    compiled = compiled_encode = None

needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled records are not built")
examples = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_the_compiled_records_are_the_ones_in_use_unless_switched_off():
    if os.environ.get("ROCKETQ_NO_EXTENSIONS") or compiled is None:
        # Switched off, or built without a C compiler: the pure modules, and nothing else.
        assert not records.COMPILED and records.impl is pure
        assert records.encoder is pure_encode
        assert not os.environ.get("ROCKETQ_REQUIRE_COMPILED") or os.environ.get(
            "ROCKETQ_NO_EXTENSIONS"), "a C compiler is here, yet the store was not compiled"
    else:
        assert records.COMPILED and records.impl is compiled
        assert records.encoder is compiled_encode


words = st.one_of(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E,
                                        blacklist_characters=" "), min_size=1, max_size=8),
                  st.sampled_from(["键", "clé", "k\u00e9y"]))
messages = st.lists(st.fixed_dictionaries({
    "topic": st.sampled_from(["TopicA", "TopicB", SCHEDULE_TOPIC, TIMER_TOPIC]),
    "queue_id": st.integers(0, 2),
    "body": st.binary(max_size=300),
    "tags": st.one_of(st.none(), st.sampled_from(["", "tagA", "*", "标签", "a||b"])),
    "keys": st.one_of(st.none(), st.lists(words, max_size=4).map(" ".join),
                      st.just("  a  b ")),
    "uniq": st.one_of(st.none(), st.text("0123456789ABCDEF", max_size=32),
                      st.just("ü-1")),
    "sysflag": st.sampled_from([0, 0, 0, SysFlag.TRANSACTION_PREPARED,
                                SysFlag.TRANSACTION_COMMIT, SysFlag.TRANSACTION_ROLLBACK]),
    "delay": st.sampled_from(["1", "3", "x", ""]),
}), min_size=1, max_size=40)


def store_message(m: dict) -> StoreMessage:
    props = {}
    if m["uniq"] is not None:
        props["UNIQ_KEY"] = m["uniq"]
    if m["topic"] == SCHEDULE_TOPIC:
        props["DELAY"] = m["delay"]
    if m["topic"] == TIMER_TOPIC:
        props["TIMER_OUT_MS"] = "12345" if m["delay"] == "1" else m["delay"]
    props["X"] = "TAGS\x01inside"  # a name inside another value is not that property
    return StoreMessage.create(m["topic"], m["body"], m["queue_id"], tags=m["tags"],
                               keys=m["keys"] or None, properties=props,
                               sysflag=m["sysflag"], born_timestamp=1_700_000_000_000)


def outputs(capacity: int):
    return (bytearray(capacity * pure.UNIT_SIZE),
            array("q", bytes(8 * pure.RUN_FIELDS * capacity)),
            *(array("q", bytes(8 * capacity)) for _ in range(3)),
            bytearray(capacity * pure.UNIT_SIZE),
            array("q", bytes(8 * pure.work_size(capacity))))


def scan_both(log: bytes, pos: int, stop: int, validate: bool, capacity: int):
    results = []
    for module in (pure, compiled):
        out = outputs(capacity)
        result = module.scan(log, pos, stop, 1 << 20, validate, True, -1,
                             SCHEDULE_TOPIC.encode(), TIMER_TOPIC.encode(), *out)
        results.append((result, bytes(out[0]), *(a.tolist() for a in out[1:5])))
    assert results[0] == results[1]
    return results[0]


@needs_compiled
@examples
@given(messages, st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)),
                          max_size=3),
       st.booleans(), st.integers(1, 12))
def test_scan_twins_agree_on_records_damaged_or_not(batch, cuts, validate, capacity):
    with tempfile.TemporaryDirectory() as root:
        log = CommitLog(small_config(root, mappedFileSizeCommitLog=1 << 20))
        log.append([store_message(m) for m in batch])
        f = log.files.last
        data = bytearray(f.mm[:f.wrote_position])
        log.files.close()
    for at, value in cuts:
        data[at % len(data)] = value
    pos = 0
    for _ in range(len(batch) + 1):  # call again from where each call stopped, as dispatch does
        (pos_after, count, _runs, _keys, status), *_ = scan_both(bytes(data), pos, len(data),
                                                                 validate, capacity)
        if status != pure.FULL:
            break
        assert count > 0 and pos_after > pos
        pos = pos_after


@needs_compiled
def test_scan_hashes_and_tag_codes_are_javas():
    with tempfile.TemporaryDirectory() as root:
        log = CommitLog(small_config(root, mappedFileSizeCommitLog=1 << 20))
        log.append([StoreMessage.create("T1", b"x", 3, tags="tagA", keys=["k1", "k2"],
                                        properties={"UNIQ_KEY": "U1"})])
        f = log.files.last
        data = bytes(f.mm[:f.wrote_position])
        log.files.close()
    (_, count, nruns, nkeys, status), units, runs, hashes, offsets, _times = scan_both(
        data, 0, len(data), False, 4)
    assert (count, nruns, nkeys, status) == (1, 1, 3, pure.DONE)
    assert runs[:6] == [data.index(b"T1"), 2, 3, 0, 1, (1 << 20) + len(data)]
    assert hashes[:3] == [index_key_hash("T1#U1"), index_key_hash("T1#k1"),
                          index_key_hash("T1#k2")]
    assert int.from_bytes(units[12:20], "big", signed=True) == java_hash("tagA")
    assert offsets[:3] == [1 << 20] * 3


# ------------------------------------------------------------------ whole stores


class Side:
    """ConsumeQueues and an index under ``root`` fed by a Dispatcher over ``log``."""

    def __init__(self, root: str, log: CommitLog, compiled_path: bool) -> None:
        config = small_config(root)
        self.config = config
        self.index = Index(config.store_path_index, config.maxHashSlotNum, config.maxIndexNum)
        self.index.load()
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.dispatcher = Dispatcher(log, self.index, self.get_queue, [1000, 5000, 10000])
        if not compiled_path:
            self.dispatcher.compiled = None

    def get_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = ConsumeQueue(
                self.config.store_path_consume_queue, topic, queue_id,
                self.config.mappedFileSizeConsumeQueue)
        return cq

    def state(self):
        queues = {key: b"".join(bytes(f.mm[:f.wrote_position]) for f in cq.files.files)
                  for key, cq in self.queues.items()}
        index = []
        for f in self.index.files:
            f._write_header()
            index.append(bytes(f.file.mm))
        return queues, index

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.index.close()


def dispatch_both(appends: list[list[StoreMessage]], limit: int, validate: bool) -> None:
    """Dispatch the same CommitLog with the compiled scan and with the Python loop, ``limit``
    records a run: the same counts, queues that grew, ConsumeQueue and index bytes."""
    with tempfile.TemporaryDirectory() as root:
        log = CommitLog(small_config(os.path.join(root, "log")))
        for batch in appends:  # 64 KiB files: records cross files, with fillers between
            log.append(batch)
        sides = [Side(os.path.join(root, name), log, name == "compiled")
                 for name in ("compiled", "python")]
        results = []
        for side in sides:
            counts, grown = [], {}
            for _ in range(1000):
                count, more = side.dispatcher.run(log.max_offset, limit=limit,
                                                  validate=validate)
                counts.append(count)
                grown.update(more)
                if side.dispatcher.reput_offset >= log.max_offset or not count:
                    break
            results.append((counts, grown, side.dispatcher.reput_offset,
                            side.dispatcher.bad_record_at, side.state()))
        for side in sides:
            side.close()
        log.files.close()
    assert results[0] == results[1]
    assert results[0][2] == log.max_offset


@needs_compiled
@examples
@given(st.lists(messages, min_size=1, max_size=4), st.integers(1, 50), st.booleans())
def test_compiled_dispatch_builds_what_the_python_dispatcher_builds(appends, limit, validate):
    dispatch_both([[store_message(m) for m in batch] for batch in appends], limit, validate)


@needs_compiled
@pytest.mark.parametrize("limit", [3, 50, 8192])
def test_compiled_dispatch_hands_stretches_of_delayed_and_non_ascii_records_over(limit):
    # Runs of records the scan leaves to the Python loop, long enough that it hands them
    # over in stretches, then plain ones again.
    delayed = [StoreMessage.create(SCHEDULE_TOPIC, b"d%d" % i, 2, keys=f"k{i}",
                                   properties={"DELAY": str(1 + i % 3)}) for i in range(40)]
    chinese = [StoreMessage.create("TopicA", b"c%d" % i, i % 2, tags="标签", keys=f"键{i}")
               for i in range(30)]
    plain = [StoreMessage.create("TopicA", b"p%d" % i, i % 2, tags="t") for i in range(20)]
    dispatch_both([delayed, plain, chinese, plain, delayed], limit, False)


@needs_compiled
@pytest.mark.parametrize("limit", [7, 8192])
def test_compiled_dispatch_groups_units_of_many_interleaved_queues(limit):
    # 3 topics x 30 queues, round-robin: more queues than one scan groups (it stops and goes
    # on), and a topic whose name is another's prefix.
    appends = [[StoreMessage.create(topic, b"%d" % i, q, tags="t", keys=f"k{i}")
                for i in range(3) for topic in ("T", "TT", "T2") for q in range(30)]]
    dispatch_both(appends, limit, False)


@needs_compiled
def test_index_put_twins_write_what_index_file_put_writes(tmp_path):
    entries = [(index_key_hash(f"T#k{i % 37}"), 1000 + 50 * i, 1_700_000_000_000 + 700 * i)
               for i in range(300)]
    hashes, offsets, times = (array("q", column) for column in zip(*entries, strict=True))
    files = [IndexFile(str(tmp_path / name), 64, 200, create=True) for name in "abc"]
    for h, phys, ts in entries:
        if not files[0].put(h, phys, ts):
            break
    for f, module in zip(files[1:], (pure, compiled), strict=True):
        assert f.put_hashed(hashes, offsets, times, 0, 300, module.index_put) == 199
    for f in files:
        f._write_header()
    assert bytes(files[0].file.mm) == bytes(files[1].file.mm) == bytes(files[2].file.mm)
    assert files[1].query(entries[5][0], 10, 0, 1 << 62) == files[0].query(
        entries[5][0], 10, 0, 1 << 62)
    for f in files:
        f.close()


# ------------------------------------------------------------------ batches

elements = st.lists(st.tuples(st.integers(0, 3), st.binary(max_size=200),
                              st.sampled_from([b"", b"TAGS\x01a\x02", b"KEYS\x01k1 k2",
                                               b"UNIQ_KEY\x01U\x02WAIT\x01true\x02"])),
                    min_size=1, max_size=30)


def append_both(root: str, batch_args: dict, monkeypatch) -> list:
    """The batch through the compiled and the Python path: results or errors, and bytes."""
    import rocketq.store.commitlog as commitlog_module

    monkeypatch.setattr(commitlog_module.time, "time", lambda: 1_700_000_000.5)
    out = []
    for name in ("compiled", "python"):
        log = CommitLog(small_config(os.path.join(root, name), mappedFileSizeCommitLog=8192,
                                     maxMessageSize=4096))
        if name == "python":
            log._scratch = None
        log.append([StoreMessage("TopicA", b"first", 1)])
        try:
            results = log.append_batch(BatchMessage(**batch_args))
            outcome = ("ok", [(r.status, r.commitlog_offset, r.size, r.queue_offset,
                               r.store_timestamp, r.msg_id) for r in results])
        except MessageIllegalError as exc:
            outcome = ("error", type(exc), str(exc))
        out.append((outcome, [bytes(f.mm[:f.wrote_position]) for f in log.files.files],
                    dict(log.queue_offsets)))
        log.files.close()
    return out


@needs_compiled
@examples
@given(elements, st.sampled_from([b"", b"CLUSTER\x01DefaultCluster\x02"]),
       st.sampled_from([0, SysFlag.TRANSACTION_PREPARED]),
       st.lists(st.tuples(st.integers(0, 1 << 14), st.integers(0, 255)), max_size=2))
def test_compiled_batches_store_what_the_python_path_stores(parts, suffix, sysflag, cuts):
    body = bytearray(encode_batch(parts))
    for at, value in cuts:
        body[at % len(body)] = value
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as root:
        both = append_both(root, dict(topic="TopicA", body=bytes(body), queue_id=1,
                                      suffix=suffix, sysflag=sysflag,
                                      born_timestamp=1_700_000_000_000, born_port=4242,
                                      reconsume_times=2), mp)
    assert both[0] == both[1]


@needs_compiled
def test_compiled_batches_refuse_what_the_python_path_refuses(tmp_path, monkeypatch):
    big = encode_batch([(0, b"x" * 5000, b"")])
    many_props = encode_batch([(0, b"x", b"P\x01" + b"v" * 32760)])
    for body, error in ((b"", "empty batch"), (big, "maxMessageSize"),
                        (many_props, "the limit is"), (b"\x00" * 21, "truncated")):
        both = append_both(str(tmp_path / str(len(body))),
                           dict(topic="TopicA", body=body, queue_id=0,
                                suffix=b"CLUSTER\x01c\x02"), monkeypatch)
        assert both[0] == both[1]
        assert both[0][0][0] == "error" and error in both[0][0][2]


def test_a_batch_of_committed_halves_keeps_their_offsets_and_its_trailer(tmp_path,
                                                                          monkeypatch):
    """The committed messages of a run of halves go as a batch with each half's CommitLog
    offset as its prepared offset, and the op record as the batch's trailer, right after
    its elements in the same call: both paths write the same bytes, across a file boundary
    (8 KiB files here) too."""
    from rocketq.protocol.message import decode_record

    parts = [(i % 2, b"%03d" % i + b"z" * 700, b"UNIQ_KEY\x01U%d\x02" % i) for i in range(20)]
    prepared = array("q", [1000 + 37 * i for i in range(20)])
    op = StoreMessage("OpTopic", b"1,2,3", 0, properties=b"TAGS\x01d\x02")
    both = append_both(str(tmp_path), dict(
        topic="TopicA", body=encode_batch(parts), queue_id=1, suffix=b"CLUSTER\x01c\x02",
        sysflag=SysFlag.TRANSACTION_COMMIT, prepared_offsets=prepared, trailer=[op]),
        monkeypatch)
    assert both[0] == both[1]
    (status, results), files, queues = both[0]
    assert status == "ok" and len(results) == 21
    assert queues[("TopicA", 1)] == 21 and queues[("OpTopic", 0)] == 1  # after "first"
    found = [decode_record(files[offset // 8192], offset % 8192)
             for _status, offset, *_rest in results]
    assert len({offset // 8192 for _status, offset, *_rest in results}) > 1
    assert [r.prepared_transaction_offset for r in found[:20]] == list(prepared)
    assert [(r.flag, r.body) for r in found[:20]] == [(f, b) for f, b, _p in parts]
    assert found[0].properties == {"UNIQ_KEY": "U0", "CLUSTER": "c"}
    assert (found[20].topic, found[20].body) == ("OpTopic", b"1,2,3")
    assert results[20][1] > results[19][1]  # the trailer follows the elements


# ------------------------------------------------------------------ single messages


def append_messages_both(root: str, batches: list[list[StoreMessage]], monkeypatch) -> list:
    """The messages through the compiled and the Python path: results or errors, and bytes."""
    import rocketq.store.commitlog as commitlog_module

    monkeypatch.setattr(commitlog_module.time, "time", lambda: 1_700_000_000.5)
    out = []
    for name in ("compiled", "python"):
        log = CommitLog(small_config(os.path.join(root, name), mappedFileSizeCommitLog=8192,
                                     maxMessageSize=2048))
        if name == "python":
            log._scratch = None
        outcomes = []
        for batch in batches:
            try:
                outcomes.append([(r.status, r.commitlog_offset, r.size, r.queue_offset,
                                  r.store_timestamp, r.msg_id) for r in log.append(batch)])
            except MessageIllegalError as exc:
                outcomes.append(("error", type(exc), str(exc)))
        out.append((outcomes, [bytes(f.mm[:f.wrote_position]) for f in log.files.files],
                    dict(log.queue_offsets)))
        log.files.close()
    return out


@needs_compiled
@examples
@given(st.lists(messages, min_size=1, max_size=5),
       st.sampled_from([None, "big-body", "big-props", "bad-queue", "bad-topic"]))
def test_compiled_appends_store_what_the_python_path_stores(batches, damage):
    appends = [[store_message(m) for m in batch] for batch in batches]
    victim = appends[-1][-1]
    if damage == "big-body":
        victim.body = b"b" * 2049
    elif damage == "big-props":
        victim.properties = b"P\x01" + b"v" * 32770
    elif damage == "bad-queue":
        victim.queue_id = -1
    elif damage == "bad-topic":
        victim.topic = "no spaces allowed"
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as root:
        both = append_messages_both(root, appends, mp)
    assert both[0] == both[1]
    if damage:
        assert both[0][0][-1][0] == "error"


@needs_compiled
@examples
@given(elements, st.sampled_from([b"", b"CLUSTER\x01c\x02"]), st.integers(0, 4096),
       st.lists(st.tuples(st.integers(0, 1 << 14), st.integers(0, 255)), max_size=2))
def test_encoder_twins_agree_on_batches(parts, suffix, free, cuts):
    body = bytearray(encode_batch(parts))
    for at, value in cuts:
        body[at % len(body)] = value
    body = bytes(body)
    outcomes = []
    for module in (pure_encode, compiled_encode):
        checked = module.batch_check(body, len(suffix), 90 + 7, 150, 32767, 4096)
        n = checked[0]
        dst, offsets, sizes = bytearray(8192), array("q", bytes(8 * n)), array("i", bytes(4 * n))
        encoded = (module.batch_encode(dst, 3, body, 0, 0, n, b"\x06TopicA", suffix, free,
                                       5000, 2, 77, True, 0, 1_700_000_000_000,
                                       b"\x7f\x00\x00\x01", 4242, 1_700_000_000_001,
                                       b"\x0a\x00\x00\x02", 10911, 1, offsets, sizes)
                   if checked[1] == 0 else None)
        outcomes.append((checked, encoded, bytes(dst), offsets.tolist(), sizes.tolist()))
    assert outcomes[0] == outcomes[1]


@needs_compiled
@examples
@given(messages, st.integers(0, 6000))
def test_encoder_twins_agree_on_messages(batch, free):
    msgs = [store_message(m) for m in batch]
    msgs[0].body = memoryview(msgs[0].body)  # as a request's body may be
    parts = {t: bytes([len(t)]) + t.encode()
             for t in ("TopicA", "TopicB", SCHEDULE_TOPIC, TIMER_TOPIC)}
    outcomes = []
    for module in (pure_encode, compiled_encode):
        counts: dict = {}
        checked = module.messages_check(msgs, 0, parts, 90, 4096, 32767, 8192, counts)
        n = len(msgs)
        dst = bytearray(4096)
        out = (array("q", bytes(8 * n)), array("i", bytes(4 * n)), array("q", bytes(8 * n)))
        queue_offsets = {("TopicA", 1): 41}
        encoded = module.messages_encode(dst, 0, msgs, 0, parts, free, 123456, queue_offsets,
                                         1_700_000_000_000, b"\x7f\x00\x00\x01", 10911, *out)
        outcomes.append((checked, counts, encoded, bytes(dst), queue_offsets,
                         *(a.tolist() for a in out)))
    assert outcomes[0] == outcomes[1]


@needs_compiled
@examples
@given(st.lists(st.integers(0, (1 << 63) - 1), max_size=40), st.binary(max_size=20))
def test_msg_id_twins_format_what_put_result_formats(offsets, prefix):
    prefix = prefix.hex().upper().encode()[:16]
    packed = array("q", offsets)
    expected = ",".join(PutResult(PutStatus.PUT_OK, o, 1, 0, 0, prefix.decode()).msg_id
                        for o in offsets)
    assert pure_encode.msg_ids(prefix, packed, len(offsets)) == expected
    assert compiled_encode.msg_ids(prefix, packed, len(offsets)) == expected


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_a_batch_cut_short_by_a_full_disk_keeps_the_queue_offsets_it_wrote(tmp_path, path):
    from rocketq.store.errors import DiskFullError

    log = CommitLog(small_config(tmp_path, mappedFileSizeCommitLog=8192))
    if path == "python":
        log._scratch = None
    body = encode_batch([(0, b"x" * 100, b"") for _ in range(40)])
    assert len(log.append_batch(BatchMessage("T", body, 0))) == 40
    real_create = log.files.create

    def full(offset: int):
        raise DiskFullError(28, "no space left")

    log.files.create = full
    with pytest.raises(DiskFullError):
        log.append_batch(BatchMessage("T", body, 0))  # crosses into a file that cannot be made
    written = log.queue_offsets[("T", 0)]
    assert 40 < written < 80  # the records sealed in the full file keep their offsets
    log.files.create = real_create
    results = log.append_batch(BatchMessage("T", body, 0))
    assert results[0].queue_offset == written  # no offset is handed out twice
    log.files.close()
