"""ConsumeQueue: writing and reading units, file boundaries, recovery, truncation, retention."""

from __future__ import annotations

import os

import pytest

from rocketq.store.consumequeue import UNIT, UNIT_SIZE, ConsumeQueue
from rocketq.store.mapped_file_queue import offset_to_name

#: Ten units a file, so a few dozen units span several files.
FILE_SIZE = 10 * UNIT_SIZE
BASE = 1000
RECORD = 100


def unit_at(i: int) -> tuple[int, int, int]:
    """The unit of queue offset ``i``: records of RECORD bytes back to back from BASE."""
    return (BASE + i * RECORD, RECORD, i + 7)


def flat(first: int, n: int, make=unit_at) -> list[int]:
    out: list[int] = []
    for i in range(first, first + n):
        out.extend(make(i))
    return out


def other_unit(i: int) -> tuple[int, int, int]:
    return (50_000 + i * 10, 10, -i)


def file_names(cq: ConsumeQueue) -> list[str]:
    return sorted(os.listdir(cq.files.directory))


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "consumequeue")


@pytest.fixture
def opened():
    queues: list[ConsumeQueue] = []

    def open_queue(root: str, *, load: bool = False, topic: str = "T",
                   queue_id: int = 0) -> ConsumeQueue:
        cq = ConsumeQueue(root, topic, queue_id, FILE_SIZE)
        if load:
            cq.files.load()
            cq.recover()
        queues.append(cq)
        return cq

    yield open_queue
    for cq in queues:
        cq.close()


def reopen(opened, cq: ConsumeQueue, root: str) -> ConsumeQueue:
    cq.close()
    return opened(root, load=True, topic=cq.topic, queue_id=cq.queue_id)


def write_bytes(cq: ConsumeQueue, queue_offset: int, at: int, data: bytes) -> None:
    """Overwrite bytes of the unit at ``queue_offset`` in its file."""
    pos = queue_offset * UNIT_SIZE
    f = cq.files.find(pos)
    start = pos - f.from_offset + at
    f.mm[start:start + len(data)] = data


# ---------------------------------------------------------------------------- writing, reading


def test_put_and_read_single_units(root, opened):
    cq = opened(root, topic="Orders", queue_id=3)
    assert (cq.min_offset, cq.max_offset) == (0, 0)
    assert cq.unit(0) is None and cq.units(0, 1) is None

    for i in range(4):
        assert cq.put(i, *unit_at(i)) is True

    assert (cq.min_offset, cq.max_offset) == (0, 4)
    assert [cq.unit(i) for i in range(4)] == [unit_at(i) for i in range(4)]
    assert cq.unit(4) is None
    assert cq.max_physic_offset == BASE + 4 * RECORD
    assert cq.files.directory == os.path.join(root, "Orders", "3")
    with open(os.path.join(cq.files.directory, offset_to_name(0)), "rb") as fh:
        assert UNIT.unpack(fh.read(UNIT_SIZE)) == unit_at(0)


def test_units_view_stops_at_the_written_end_and_at_the_file_end(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 14))

    view = cq.units(1, 3)
    assert [UNIT.unpack_from(view, k * UNIT_SIZE) for k in range(3)] == [
        unit_at(1), unit_at(2), unit_at(3)]
    assert len(cq.units(8, 5)) == 2 * UNIT_SIZE  # one file at a time
    assert len(cq.units(10, 100)) == 4 * UNIT_SIZE  # up to the written end
    assert cq.units(14, 1) is None
    assert cq.units(40, 1) is None


def test_put_run_crosses_file_boundaries(root, opened):
    cq = opened(root)
    assert cq.put_run(0, flat(0, 7)) is True
    assert cq.put_run(7, flat(7, 18)) is True

    assert file_names(cq) == [offset_to_name(0), offset_to_name(FILE_SIZE),
                              offset_to_name(2 * FILE_SIZE)]
    assert [f.wrote_position for f in cq.files.files] == [FILE_SIZE, FILE_SIZE, 5 * UNIT_SIZE]
    assert (cq.min_offset, cq.max_offset) == (0, 25)
    assert [cq.unit(i) for i in range(25)] == [unit_at(i) for i in range(25)]
    assert cq.max_physic_offset == BASE + 25 * RECORD


