"""What the exactly-once sinks' commits (``sink``) know, caught up from the store before each
use: the ledger of decisions (the topic ``RMQ_SYS_SINK_LEDGER``, the latest KEEP_DECISIONS
per sink in memory) and the index of the sinks' open half messages (``sink_index``'s entries,
found by reading the half topic, or handed over by SINK_PREPARE as it stores them, their
records kept up to CACHE_BYTES). Nothing of it is only in memory: a restarted or promoted
broker rebuilds both by reading."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import orjson

from ...protocol import TRANS_HALF_TOPIC, MessageRecord, Property
from ...protocol.topic import SINK_LEDGER_TOPIC
from .sink_index import SentHalves, TxnHalves, single_size

if TYPE_CHECKING:
    from ...store import MessageStore
    from .half_messages import Transactions

log = logging.getLogger("rocketq.broker")

#: Decisions kept in memory per sink; a replay only ever asks about the latest batches.
KEEP_DECISIONS = 1024
READ_CHUNK = 256
CACHE_BYTES = 64 << 20

Decision = dict[str, dict[str, int]]  # txn -> {broker name: halves}
BatchKey = tuple[str, str]  # (sink, batch)


class SinkState:
    """The ledger of decisions and an index of the sinks' open halves, both caught up from
    the store (the ledger and half topics) before each use, so a restarted or promoted
    broker rebuilds them by reading."""

    def __init__(self, store: Callable[[], MessageStore], transactions: Transactions) -> None:
        self._store = store
        self.transactions = transactions
        transactions.on_truncated = self._forget
        self.decisions: dict[str, OrderedDict[str, Decision]] = {}
        self._ledger_read = 0
        #: (sink, batch) -> txn -> its halves not known to be resolved.
        self.halves: dict[BatchKey, dict[str, TxnHalves]] = {}
        #: Half queue offsets below this are indexed (None: reading starts at the first
        #: half not resolved, as after a restart).
        self._halves_read: int | None = None
        #: Runs of half queue offsets SINK_PREPARE indexed and reading skips: start -> end.
        self._known: dict[int, int] = {}
        #: Bytes of halves the index holds (at most CACHE_BYTES).
        self._cached = 0

    def _forget(self) -> None:
        """The log was truncated: the halves indexed and the decisions read may be gone, and
        their offsets reused. Everything is read again from what the log holds."""
        self.halves.clear()
        self._known.clear()
        self._cached = 0
        self._halves_read = None
        self.decisions.clear()
        self._ledger_read = 0

    @property
    def store(self) -> MessageStore:
        return self._store()

    def _read(self, topic: str, start: int) -> tuple[list[MessageRecord], int]:
        """Records of queue 0 of ``topic`` from ``start`` to its end, and the end."""
        store = self.store
        offset = max(start, store.get_min_offset(topic, 0))
        end = store.get_max_offset(topic, 0)
        records: list[MessageRecord] = []
        while offset < end:
            result = store.get_messages(topic, 0, offset, READ_CHUNK, max_bytes=4 << 20)
            try:
                records.extend(result.decode(decompress=False))
            finally:
                result.release()
            offset = max(result.next_begin_offset, offset + 1)
        return records, max(offset, start)

    def _catch_up_ledger(self) -> None:
        records, self._ledger_read = self._read(SINK_LEDGER_TOPIC, self._ledger_read)
        for record in records:
            try:
                entry = orjson.loads(record.body)
                self._remember(entry["sink"], entry["batch"], entry["txns"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                log.warning("unreadable sink ledger record at %d", record.queue_offset)

    def _catch_up(self) -> None:
        """Read the ledger, and index the half messages appended since the last catch-up
        that SINK_PREPARE did not index as it stored them (the halves kept up to
        CACHE_BYTES for the commit that follows)."""
        self._catch_up_ledger()
        store = self.store
        if self._halves_read is None:
            self._halves_read = self.transactions.half_offset
        offset = max(self._halves_read, store.get_min_offset(TRANS_HALF_TOPIC, 0))
        end = store.get_max_offset(TRANS_HALF_TOPIC, 0)
        known = self._known
        for start in sorted(s for s in known if s < end):
            stop = known.pop(start)
            if start > offset:
                self._index_stored(offset, start)
            offset = max(offset, stop)
        if offset < end:
            self._index_stored(offset, end)
        self._halves_read = max(offset, end)

    def _index_stored(self, start: int, stop: int) -> None:
        """Index the open sink halves among the half queue's offsets ``[start, stop)``."""
        store = self.store
        is_open = self.transactions.is_open
        offset = start
        while offset < stop:
            result = store.get_messages(TRANS_HALF_TOPIC, 0, offset,
                                        min(READ_CHUNK, stop - offset), max_bytes=4 << 20)
            try:
                records = result.decode(decompress=False)
            finally:
                result.release()
            for record in records:
                props = record.properties
                sink = props.get(Property.SINK_NAME)
                if sink is None or record.queue_offset >= stop \
                        or not is_open(record.queue_offset):
                    continue
                keep = self._cached + len(record.body) <= CACHE_BYTES
                self._add_single((sink, props.get(Property.SINK_BATCH, "")),
                                 props.get(Property.SINK_TXN, ""), record.queue_offset,
                                 record if keep else None)
            offset = max(result.next_begin_offset, offset + 1)

    def _txn(self, key: BatchKey, txn: str) -> TxnHalves:
        txns = self.halves.setdefault(key, {})
        found = txns.get(txn)
        if found is None:
            found = txns[txn] = TxnHalves()
        return found

    def _add_single(self, key: BatchKey, txn: str, offset: int,
                    record: MessageRecord | None) -> None:
        """Index the half at half queue ``offset``: its ``record``, or None when it is not
        kept (past CACHE_BYTES)."""
        halves = self._txn(key, txn)
        old = halves.single.get(offset)
        if old is not None:
            self._cached -= single_size(old)
        halves.single[offset] = record
        self._cached += single_size(record)

    async def _caught_up(self) -> None:
        """Catch up once every append acknowledged so far is dispatched to its queue."""
        store = self.store
        deadline = time.monotonic() + 5
        while store.reput_offset < store.commitlog.max_offset and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        self._catch_up()

    def _remember(self, sink: str, batch: str, txns: Decision) -> None:
        kept = self.decisions.setdefault(sink, OrderedDict())
        kept[batch] = txns
        kept.move_to_end(batch)
        while len(kept) > KEEP_DECISIONS:
            kept.popitem(last=False)

    def _open(self, key: BatchKey) -> dict[str, TxnHalves]:
        """The batch's open halves per txn (resolved ones dropped from the index)."""
        transactions = self.transactions
        low, resolved = transactions.half_offset, transactions.resolved
        txns = self.halves.get(key, {})
        for txn in list(txns):
            self._cached -= txns[txn].prune(low, resolved)
            if not txns[txn]:
                del txns[txn]
        if not txns:
            self.halves.pop(key, None)
        return txns

    def _read_halves(self, offsets: list[int]) -> list[MessageRecord]:
        """The half messages at these half queue offsets, read in runs of consecutive ones
        (a read may stop early at its byte limit: it goes on from where it stopped)."""
        wanted = set(offsets)
        found: list[MessageRecord] = []
        store = self.store
        ordered = sorted(wanted)
        i = 0
        while i < len(ordered):
            j = i
            while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
                j += 1
            offset, last = ordered[i], ordered[j]
            while offset <= last:
                result = store.get_messages(TRANS_HALF_TOPIC, 0, offset,
                                            min(last - offset + 1, READ_CHUNK),
                                            max_bytes=4 << 20)
                try:
                    found.extend(r for r in result.decode(decompress=False)
                                 if r.queue_offset in wanted)
                finally:
                    result.release()
                offset = max(result.next_begin_offset, offset + 1)
            i = j + 1
        if len(found) != len(offsets):
            raise RuntimeError(f"{len(offsets) - len(found)} half messages could not be read")
        return found

    async def open_halves(self, sink: str, batch: str) -> dict[str, int]:
        """How many halves of each txn of a sink's batch are still open here."""
        async with self.transactions.lock:
            await self._caught_up()
            return {txn: len(halves) for txn, halves in self._open((sink, batch)).items()}

    def _index_sent(self, key: BatchKey, txn: str, sent: SentHalves) -> None:
        """Index the halves a SINK_PREPARE stored as a run, kept whole within CACHE_BYTES
        (else where it is only, to be read back when committed), and skipped by the reading
        that finds other halves."""
        self._known[sent.first] = sent.first + sent.count
        if self._cached + sent.kept > CACHE_BYTES:
            sent.forget()
        self._cached += self._txn(key, txn).add_run(sent)
