"""Reading a queue (RocketMQ's ``DefaultMessageStore.getMessage``): the ConsumeQueue's units
say where each message is; the answer is views of the CommitLog's own bytes, never copied or
re-encoded, with RocketMQ's statuses so a broker maps them to pull response codes."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from ..protocol import MessageRecord, decode_record
from .commitlog import CommitLog
from .consumequeue import UNIT, ConsumeQueue


class GetStatus(enum.Enum):
    """Outcome of a read (RocketMQ's GetMessageStatus)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetResult:
    """Messages read from one queue: raw record bytes, never re-encoded.

    ``buffers`` are memoryviews of the mapped CommitLog. Call ``release()`` (or use the
    result as a context manager) when done so deleted files can be unmapped.
    """

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)
    #: CommitLog bytes between the last unit read and the log's end: how far behind the
    #: reader is (RocketMQ's ``maxOffsetPy - maxPhyOffsetPulling``).
    behind: int = 0
    #: The store's advice that the reader is so far behind that the data is out of memory,
    #: and a slave should serve it (RocketMQ's ``suggestPullingFromSlave``).
    suggest_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    @property
    def total_size(self) -> int:
        return sum(len(b) for b in self.buffers)

    def data(self) -> bytes:
        """All records back to back, as a PULL_MESSAGE body."""
        return b"".join(self.buffers)

    def decode(self, decompress: bool = True) -> list[MessageRecord]:
        return [decode_record(b, decompress=decompress) for b in self.buffers]

    def release(self) -> None:
        for b in self.buffers:
            b.release()
        self.buffers = []

    def __enter__(self) -> GetResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def get_messages(cq: ConsumeQueue | None, commitlog: CommitLog, offset: int, max_count: int,
                 tag_codes: set[int] | frozenset[int] | None,
                 record_filter: Callable[[memoryview], bool] | None,
                 max_bytes: int) -> GetResult:
    """Read up to ``max_count`` messages of a queue from logical ``offset``.

    ``tag_codes`` keeps units whose tag code is in the set (None keeps all);
    ``record_filter`` can look at each record's bytes (SQL92 filters). The answer's status
    and ``next_begin_offset`` follow RocketMQ's rules, so a broker maps them to pull codes.
    """
    if cq is None:
        return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    min_offset, max_offset = cq.min_offset, cq.max_offset
    if max_offset == 0 or max_offset <= min_offset:
        status = GetStatus.NO_MESSAGE_IN_QUEUE
        return GetResult(status, _correct(offset, max_offset, min_offset), min_offset,
                         max_offset)
    if offset < min_offset:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
    if offset == max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, _correct(offset, max_offset,
                                                                   min_offset),
                         min_offset, max_offset)
    result = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    units = cq.units(offset, max(800, max_count))
    if units is None:
        result.status = GetStatus.OFFSET_FOUND_NULL
        result.next_begin_offset = offset + 1 if offset + 1 < max_offset else offset
        return result
    commitlog_min = commitlog.min_offset
    files = commitlog.files
    total = 0
    next_offset = offset
    removed = False
    buffers = result.buffers
    last_phys = -1
    # The CommitLog file being read is held (RocketMQ's ReferenceResource) while its records
    # are sliced, so a deletion meanwhile waits for the slicing instead of unmapping the file
    # under it; a file already being deleted is not held, and its records count as removed.
    held = None
    try:
        for phys, size, code in UNIT.iter_unpack(units):
            if len(buffers) >= max_count or (buffers and total + size > max_bytes):
                break
            next_offset += 1
            last_phys = phys
            if size <= 0:
                continue
            if phys < commitlog_min:
                removed = True
                continue
            if tag_codes is not None and code not in tag_codes:
                continue
            f = files.find(phys)
            if f is not held:
                if held is not None:
                    held.release()
                held = f if f is not None and f.hold() else None
            if held is None:
                removed = True
                continue
            pos = phys - held.from_offset
            view = held.view[pos:pos + size]
            if record_filter is not None and not record_filter(view):
                view.release()
                continue
            buffers.append(view)
            total += size
    finally:
        if held is not None:
            held.release()
        units.release()
    result.next_begin_offset = next_offset
    if last_phys >= 0:
        result.behind = max(0, commitlog.max_offset - last_phys)
    if buffers:
        result.status = GetStatus.FOUND
    elif removed:
        result.status = GetStatus.MESSAGE_WAS_REMOVING
    return result


def _correct(offset: int, max_offset: int, min_offset: int) -> int:
    """Where a consumer asking for a bad offset should go next (nextOffsetCorrection)."""
    return max_offset if offset > max_offset else max(min_offset, 0)