def test_put_run_keeps_units_already_present(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 12))

    assert cq.put_run(0, flat(0, 12, other_unit)) is False
    assert cq.put_run(4, flat(4, 3, other_unit)) is False
    assert cq.put_run(9, flat(9, 6, other_unit)) is True  # 9..11 kept, 12..14 new

    assert cq.max_offset == 15
    assert [cq.unit(i) for i in range(15)] == (
        [unit_at(i) for i in range(12)] + [other_unit(i) for i in range(12, 15)])
    assert cq.max_physic_offset == sum(other_unit(14)[:2])


def test_a_gap_is_filled_with_zero_units(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 3))
    assert cq.put_run(5, flat(5, 2)) is True
    assert cq.put_run(24, flat(24, 2)) is True  # the gap spans a file boundary

    assert (cq.min_offset, cq.max_offset) == (0, 26)
    assert len(cq.files.files) == 3
    holes = [3, 4, *range(7, 24)]
    assert all(cq.unit(i) == (0, 0, 0) for i in holes)
    assert all(cq.unit(i) == unit_at(i) for i in (0, 1, 2, 5, 6, 24, 25))
    assert cq.max_physic_offset == BASE + 26 * RECORD


@pytest.mark.parametrize("first, count", [(13, 4), (18, 1), (18, 2), (10, 3), (3, 25)])
def test_a_queue_that_starts_mid_way(root, opened, first, count):
    cq = opened(root)
    cq.put_run(first, flat(first, count))
    end = first + count
    file_start = first * UNIT_SIZE // FILE_SIZE * FILE_SIZE

    assert (cq.min_offset, cq.max_offset) == (first, end)
    assert file_names(cq)[0] == offset_to_name(file_start)
    assert cq.unit(file_start // UNIT_SIZE - 1) is None  # no file there
    assert cq.unit(first) == unit_at(first)

    cq = reopen(opened, cq, root)
    assert (cq.min_offset, cq.max_offset) == (first, end)
    assert cq.max_physic_offset == BASE + end * RECORD
    assert [cq.unit(i) for i in range(first, end)] == [unit_at(i) for i in range(first, end)]
    assert cq.put_run(end, flat(end, 1)) is True
    assert cq.max_offset == end + 1


# ---------------------------------------------------------------------------- recovery


@pytest.mark.parametrize("count", [1, 7, 10, 20, 25])
def test_recover_finds_the_end_after_reopening(root, opened, count):
    cq = opened(root)
    cq.put_run(0, flat(0, count))
    cq.flush()

    cq = reopen(opened, cq, root)

    assert (cq.min_offset, cq.max_offset) == (0, count)
    assert cq.max_physic_offset == BASE + count * RECORD
    assert [cq.unit(i) for i in range(count)] == [unit_at(i) for i in range(count)]
    assert cq.unit(count) is None
    assert cq.put_run(0, flat(0, count, other_unit)) is False
    assert cq.put_run(count, flat(count, 3)) is True
    assert [cq.unit(i) for i in range(count + 3)] == [unit_at(i) for i in range(count + 3)]


def test_recover_of_a_queue_without_files_changes_nothing(root, opened):
    cq = opened(root, load=True)
    assert (cq.min_offset, cq.max_offset, cq.max_physic_offset) == (0, 0, 0)


@pytest.mark.parametrize("torn", [
    pytest.param((8, bytes(12)), id="size-and-code-missing"),
    pytest.param((8, bytes(4)), id="size-missing"),
    pytest.param((0, bytes(20)), id="nothing-landed"),
])
@pytest.mark.parametrize("count", [7, 21])
def test_recover_drops_a_torn_last_unit(root, opened, torn, count):
    at, data = torn
    cq = opened(root)
    cq.put_run(0, flat(0, count))
    write_bytes(cq, count - 1, at, data)

    cq = reopen(opened, cq, root)

    assert cq.max_offset == count - 1
    assert cq.unit(count - 1) is None
    assert cq.max_physic_offset == BASE + (count - 1) * RECORD
    assert cq.put_run(count - 1, flat(count - 1, 1)) is True
    assert cq.unit(count - 1) == unit_at(count - 1)


def test_recover_with_an_empty_last_file(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 21))
    write_bytes(cq, 20, 0, bytes(UNIT_SIZE))  # the third file holds nothing

    cq = reopen(opened, cq, root)

    assert len(cq.files.files) == 3
    assert (cq.min_offset, cq.max_offset) == (0, 20)
    assert cq.max_physic_offset == BASE + 20 * RECORD
    assert cq.put_run(20, flat(20, 2)) is True
    assert [cq.unit(i) for i in range(22)] == [unit_at(i) for i in range(22)]


