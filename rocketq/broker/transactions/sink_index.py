"""What the exactly-once sinks' index (``sink_state``) keeps of a txn's open half messages.

A SINK_PREPARE stores a task's rows as a *run* of consecutive halves, and the index keeps the
run whole (:class:`SentHalves`: the request's batch body, where each element landed, and what
their committed messages share), so a commit appends the run's committed messages as one
batch (its body again) without reading or decoding a half, and the index costs one object
per request rather than one per row. Halves found by reading the half topic (sent one by
one, or indexed again after a restart) are kept one by one, as their records (or None past
the cache's budget: read again when committed). A run some of whose halves were resolved
apart from the others (a rare case: the transaction check resolves a txn's halves together)
is broken into single halves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter

from ...protocol import MessageRecord
from ...protocol.message import join_properties
from ...store import BatchMessage, StoreMessage
from .half_messages import COMMIT

#: A batch element's bytes besides its body and properties.
ELEMENT_OVERHEAD = 22
#: What one element's span tuple costs in memory, counted against the cache budget.
SPAN_BYTES = 200


class SentHalves:
    """The ``count`` halves one SINK_PREPARE stored, from half queue offset ``first`` on: its
    batch body (the elements as sent, with their spans from ``split_batch``), where each
    element landed in the CommitLog, and what their committed messages share (destination,
    birth, the properties the broker adds). Past the cache's budget the body is not kept
    (:meth:`forget`): the run is then read back when committed."""

    __slots__ = ("topic", "queue_id", "body", "spans", "count", "offsets", "first",
                 "born_timestamp", "born_host", "born_port", "suffix")

    def __init__(self, topic: str, queue_id: int, body: bytes,
                 spans: list[tuple[int, int, int, int, int]], offsets: Sequence[int],
                 first: int, born_timestamp: int, born_host: bytes, born_port: int,
                 suffix: bytes) -> None:
        self.topic, self.queue_id, self.spans = topic, queue_id, spans
        self.body: bytes | None = body
        self.count = len(spans)
        self.offsets, self.first = offsets, first
        self.born_timestamp, self.born_host, self.born_port = born_timestamp, born_host, born_port
        self.suffix = suffix

    def __len__(self) -> int:
        return self.count

    @property
    def kept(self) -> int:
        """Bytes kept for the run's contents: its body, and each element's span tuple (about
        200 bytes of Python objects, more than a small row's body)."""
        return len(self.body) + SPAN_BYTES * len(self.spans) if self.body is not None else 0

    def forget(self) -> None:
        """Keep where the run is, not what it holds."""
        self.body, self.spans = None, []

    def size(self, i: int) -> int:
        """Bytes of element ``i`` in the body."""
        _flag, _body_at, body_len, _props_at, props_len = self.spans[i]
        return ELEMENT_OVERHEAD + body_len + props_len

    def committed(self, i: int) -> StoreMessage:
        """The message element ``i`` becomes when its txn is committed: what the committed
        half read back would give (``Transactions._committed``)."""
        flag, body_at, body_len, props_at, props_len = self.spans[i]
        body = self.body
        assert body is not None
        return StoreMessage(
            self.topic, body[body_at:body_at + body_len], self.queue_id,
            properties=join_properties(body[props_at:props_at + props_len], self.suffix),
            flag=flag, sysflag=COMMIT, born_timestamp=self.born_timestamp,
            born_host=self.born_host, born_port=self.born_port,
            prepared_transaction_offset=self.offsets[i])

    def committed_batch(self) -> BatchMessage:
        """The messages the run becomes when its txn is committed, as one batch: the
        request's body again, to the real destination, with the properties the broker
        adds and each half's CommitLog offset as its prepared transaction offset (as
        ``committed`` gives them one by one)."""
        assert self.body is not None
        return BatchMessage(self.topic, self.body, self.queue_id, suffix=self.suffix,
                            sysflag=COMMIT, born_timestamp=self.born_timestamp,
                            born_host=self.born_host, born_port=self.born_port,
                            prepared_offsets=self.offsets)


#: A half kept alone: element ``i`` of a run, the record read back, or None (read again when
#: committed).
Single = tuple[SentHalves, int] | MessageRecord | None
_first = itemgetter(0)


def single_size(entry: Single) -> int:
    """Bytes of a half kept alone (counted against the cache's budget)."""
    if entry is None:
        return 0
    if type(entry) is tuple:
        return entry[0].size(entry[1])
    return len(entry.body)  # type: ignore[union-attr]


class TxnHalves:
    """The open halves of one txn of a sink's batch: whole runs, and single halves by half
    queue offset. ``len`` counts the halves."""

    __slots__ = ("runs", "single")

    def __init__(self) -> None:
        self.runs: list[SentHalves] = []
        self.single: dict[int, Single] = {}

    def __len__(self) -> int:
        return sum(run.count for run in self.runs) + len(self.single)

    def __contains__(self, offset: int) -> bool:
        return offset in self.single or any(
            run.first <= offset < run.first + run.count for run in self.runs)

    def add_run(self, run: SentHalves) -> int:
        """Keep ``run`` whole (replacing single halves it holds, indexed from a read that
        came first); returns the change in bytes kept."""
        grown = run.kept
        if self.single:
            for offset in range(run.first, run.first + run.count):
                if offset in self.single:
                    grown -= single_size(self.single.pop(offset))
        self.runs.append(run)
        return grown

    def prune(self, low: int, resolved: set[int]) -> int:
        """Drop the halves resolved (below ``low`` or in ``resolved``); returns the bytes
        no longer kept."""
        freed = 0
        if self.runs:
            kept = []
            for run in self.runs:
                first, n = run.first, run.count
                if first >= low and (not resolved
                                     or resolved.isdisjoint(range(first, first + n))):
                    kept.append(run)
                    continue
                freed += run.kept  # resolved, or some of it: its open halves alone
                for i in range(n):
                    offset = first + i
                    if offset >= low and offset not in resolved:
                        if run.body is None:
                            self.single[offset] = None
                        else:
                            self.single[offset] = (run, i)
                            freed -= run.size(i)
            self.runs = kept
        if self.single:
            for offset in [o for o in self.single if o < low or o in resolved]:
                freed += single_size(self.single.pop(offset))
        return freed

    def offsets(self) -> Iterator[int]:
        for run in self.runs:
            yield from range(run.first, run.first + run.count)
        yield from self.single

    def unread(self) -> list[int]:
        """The offsets of the single halves not kept (to read before :meth:`committed`)."""
        return [offset for offset, entry in self.single.items() if entry is None]

    def singles_committed(self, read: dict[int, MessageRecord],
                          make: Callable[[MessageRecord], StoreMessage]
                          ) -> list[tuple[int, StoreMessage | None]]:
        """``(half queue offset, committed message)`` of the single halves, in half queue
        order: from the runs they came from, from the records kept, or from ``read`` (the
        records of :meth:`unread`) with ``make``."""
        out: list[tuple[int, StoreMessage | None]] = []
        for offset, entry in sorted(self.single.items(), key=_first):
            if type(entry) is tuple:
                out.append((offset, entry[0].committed(entry[1])))
            else:
                out.append((offset, make(read[offset] if entry is None else entry)))  # type: ignore[arg-type]
        return out
