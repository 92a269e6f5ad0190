"""Dispatcher: CommitLog records into ConsumeQueue units and index entries."""

from __future__ import annotations

import struct

import pytest

from rocketq.protocol.message import (
    BLANK_MAGIC,
    SIZE_AND_MAGIC,
    SysFlag,
    decode_record,
    encode_batch,
    tags_code,
)
from rocketq.protocol.topic import SCHEDULE_TOPIC, TIMER_TOPIC
from rocketq.store.commitlog import BatchMessage, CommitLog, StoreMessage
from rocketq.store.consumequeue import ConsumeQueue
from rocketq.store.dispatch import Dispatcher
from rocketq.store.index import Index

from .conftest import small_config

FOREVER = 1 << 62
DELAY_LEVELS = [1000, 5000, 10000]


class Env:
    """A real CommitLog, Index and ConsumeQueues under one temporary directory."""

    def __init__(self, root, with_index: bool = True) -> None:
        self.config = small_config(root)
        self.commitlog = CommitLog(self.config)
        self.index = None
        if with_index:
            self.index = Index(self.config.store_path_index, self.config.maxHashSlotNum,
                               self.config.maxIndexNum)
            self.index.load()
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.requested: list[tuple[str, int]] = []
        self.dispatcher = self.new_dispatcher()

    def new_dispatcher(self) -> Dispatcher:
        return Dispatcher(self.commitlog, self.index, self.get_queue, DELAY_LEVELS)

    def get_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        self.requested.append((topic, queue_id))
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = ConsumeQueue(
                self.config.store_path_consume_queue, topic, queue_id,
                self.config.mappedFileSizeConsumeQueue)
        return cq

    def run(self, end: int | None = None, **kwargs):
        return self.dispatcher.run(self.commitlog.max_offset if end is None else end, **kwargs)

    def units(self, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
        cq = self.queues[(topic, queue_id)]
        return [cq.unit(i) for i in range(cq.min_offset, cq.max_offset)]

    def query(self, topic: str, key: str) -> list[int]:
        assert self.index is not None
        return sorted(self.index.query(topic, key, 64, 0, FOREVER))

    def overwrite(self, offset: int, fmt: str, value: int) -> bytes:
        """Overwrite bytes of the CommitLog at ``offset``; return what was there."""
        f = self.commitlog.files.find(offset)
        pos = offset - f.from_offset
        size = struct.calcsize(fmt)
        old = bytes(f.mm[pos:pos + size])
        struct.pack_into(fmt, f.mm, pos, value)
        return old

    def restore(self, offset: int, old: bytes) -> None:
        f = self.commitlog.files.find(offset)
        pos = offset - f.from_offset
        f.mm[pos:pos + len(old)] = old

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        if self.index is not None:
            self.index.close()
        self.commitlog.files.close()


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path / "store")
    yield e
    e.close()


def unit_of(result, code: int = 0) -> tuple[int, int, int]:
    return (result.commitlog_offset, result.size, code)


# ---------------------------------------------------------------------------- units


def test_units_point_at_records_and_carry_tag_codes(env):
    tags = [None if i % 3 == 0 else "TagA" for i in range(12)] + ["TagB"]
    messages = [StoreMessage.create("Orders", b"o%d" % i, i % 2, tags=tags[i])
                for i in range(12)]
    messages.append(StoreMessage.create("Other", b"x", 3, tags="TagB"))
    results = env.commitlog.append(messages)

    count, grown = env.run()

    assert count == 13
    assert grown == {("Orders", 0): 6, ("Orders", 1): 6, ("Other", 3): 1}
    assert env.dispatcher.reput_offset == env.commitlog.max_offset
    for m, r, tag in zip(messages, results, tags, strict=True):
        cq = env.queues[(m.topic, m.queue_id)]
        assert cq.unit(r.queue_offset) == unit_of(r, tags_code(tag))
        phys, size, _ = cq.unit(r.queue_offset)
        record = decode_record(env.commitlog.view(phys, size))
        assert (record.topic, record.body, record.queue_offset) == (
            m.topic, m.body, r.queue_offset)
    assert env.units("Orders", 0)[0][2] == 0  # message 0 has no tags
    assert env.units("Orders", 0)[1][2] == tags_code("TagA") != 0


