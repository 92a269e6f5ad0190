"""Exactly-once sinks: a batch's half messages committed together, once, by a recorded decision.

A sink (the Spark data source with ``exactlyOnce``) sends its rows as half messages that carry
``__SINK_NAME``, ``__SINK_BATCH`` and ``__SINK_TXN`` (one txn per task attempt): many per
SINK_PREPARE (rocketq's own request: a SEND_BATCH_MESSAGE body and the txn in the header),
which stores them as consecutive halves and indexes them as it stores them, so a commit finds
them, and the messages they become, without reading them back. Halves sent one by one (a
SEND_MESSAGE with the properties), and every half after a restart, are found by reading the
half topic instead. When every task has finished, its driver sends the batch's *decision* —
``{txn: {broker name: halves}}`` for the attempts that succeeded — to each broker in a
SINK_COMMIT (rocketq's own request code; RocketMQ commits one message per END_TRANSACTION).
The broker

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

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from ...protocol import (
    TRANS_HALF_TOPIC,
    MessageFormatError,
    MessageRecord,
    Perm,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_properties,
)
from ...protocol.message import host_to_bytes, split_batch
from ...protocol.topic import SINK_LEDGER_TOPIC
from ...remoting import Connection
from ...store import BatchMessage, PutStatus, StoreMessage
from ..put_outcomes import STATUS_CODES, store_refusal
from .half_messages import Transactions
from .sink_index import SentHalves
from .sink_state import BatchKey, Decision, SinkState

_SUCCESS = ResponseCode.SUCCESS

if TYPE_CHECKING:
    from ...store import MessageStore, PutResult
    from ..config import BrokerConfig
    from ..stats import Stats
    from ..topics import TopicTable

log = logging.getLogger("rocketq.broker")


class SinkCommits(SinkState):
    """The sinks' requests (SINK_PREPARE, SINK_DECISION, SINK_COMMIT, SINK_ABORT) and the
    halves left open past their check time, over the ledger and index of ``SinkState``."""

    def __init__(self, config: BrokerConfig, store: Callable[[], MessageStore],
                 put: Callable[..., Awaitable[list[PutResult]]],
                 transactions: Transactions, topics: TopicTable,
                 stats: Stats | None = None) -> None:
        super().__init__(store, transactions)
        self.config = config
        #: Counts SINK_PREPARE's halves as a send of halves one by one is counted.
        self.stats = stats
        self.topics = topics
        self.put = put
        transactions.sink_orphan = self._orphan
        #: SINK_COMMIT and SINK_ABORT requests per (sink, outcome: committed, decided_before,
        #: refused, aborted), and the halves resolved per (sink, committed or rolled_back).
        self.outcomes: dict[tuple[str, str], int] = {}
        self.resolved: dict[tuple[str, str], int] = {}

    @staticmethod
    def _count(table: dict[tuple[str, str], int], sink: str, what: str, n: int = 1) -> None:
        table[(sink, what)] = table.get((sink, what), 0) + n

    @property
    def broker_name(self) -> str:
        return self.config.brokerName

    def handlers(self) -> dict[int, Callable[[Connection, RemotingCommand], Any]]:
        return {RequestCode.SINK_PREPARE: self.prepare,
                RequestCode.SINK_DECISION: self.decision,
                RequestCode.SINK_COMMIT: self.commit,
                RequestCode.SINK_ABORT: self.abort}

    async def _apply(self, key: BatchKey, decision: Decision, only: str | None = None
                     ) -> tuple[int, int]:
        """Commit the batch's open halves of decided txns, roll back the others (of txn
        ``only``, when given); returns (committed, rolled back)."""
        txns = self._open(key)
        committed = rolled_back = 0
        transactions = self.transactions
        for txn, halves in list(txns.items()):
            if only not in (None, txn):
                continue
            n = len(halves)
            if txn in decision:
                for run in list(halves.runs):  # each run: one append, nothing decoded
                    offsets = range(run.first, run.first + run.count)
                    if run.body is not None:
                        await transactions.commit_batch(run.committed_batch(), offsets)
                    else:  # not kept: read back
                        await transactions.resolve_many(
                            [(r.queue_offset, transactions._committed(r))
                             for r in self._read_halves(list(offsets))], True)
                unread = halves.unread()
                read = {r.queue_offset: r for r in self._read_halves(unread)} if unread else {}
                await transactions.resolve_many(
                    halves.singles_committed(read, transactions._committed), True)
                committed += n
            else:
                await self.transactions.resolve_many(
                    ((offset, None) for offset in list(halves.offsets())), False)
                rolled_back += n
        for what, n in (("committed", committed), ("rolled_back", rolled_back)):
            if n:
                self._count(self.resolved, key[0], what, n)
        self._open(key)
        return committed, rolled_back

    # ------------------------------------------------------------------ requests
    @staticmethod
    def _key(cmd: RemotingCommand) -> BatchKey | None:
        sink, batch = cmd.field("sink"), cmd.field("batch")
        return (sink, batch) if sink and batch is not None else None

    async def prepare(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """SINK_PREPARE: store the elements of a batch body (as SEND_BATCH_MESSAGE's) as the
        half messages of txn ``txn`` of ``sink``'s batch ``batch``, bound for queue
        ``queueId`` of ``topic``; consecutive in the half queue, and indexed here as they
        are stored. Answers the first one's half queue offset and how many were stored."""
        ext = cmd.ext_fields
        sink, batch, txn = ext.get("sink"), ext.get("batch"), ext.get("txn")
        topic, group = ext.get("topic") or "", ext.get("producerGroup") or ""
        check_after = ext.get("checkImmunity") or ""
        if (not sink or batch is None or not txn or not cmd.body
                or not (check_after.isascii() and check_after.isdigit())
                or len(check_after) > 9):
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark="SINK_PREPARE needs sink, batch, txn, checkImmunity "
                                       "and a batch body")
        if any("\x01" in v or "\x02" in v for v in (sink, batch, txn, topic, group)):
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark="a SINK_PREPARE field holds a property separator")
        if not self.config.brokerPermission & Perm.WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                remark=f"the broker[{self.broker_name}] sending message is "
                                       "forbidden")
        topic_config = self.topics.topics.get(topic)
        if topic_config is None:  # the client sends these one by one, which may create it
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                remark=f"topic[{topic}] not exist, apply first please!")
        if not topic_config.perm & Perm.WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                remark=f"the topic[{topic}] sending message is forbidden")
        try:
            queue_id = int(ext.get("queueId") or 0)
            born = int(ext.get("bornTimestamp") or 0) or int(time.time() * 1000)
            spans = split_batch(cmd.body)
        except (ValueError, MessageFormatError) as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if not 0 <= queue_id < topic_config.write_queue_nums:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark=f"queueId[{queue_id}] is illegal, topic {topic} has "
                                       f"{topic_config.write_queue_nums} write queues")
        cluster = encode_properties({Property.CLUSTER: self.config.brokerClusterName})
        shared = encode_properties({Property.PRODUCER_GROUP: group,
                                    Property.CHECK_IMMUNITY_TIME_IN_SECONDS: check_after})
        half_only = encode_properties({
            Property.REAL_TOPIC: topic, Property.REAL_QUEUE_ID: str(queue_id),
            Property.TRANSACTION_PREPARED: "true", Property.SINK_NAME: sink,
            Property.SINK_BATCH: batch, Property.SINK_TXN: txn})
        host, port = conn.peer[0], conn.peer[1]
        try:
            born_host = host_to_bytes(host)
        except ValueError:  # an IPv6 peer: v1 records carry IPv4 hosts only
            born_host = b"\x7f\x00\x00\x01"
        message = BatchMessage(TRANS_HALF_TOPIC, cmd.body, 0,
                               suffix=(half_only + shared + cluster).encode(),
                               born_timestamp=born, born_host=born_host, born_port=port)
        try:
            results = await self.put(message)
        except Exception as exc:
            refused = store_refusal(exc)
            return cmd.response(refused.code, remark=str(refused))
        offsets = getattr(results, "offsets", None)
        if offsets is None:
            offsets = [r.commitlog_offset for r in results]
        first = results[0].queue_offset
        sent = SentHalves(topic, queue_id, cmd.body, spans, offsets, first, born, born_host,
                          port, (shared + cluster).encode())
        self._index_sent((sink, batch), txn, sent)
        if self.stats is not None:
            self.stats.put(len(spans), TRANS_HALF_TOPIC, len(cmd.body))
        status = results[0].status
        # Stored, but not as safely as asked (a flush or a slave timed out): the task fails
        # and its txn is rolled back, as a send answered so is retried.
        return cmd.response(_SUCCESS if status is PutStatus.PUT_OK else STATUS_CODES[status],
                            ext_fields={"queueOffset": first, "count": len(spans)})

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
        if half.queue_offset not in self._txn(key, txn):
            self._add_single(key, txn, half.queue_offset, half)
        decision = self.decisions.get(key[0], {}).get(key[1]) or {}
        committed, rolled_back = await self._apply(key, decision, only=txn)
        log.info("sink %s batch %s txn %s left open: %d committed, %d rolled back from the "
                 "ledger", key[0], key[1], txn, committed, rolled_back)