def test_recover_keeps_a_first_unit_at_commitlog_offset_zero(root, opened):
    cq = opened(root)
    cq.put_run(0, [0, 91, 0, 91, 95, 0])

    cq = reopen(opened, cq, root)

    assert (cq.min_offset, cq.max_offset) == (0, 2)
    assert cq.unit(0) == (0, 91, 0)


def test_recover_keeps_units_after_a_gap(root, opened):
    big = ConsumeQueue(root, "Big", 0, 100 * UNIT_SIZE)
    big.put_run(0, flat(0, 3))
    big.put_run(10, flat(10, 2))
    assert big.max_offset == 12
    big.close()

    big = ConsumeQueue(root, "Big", 0, 100 * UNIT_SIZE)
    big.files.load()
    big.recover()
    try:
        assert big.max_offset == 12
        assert big.unit(11) == unit_at(11)
    finally:
        big.close()


# ---------------------------------------------------------------------------- truncation


def test_truncate_to_commitlog_drops_units_reaching_past_it(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 25))
    # Unit 12 starts before the cut but ends after it: it goes too.
    cut = BASE + 12 * RECORD + RECORD // 2

    cq.truncate_to_commitlog(cut)

    assert (cq.min_offset, cq.max_offset) == (0, 12)
    assert cq.max_physic_offset == BASE + 12 * RECORD
    assert cq.unit(12) is None
    assert cq.unit(11) == unit_at(11)
    assert file_names(cq) == [offset_to_name(0), offset_to_name(FILE_SIZE)]
    assert cq.put_run(12, flat(12, 1, other_unit)) is True
    assert cq.unit(12) == other_unit(12)

    cq = reopen(opened, cq, root)
    assert cq.max_offset == 13
    assert cq.unit(12) == other_unit(12)


def test_truncate_to_commitlog_is_a_no_op_when_nothing_reaches_past_it(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 15))
    cq.truncate_to_commitlog(BASE + 15 * RECORD)
    assert cq.max_offset == 15
    assert cq.unit(14) == unit_at(14)


def test_truncate_to_commitlog_at_a_file_boundary(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 25))

    cq.truncate_to_commitlog(BASE + 20 * RECORD)

    assert cq.max_offset == 20
    assert cq.max_physic_offset == BASE + 20 * RECORD
    assert cq.unit(20) is None
    cq = reopen(opened, cq, root)
    assert (cq.min_offset, cq.max_offset) == (0, 20)
    assert cq.unit(19) == unit_at(19)


def test_truncate_to_commitlog_stops_at_a_leading_hole(root, opened):
    cq = opened(root)
    cq.put_run(5, flat(5, 3))

    cq.truncate_to_commitlog(BASE)

    assert (cq.min_offset, cq.max_offset, cq.max_physic_offset) == (5, 5, 0)
    assert cq.unit(5) is None


