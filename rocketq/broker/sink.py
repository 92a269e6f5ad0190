"""Exactly-once sinks: a batch's half messages committed together, once, by a recorded decision.

A sink (the Spark data source with ``exactlyOnce``) sends its rows as half messages that carry
``__SINK_NAME``, ``__SINK_BATCH`` and ``__SINK_TXN`` (one txn per task attempt). When every
task has finished, its driver sends the batch's *decision* — ``{txn: {broker name: halves}}``
for the attempts that succeeded — to each broker in a SINK_COMMIT (rocketq's own request code;
RocketMQ commits one message per END_TRANSACTION). The broker

1. checks that it holds exactly the halves the decision counts for it (a half rolled back by
   the check timeout, or lost, refuses the commit instead of committing part of a batch);
2. appends the decision to the ledger topic ``RMQ_SYS_SINK_LEDGER`` — before committing, so it
   survives a crash and replicates to slaves like any message;
3. commits the decided halves and rolls back the batch's other halves (failed attempts),
   a chunk of committed messages and their op record per append.

A decision, once in the ledger, is the batch's only one: a replayed batch (its driver died
after the commit, before it recorded the batch done) gets the recorded decision back, and its
new halves are rolled back. Halves left open past their check time (their driver died and did
not come back) are resolved from the ledger too: committed if their txn was decided, otherwise
rolled back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import (
    TRANS_HALF_TOPIC,
    MessageRecord,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from ..protocol.topic import SINK_LEDGER_TOPIC
from ..remoting import Connection
from ..store import StoreMessage
from .transaction import Transactions

if TYPE_CHECKING:
    from ..store import MessageStore, PutResult

log = logging.getLogger("rocketq.broker")

#: Decisions kept in memory per sink; a replay only ever asks about the latest batches.
KEEP_DECISIONS = 1024
READ_CHUNK = 256
CACHE_BYTES = 64 << 20

Decision = dict[str, dict[str, int]]  # txn -> {broker name: halves}
BatchKey = tuple[str, str]  # (sink, batch)


class SinkCommits:
    """The ledger of decisions and an index of the sinks' open halves, both caught up from
    the store (the ledger and half topics) before each use, so a restarted or promoted
    broker rebuilds them by reading."""

    def __init__(self, broker_name: str, store: Callable[[], MessageStore],
                 put: Callable[..., Awaitable[list[PutResult]]],
                 transactions: Transactions) -> None:
        self.broker_name = broker_name
        self._store = store
        self.put = put
        self.transactions = transactions
        transactions.sink_orphan = self._orphan
        self.decisions: dict[str, OrderedDict[str, Decision]] = {}
        self._ledger_read = 0
        #: (sink, batch) -> txn -> half queue offsets not known to be resolved.
        self.halves: dict[BatchKey, dict[str, list[int]]] = {}
        self._halves_read: int | None = None
        #: Half messages decoded by the last catch-up, by half queue offset.
        self._recent: dict[int, MessageRecord] = {}
        #: SINK_COMMIT and SINK_ABORT requests per (sink, outcome: committed, decided_before,
        #: refused, aborted), and the halves resolved per (sink, committed or rolled_back).
        self.outcomes: dict[tuple[str, str], int] = {}
        self.resolved: dict[tuple[str, str], int] = {}

    @staticmethod
    def _count(table: dict[tuple[str, str], int], sink: str, what: str, n: int = 1) -> None:
        table[(sink, what)] = table.get((sink, what), 0) + n

    @property
    def store(self) -> MessageStore:
        return self._store()

    def handlers(self) -> dict[int, Callable[[Connection, RemotingCommand], Any]]:
        return {RequestCode.SINK_DECISION: self.decision,
                RequestCode.SINK_COMMIT: self.commit,
                RequestCode.SINK_ABORT: self.abort}

    # ------------------------------------------------------------------ reading the store
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
        """Read the ledger and the half messages appended since the last catch-up; the
        halves read are kept (up to CACHE_BYTES of bodies) for the commit that follows."""
        self._catch_up_ledger()
        if self._halves_read is None:
            self._halves_read = self.transactions.half_offset
        records, self._halves_read = self._read(TRANS_HALF_TOPIC, self._halves_read)
        self._recent.clear()
        cached = 0
        for record in records:
            props = record.properties
            sink = props.get(Property.SINK_NAME)
            if sink is not None and self.transactions.is_open(record.queue_offset):
                key = (sink, props.get(Property.SINK_BATCH, ""))
                txns = self.halves.setdefault(key, {})
                txns.setdefault(props.get(Property.SINK_TXN, ""), []).append(
                    record.queue_offset)
                cached += len(record.body)
                if cached <= CACHE_BYTES:
                    self._recent[record.queue_offset] = record

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

    def _open(self, key: BatchKey) -> dict[str, list[int]]:
        """The batch's open halves per txn (resolved ones dropped from the index)."""
        is_open = self.transactions.is_open
        txns = self.halves.get(key, {})
        for txn in list(txns):
            txns[txn] = [o for o in txns[txn] if is_open(o)]
            if not txns[txn]:
                del txns[txn]
        if not txns:
            self.halves.pop(key, None)
        return txns

    def _halves(self, offsets: list[int]) -> list[MessageRecord]:
        """The half messages at these half queue offsets, read in runs of consecutive ones
        (a read may stop early at its byte limit: it goes on from where it stopped)."""
        recent = self._recent
        found = [recent[o] for o in offsets if o in recent]
        wanted = {o for o in offsets if o not in recent}
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

    async def _apply(self, key: BatchKey, decision: Decision, only: str | None = None
                     ) -> tuple[int, int]:
        """Commit the batch's open halves of decided txns, roll back the others (of txn
        ``only``, when given); returns (committed, rolled back)."""
        txns = self._open(key)
        commit = [o for t, offs in txns.items() if t in decision and only in (None, t)
                  for o in offs]
        rollback = [o for t, offs in txns.items() if t not in decision and only in (None, t)
                    for o in offs]
        for offsets, committing in ((commit, True), (rollback, False)):
            if offsets:
                await self.transactions.resolve_many(self._halves(offsets), committing)
                self._count(self.resolved, key[0], "committed" if committing else "rolled_back",
                            len(offsets))
        self._recent.clear()
        self._open(key)
        return len(commit), len(rollback)

    async def open_halves(self, sink: str, batch: str) -> dict[str, int]:
        """How many halves of each txn of a sink's batch are still open here."""
        async with self.transactions.lock:
            await self._caught_up()
            return {txn: len(offsets) for txn, offsets in self._open((sink, batch)).items()}

    # ------------------------------------------------------------------ requests
    @staticmethod
    def _key(cmd: RemotingCommand) -> BatchKey | None:
        sink, batch = cmd.field("sink"), cmd.field("batch")
        return (sink, batch) if sink and batch is not None else None

    async def decision(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """SINK_DECISION: the recorded decision of ``sink``/``batch``, or no body."""
        key = self._key(cmd)
        if key is None:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark="sink and batch needed")
        async with self.transactions.lock:
            self._catch_up_ledger()
            recorded = self.decisions.get(key[0], {}).get(key[1])
        return cmd.response(ext_fields={"decided": "true" if recorded is not None else "false"},
                            body=orjson.dumps({"txns": recorded}) if recorded is not None
                            else b"")

    async def commit(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """SINK_COMMIT: record the decision (unless one is recorded already) and apply it."""
        key = self._key(cmd)
        try:
            decision = orjson.loads(cmd.body or b"{}")["txns"]
            if not isinstance(decision, dict) or not all(
                    isinstance(v, dict) for v in decision.values()):
                raise TypeError
        except (orjson.JSONDecodeError, KeyError, TypeError):
            decision = None
        if key is None or decision is None:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark="SINK_COMMIT needs sink, batch and a body "
                                       '{"txns": {txn: {broker: count}}}')
        sink, batch = key
        async with self.transactions.lock:
            await self._caught_up()
            recorded = self.decisions.get(sink, {}).get(batch)
            if recorded is None:
                problem = self._mismatch(key, decision)
                if problem:
                    self._count(self.outcomes, sink, "refused")
                    return cmd.response(ResponseCode.TRANSACTION_FAILED,
                                        remark=f"sink {sink} batch {batch} not committed: "
                                               f"{problem}")
                entry = orjson.dumps({"sink": sink, "batch": batch, "txns": decision})
                await self.put([StoreMessage(SINK_LEDGER_TOPIC, entry, 0,
                                             born_timestamp=int(time.time() * 1000))])
                self._remember(sink, batch, decision)
                self._ledger_read = self.store.get_max_offset(SINK_LEDGER_TOPIC, 0)
            committed, rolled_back = await self._apply(key, recorded or decision)
        self._count(self.outcomes, sink, "committed" if recorded is None else "decided_before")
        log.debug("sink %s batch %s: %d committed, %d rolled back%s", sink, batch, committed,
                  rolled_back, " (decided before)" if recorded is not None else "")
        return cmd.response(ext_fields={
            "committed": committed, "rolledBack": rolled_back,
            "decidedBefore": "true" if recorded is not None else "false"},
            body=orjson.dumps({"txns": recorded}) if recorded is not None else b"")

    def _mismatch(self, key: BatchKey, decision: Decision) -> str:
        """Why this broker cannot commit the decision, or ''."""
        have = self._open(key)
        for txn, counts in sorted(decision.items()):
            want = int(counts.get(self.broker_name, 0))
            got = len(have.get(txn, ()))
            if got != want:
                return (f"txn {txn} has {got} prepared messages on {self.broker_name}, the "
                        f"decision counts {want} (rolled back after the check time, or lost)")
        return ""

    async def abort(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """SINK_ABORT: roll back the batch's open halves, except those of a recorded
        decision (which are committed)."""
        key = self._key(cmd)
        if key is None:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark="sink and batch needed")
        async with self.transactions.lock:
            await self._caught_up()
            recorded = self.decisions.get(key[0], {}).get(key[1])
            committed, rolled_back = await self._apply(key, recorded or {})
        self._count(self.outcomes, key[0], "aborted")
        return cmd.response(ext_fields={"committed": committed, "rolledBack": rolled_back})

    async def _orphan(self, half: MessageRecord) -> None:
        """A sink's half left open past its check time (the transaction checker holds the
        lock): its txn's halves follow the ledger, or are rolled back without a decision."""
        self._catch_up()
        props = half.properties
        key = (props.get(Property.SINK_NAME, ""), props.get(Property.SINK_BATCH, ""))
        txn = props.get(Property.SINK_TXN, "")
        txns = self.halves.setdefault(key, {})
        if half.queue_offset not in txns.get(txn, ()):
            txns.setdefault(txn, []).append(half.queue_offset)
        decision = self.decisions.get(key[0], {}).get(key[1]) or {}
        committed, rolled_back = await self._apply(key, decision, only=txn)
        log.info("sink %s batch %s txn %s left open: %d committed, %d rolled back from the "
                 "ledger", key[0], key[1], txn, committed, rolled_back)