def test_tags_only_inside_another_value_or_empty_give_code_zero(env):
    results = env.commitlog.append([
        StoreMessage("T", b"a", properties=b"note\x01TAGS\x01fake\x02"),
        StoreMessage("T", b"b", properties=b"TAGS\x01\x02"),
        StoreMessage("T", b"c", properties=b"x\x01y\x02TAGS\x01real"),
    ])
    env.run()
    assert env.units("T", 0) == [unit_of(results[0]), unit_of(results[1]),
                                 unit_of(results[2], tags_code("real"))]


def test_each_run_dispatches_only_new_records_and_reports_grown_queues(env):
    env.commitlog.append([StoreMessage.create("T", b"%d" % i, i % 2) for i in range(4)])
    assert env.run() == (4, {("T", 0): 2, ("T", 1): 2})
    assert env.run() == (0, {})

    more = env.commitlog.append([StoreMessage.create("T", b"new", 1),
                                 StoreMessage.create("U", b"u", 0)])
    count, grown = env.run()
    assert (count, grown) == (2, {("T", 1): 3, ("U", 0): 1})
    assert env.queues[("T", 0)].max_offset == 2
    assert env.queues[("T", 1)].unit(2) == unit_of(more[0])


def test_non_contiguous_queue_offsets_in_one_run_leave_a_hole(env):
    first = env.commitlog.append([StoreMessage.create("T", b"%d" % i) for i in range(2)])
    env.commitlog.queue_offsets[("T", 0)] = 5
    later = env.commitlog.append([StoreMessage.create("T", b"%d" % i) for i in range(2)])
    assert [r.queue_offset for r in first + later] == [0, 1, 5, 6]

    count, grown = env.run()

    assert (count, grown) == (4, {("T", 0): 7})
    cq = env.queues[("T", 0)]
    assert [cq.unit(i) for i in range(7)] == [
        unit_of(first[0]), unit_of(first[1]), (0, 0, 0), (0, 0, 0), (0, 0, 0),
        unit_of(later[0]), unit_of(later[1])]


def test_batch_elements_become_consecutive_units(env):
    body = encode_batch([(0, b"b0", "TAGS\x01red\x02KEYS\x01bk0\x02"),
                         (0, b"b1", "KEYS\x01bk1"),
                         (0, b"b2", "TAGS\x01blue")])
    env.commitlog.append([StoreMessage.create("B", b"single", 2)])
    results = env.commitlog.append_batch(BatchMessage("B", body, 2,
                                                      suffix=b"CLUSTER\x01c1\x02"))
    count, grown = env.run()
    assert (count, grown) == (4, {("B", 2): 4})
    assert env.units("B", 2)[1:] == [unit_of(results[0], tags_code("red")),
                                     unit_of(results[1]),
                                     unit_of(results[2], tags_code("blue"))]
    assert env.query("B", "bk1") == [results[1].commitlog_offset]


# ---------------------------------------------------------------------------- special topics


def test_schedule_topic_units_carry_the_delivery_time(env):
    levels = ["2", "3", "0", "99", "x", None]
    messages = [StoreMessage.create(SCHEDULE_TOPIC, b"%d" % i, 1, tags="ignored",
                                    properties={} if level is None else {"DELAY": level})
                for i, level in enumerate(levels)]
    results = env.commitlog.append(messages)
    env.run()
    codes = [u[2] for u in env.units(SCHEDULE_TOPIC, 1)]
    ts = [r.store_timestamp for r in results]
    assert codes == [ts[0] + 5000,   # level 2
                     ts[1] + 10000,  # level 3
                     ts[2] + 1000,   # below level 1: level 1
                     ts[3] + 10000,  # past the last level: the last one
                     ts[4] + 1000,   # not a number
                     ts[5] + 1000]   # no DELAY: level 1
    assert [u[:2] for u in env.units(SCHEDULE_TOPIC, 1)] == [
        unit_of(r)[:2] for r in results]


def test_timer_topic_units_carry_the_timeout(env):
    results = env.commitlog.append([
        StoreMessage.create(TIMER_TOPIC, b"a", 0, properties={"TIMER_OUT_MS": "1700000000123"}),
        StoreMessage.create(TIMER_TOPIC, b"b", 0, properties={"TIMER_OUT_MS": "soon"}),
        StoreMessage.create(TIMER_TOPIC, b"c", 0, tags="t"),
    ])
    env.run()
    assert env.units(TIMER_TOPIC, 0) == [
        unit_of(results[0], 1700000000123),
        unit_of(results[1], results[1].store_timestamp),
        unit_of(results[2], results[2].store_timestamp)]