def test_a_queue_truncated_to_empty_reopens_empty(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 3))
    cq.truncate_to_commitlog(0)
    assert (cq.min_offset, cq.max_offset) == (0, 0)

    cq = reopen(opened, cq, root)

    assert (cq.min_offset, cq.max_offset) == (0, 0)
    assert cq.put_run(0, flat(0, 1)) is True


# ---------------------------------------------------------------------------- retention


def test_correct_min_offset_moves_past_deleted_messages(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 25))

    cq.correct_min_offset(BASE + 7 * RECORD)
    assert cq.min_offset == 7
    cq.correct_min_offset(BASE + 7 * RECORD + 1)  # unit 7 starts below it
    assert cq.min_offset == 8
    cq.correct_min_offset(0)  # never moves back
    assert cq.min_offset == 8
    cq.correct_min_offset(BASE + 100 * RECORD)
    assert cq.min_offset == cq.max_offset == 25
    assert len(cq.files.files) == 3  # only the offset moved


def test_correct_min_offset_skips_a_leading_hole(root, opened):
    cq = opened(root)
    cq.put_run(3, flat(3, 4))
    cq.correct_min_offset(0)
    assert cq.min_offset == 3
    cq.correct_min_offset(BASE + 5 * RECORD)
    assert cq.min_offset == 5


def test_delete_expired_removes_whole_files_below_the_commitlog_min(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 25))

    # The last unit of the first file ends exactly at the minimum: that file goes.
    assert cq.delete_expired(BASE + 9 * RECORD) == 0
    assert cq.min_offset == 9
    assert cq.delete_expired(BASE + 10 * RECORD) == 1

    assert file_names(cq) == [offset_to_name(FILE_SIZE), offset_to_name(2 * FILE_SIZE)]
    assert (cq.min_offset, cq.max_offset) == (10, 25)
    assert cq.unit(10) == unit_at(10)
    assert cq.put_run(25, flat(25, 1)) is True

    cq = reopen(opened, cq, root)
    assert (cq.min_offset, cq.max_offset) == (10, 26)
    assert cq.unit(25) == unit_at(25)


def test_delete_expired_keeps_the_last_file(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 25))

    assert cq.delete_expired(BASE + 1000 * RECORD) == 2

    assert file_names(cq) == [offset_to_name(2 * FILE_SIZE)]
    assert cq.min_offset == cq.max_offset == 25
    assert cq.delete_expired(BASE + 1000 * RECORD) == 0


def test_recover_finds_the_end_after_a_gap_across_files(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 3))
    cq.put_run(25, flat(25, 2))  # files 0, 10 (only zeros) and 20
    cq.flush()

    cq = reopen(opened, cq, root)

    assert (cq.min_offset, cq.max_offset) == (0, 27)
    assert [cq.unit(i) for i in (0, 1, 2, 25, 26)] == [unit_at(i) for i in (0, 1, 2, 25, 26)]
    assert cq.unit(10) == (0, 0, 0)
    assert cq.max_physic_offset == BASE + 27 * RECORD
    assert cq.put_run(27, flat(27, 1)) is True


def test_recover_drops_empty_files_and_a_torn_unit_after_the_end(root, opened):
    cq = opened(root)
    cq.put_run(0, flat(0, 12))
    cq.flush()
    # A crash between writing a unit's offset and its size, and a file created after the end.
    f = cq.files.last
    UNIT.pack_into(f.view, 2 * UNIT_SIZE, BASE + 12 * RECORD, 0, 0)
    cq.files.create(2 * FILE_SIZE)

    cq = reopen(opened, cq, root)

    assert (cq.min_offset, cq.max_offset) == (0, 12)
    assert cq.unit(12) is None
    assert file_names(cq) == [offset_to_name(0), offset_to_name(FILE_SIZE)]
    assert cq.put_run(12, flat(12, 1)) is True
    assert cq.unit(12) == unit_at(12)