def test_half_and_rollback_records_get_no_unit_but_committed_ones_do(env):
    flags = [0, SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_COMMIT,
             SysFlag.TRANSACTION_ROLLBACK, SysFlag.TRANSACTION_PREPARED | SysFlag.MULTI_TAGS, 0]
    results = env.commitlog.append([StoreMessage.create("Tx", b"%d" % i, 0, tags="t", sysflag=f)
                                    for i, f in enumerate(flags)])

    count, grown = env.run()

    assert count == 6
    assert grown == {("Tx", 0): 3}
    code = tags_code("t")
    assert env.units("Tx", 0) == [unit_of(results[0], code), unit_of(results[2], code),
                                  unit_of(results[5], code)]


def test_only_hidden_records_touch_no_queue(env):
    env.commitlog.append([
        StoreMessage.create("Half", b"h", 0, sysflag=SysFlag.TRANSACTION_PREPARED),
        StoreMessage.create("Rollback", b"r", 0, sysflag=SysFlag.TRANSACTION_ROLLBACK)])
    assert env.run() == (2, {})
    assert env.requested == []
    assert env.dispatcher.reput_offset == env.commitlog.max_offset


# ---------------------------------------------------------------------------- index


def test_index_entries_for_unique_key_and_every_keys_word(env):
    results = env.commitlog.append([
        StoreMessage.create("K", b"0", 0, keys=["alpha", "beta"],
                            properties={"UNIQ_KEY": "UID0"}),
        StoreMessage.create("K", b"1", 1, keys="beta  gamma", properties={"UNIQ_KEY": "UID1"}),
        StoreMessage("K", b"2", properties=b"note\x01UNIQ_KEY\x01FAKE\x02UNIQ_KEY\x01REAL\x02"),
        StoreMessage.create("Other", b"3", 0, keys="alpha"),
    ])
    env.run()
    offsets = [r.commitlog_offset for r in results]
    assert env.query("K", "alpha") == [offsets[0]]
    assert env.query("K", "beta") == [offsets[0], offsets[1]]
    assert env.query("K", "gamma") == [offsets[1]]
    assert env.query("K", "") == []  # the double space is not an empty key
    assert env.query("K", "UID0") == [offsets[0]]
    assert env.query("K", "UID1") == [offsets[1]]
    assert env.query("K", "REAL") == [offsets[2]]
    assert env.query("K", "FAKE") == []
    assert env.query("Other", "alpha") == [offsets[3]]
    assert env.query("Other", "beta") == []


def test_many_keys_in_one_run_are_all_indexed(env):
    results = env.commitlog.append([
        StoreMessage.create("Bulk", b"%d" % i, 0, keys=[f"k{i}", "all"],
                            properties={"UNIQ_KEY": f"U{i}"}) for i in range(40)])
    env.run()
    offsets = [r.commitlog_offset for r in results]
    assert env.query("Bulk", "all") == offsets
    assert all(env.query("Bulk", f"k{i}") == [offsets[i]] for i in range(40))
    assert all(env.query("Bulk", f"U{i}") == [offsets[i]] for i in range(40))


def test_index_from_skips_entries_for_records_at_or_before_it(env):
    results = env.commitlog.append([StoreMessage.create("I", b"%d" % i, 0, keys="k")
                                    for i in range(6)])
    offsets = [r.commitlog_offset for r in results]

    count, _ = env.run(index_from=offsets[2])

    assert count == 6
    assert env.query("I", "k") == offsets[3:]
    assert len(env.units("I", 0)) == 6  # units do not depend on index_from


def test_no_index_still_builds_units(tmp_path):
    e = Env(tmp_path / "store", with_index=False)
    try:
        results = e.commitlog.append([StoreMessage.create("N", b"n", 0, keys="k",
                                                          properties={"UNIQ_KEY": "U"})])
        assert e.run() == (1, {("N", 0): 1})
        assert e.units("N", 0) == [unit_of(results[0])]
    finally:
        e.close()


# ---------------------------------------------------------------------------- progress


def test_limit_stops_and_the_next_run_continues_where_it_stopped(env):
    results = env.commitlog.append([StoreMessage.create("L", b"%d" % i, 0, keys=f"k{i}")
                                    for i in range(10)])

    assert env.run(limit=3) == (3, {("L", 0): 3})
    assert env.dispatcher.reput_offset == results[3].commitlog_offset
    assert env.queues[("L", 0)].max_offset == 3

    assert env.run(limit=3) == (3, {("L", 0): 6})
    assert env.dispatcher.reput_offset == results[6].commitlog_offset

    assert env.run() == (4, {("L", 0): 10})
    assert env.dispatcher.reput_offset == env.commitlog.max_offset
    assert env.units("L", 0) == [unit_of(r) for r in results]
    assert all(env.query("L", f"k{i}") == [r.commitlog_offset] for i, r in enumerate(results))


def test_end_bounds_a_run(env):
    results = env.commitlog.append([StoreMessage.create("E", b"%d" % i) for i in range(5)])
    assert env.run(end=results[2].commitlog_offset) == (2, {("E", 0): 2})
    assert env.dispatcher.reput_offset == results[2].commitlog_offset
    assert env.run() == (3, {("E", 0): 5})


def test_records_across_commitlog_files_are_all_dispatched(env):
    file_size = env.config.mappedFileSizeCommitLog
    body = b"x" * 1500
    results = env.commitlog.append([StoreMessage.create("F", body, i % 3, tags="t")
                                    for i in range(150)])
    assert len(env.commitlog.files.files) >= 3
    # Where a file closes, a blank filler sits between the last record and the next file.
    last_in_first = max(i for i, r in enumerate(results) if r.commitlog_offset < file_size)
    filler_at = results[last_in_first].commitlog_offset + results[last_in_first].size
    assert filler_at < file_size == results[last_in_first + 1].commitlog_offset
    f = env.commitlog.files.files[0]
    assert SIZE_AND_MAGIC.unpack_from(f.mm, filler_at) == (file_size - filler_at, BLANK_MAGIC)

    # Stop right before the filler, then step over it in the next run.
    assert env.run(limit=last_in_first + 1)[0] == last_in_first + 1
    assert env.dispatcher.reput_offset == filler_at
    count, grown = env.run()

    assert count == 150 - last_in_first - 1
    assert grown == {("F", 0): 50, ("F", 1): 50, ("F", 2): 50}
    assert env.dispatcher.reput_offset == env.commitlog.max_offset
    code = tags_code("t")
    for q in range(3):
        assert env.units("F", q) == [unit_of(r, code) for r in results[q::3]]


def test_running_again_over_the_same_records_adds_nothing(env):
    results = env.commitlog.append([StoreMessage.create("R", b"%d" % i, i % 2, keys="k")
                                    for i in range(8)])
    env.run()
    before = {key: env.units(*key) for key in env.queues}
    indexed_to = env.index.end_phy_offset

    env.dispatcher.reput_offset = 0
    count, grown = env.run(index_from=indexed_to)
    assert (count, grown) == (8, {})

    fresh = env.new_dispatcher()
    fresh.reput_offset = results[3].commitlog_offset
    more = env.commitlog.append([StoreMessage.create("R", b"new", 1, keys="k")])
    env.dispatcher = fresh
    count, grown = env.run(index_from=indexed_to)

    assert (count, grown) == (6, {("R", 1): 5})
    assert {key: env.units(*key) for key in env.queues} == {
        ("R", 0): before[("R", 0)], ("R", 1): before[("R", 1)] + [unit_of(more[0])]}
    assert env.query("R", "k") == [r.commitlog_offset for r in results + more]


# ---------------------------------------------------------------------------- corruption


@pytest.mark.parametrize("field_fmt, at, value", [(">i", 4, 0x1234), (">i", 0, 7),
                                                  (">i", 0, 1 << 30)],
                         ids=["magic", "size-too-small", "size-past-end"])
def test_corrupt_record_raises_naming_its_offset(env, field_fmt, at, value):
    results = env.commitlog.append([StoreMessage.create("C", b"%d" % i, 0) for i in range(6)])
    env.run(limit=3)
    bad = results[3].commitlog_offset
    old = env.overwrite(bad + at, field_fmt, value)

    with pytest.raises(ValueError, match=f"CommitLog offset {bad}\\b"):
        env.run()
    assert env.dispatcher.reput_offset == bad
    assert env.queues[("C", 0)].max_offset == 3

    env.restore(bad + at, old)
    assert env.run() == (3, {("C", 0): 6})
    assert env.units("C", 0) == [unit_of(r) for r in results]


def test_corrupt_record_mid_run_keeps_the_good_records_before_it(env):
    results = env.commitlog.append([StoreMessage.create("C", b"%d" % i, 0) for i in range(6)])
    bad = results[4].commitlog_offset
    env.overwrite(bad + 4, ">i", 0x1234)

    with pytest.raises(ValueError, match=f"CommitLog offset {bad}\\b"):
        env.run()
    assert env.dispatcher.reput_offset == bad
    assert env.units("C", 0) == [unit_of(r) for r in results[:4]]
