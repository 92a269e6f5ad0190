"""Transactional messages (RocketMQ's TransactionalMessageService and EndTransactionProcessor).

A prepared message is stored as a *half* message in ``RMQ_SYS_TRANS_HALF_TOPIC`` (invisible to
consumers), its destination kept in ``REAL_TOPIC``/``REAL_QID``. END_TRANSACTION commits it
(the real message is written, with the half message's CommitLog offset as its prepared
offset) or rolls it back; either way an *op* record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (tag
``d``, body = the half queue offset) marks it resolved, so the outcome survives restarts.

Half messages left unresolved longer than ``transactionTimeOut`` are checked: the broker asks a
live producer of the message's group (CHECK_TRANSACTION_STATE) every
``transactionCheckInterval``, at most ``transactionCheckMax`` times; then the message is
discarded to ``TRANS_CHECK_MAX_TIME_TOPIC``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from itertools import islice
from typing import TYPE_CHECKING

import orjson

from ...protocol import (
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    MessageRecord,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SysFlag,
    encode_properties,
)
from ...protocol.message import encode_record
from ...protocol.topic import TRANS_CHECK_MAX_TIME_TOPIC
from ...remoting import Connection
from ...store import BatchMessage, StoreMessage
from ..clients import ClientTable
from ..config import BrokerConfig
from ..files import write_atomically
from ..schedule.delay import with_real_destination
from ..topics import TopicTable

if TYPE_CHECKING:
    from ...store import MessageStore, PutResult

log = logging.getLogger("rocketq.broker")

COMMIT = SysFlag.TRANSACTION_COMMIT
ROLLBACK = SysFlag.TRANSACTION_ROLLBACK
UNKNOWN = 0
OP_TAG = "d"
#: Properties a half message carries and its committed message does not.
_HALF_ONLY = (Property.TRANSACTION_PREPARED, Property.TRANSACTION_CHECK_TIMES,
              Property.SINK_NAME, Property.SINK_BATCH, Property.SINK_TXN)
OPS_PER_RECORD = 1024  # half offsets listed by one op record


def _op_record(half_queue_offsets: list[int]) -> StoreMessage:
    return StoreMessage(TRANS_OP_HALF_TOPIC, ",".join(map(str, half_queue_offsets)).encode(),
                        0, properties=encode_properties({Property.TAGS: OP_TAG}),
                        born_timestamp=int(time.time() * 1000))


def to_half(topic: str, queue_id: int, properties: dict[str, str]) -> tuple[str, int]:
    """Where a prepared message waits: queue 0 of the half topic; the destination goes into
    its (parsed) properties."""
    with_real_destination(topic, queue_id, properties,
                          **{Property.TRANSACTION_ID: properties.get(Property.UNIQ_KEY, "")})
    return TRANS_HALF_TOPIC, 0


class Transactions:
    """Resolves half messages and checks the ones left open with a producer of their group
    found in the client table; its progress is kept in ``config_dir``."""

    def __init__(self, config_dir: str, config: BrokerConfig,
                 store: Callable[[], MessageStore],
                 put: Callable[..., Awaitable[list[PutResult]]], topics: TopicTable,
                 clients: ClientTable) -> None:
        self.config = config
        self._store = store  # the store exists once the broker has started
        self.put = put  # how the broker's loop writes to the store
        self.topics = topics
        self.clients = clients
        self.path = os.path.join(config_dir, "transaction.json")
        #: Half queue offsets below this are all resolved.
        self.half_offset = 0
        self.checks: dict[int, int] = {}
        self.resolved: set[int] = set()
        #: Resolves an exactly-once sink's half left open too long (``sink``).
        self.sink_orphan: Callable[[MessageRecord], Awaitable[None]] | None = None
        #: Told when the log was truncated (``sink`` forgets its index of halves).
        self.on_truncated: Callable[[], None] | None = None
        self.askers = []
        #: Held while half messages are resolved, so each is resolved once.
        self.lock = asyncio.Lock()
        if os.path.exists(self.path):
            with open(self.path, "rb") as fh:
                data = orjson.loads(fh.read())
            self.half_offset = int(data.get("halfOffset", 0))
            self.checks = {int(k): int(v) for k, v in (data.get("checks") or {}).items()}

    @property
    def store(self) -> MessageStore:
        return self._store()

    # ------------------------------------------------------------------ state
    def load(self) -> None:
        """Rebuild the resolved set from the op records (they are the source of truth)."""
        store = self.store
        if self._truncated not in store.on_truncate:
            store.on_truncate.append(self._truncated)
        offset = store.get_min_offset(TRANS_OP_HALF_TOPIC, 0)
        end = store.get_max_offset(TRANS_OP_HALF_TOPIC, 0)
        while offset < end:
            result = store.get_messages(TRANS_OP_HALF_TOPIC, 0, offset, 256, max_bytes=1 << 20)
            if not result.buffers:
                offset = max(result.next_begin_offset, offset + 1)
                continue
            for record in result.decode(decompress=False):
                for part in record.body.decode(errors="replace").split(","):
                    part = part.strip()
                    if part.isascii() and part.isdigit():
                        self.resolved.add(int(part))
            offset = result.next_begin_offset
            result.release()

    def _truncated(self, _commitlog_end: int) -> None:
        """``MessageStore.on_truncate`` (a demoted master's tail cut): halves and op records
        past the cut are gone, and the ones the new master replicates will reuse their queue
        offsets, so what was known of them is read again from what is left."""
        high = self.store.get_max_offset(TRANS_HALF_TOPIC, 0)
        self.half_offset = min(self.half_offset, high)
        self.checks = {k: v for k, v in self.checks.items() if k < high}
        self.resolved.clear()
        self.load()
        if self.on_truncated is not None:
            self.on_truncated()

    def persist(self) -> None:
        data = {"halfOffset": self.half_offset,
                "checks": {str(k): v for k, v in sorted(self.checks.items())}}
        write_atomically(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))

    async def _write_op(self, half_queue_offset: int) -> None:
        await self.put([_op_record([half_queue_offset])])
        self._mark_resolved([half_queue_offset])

    def _mark_resolved(self, half_queue_offsets: Sequence[int]) -> None:
        self.resolved.update(half_queue_offsets)
        if self.checks:
            for offset in half_queue_offsets:
                self.checks.pop(offset, None)

    def is_open(self, half_queue_offset: int) -> bool:
        return (half_queue_offset >= self.half_offset
                and half_queue_offset not in self.resolved)

    async def commit_batch(self, batch: BatchMessage, offsets: Sequence[int]) -> None:
        """Commit the open half messages at half queue ``offsets``, whose committed messages
        are ``batch``'s elements (in order, each with its half's CommitLog offset as its
        prepared offset): the batch and the op records that mark the halves resolved go in
        one append (the batch's trailer), as :meth:`resolve_many` appends a chunk. The
        caller holds :attr:`lock`."""
        batch.trailer = [_op_record(list(offsets[i:i + OPS_PER_RECORD]))
                         for i in range(0, len(offsets), OPS_PER_RECORD)]
        await self.put(batch)
        self._mark_resolved(offsets)

    async def resolve_many(self, halves: Iterable[tuple[int, StoreMessage | None]],
                           commit: bool) -> None:
        """Commit or roll back many half messages, a chunk per append: the committed messages
        followed by an op record listing their half offsets (comma-separated, as RocketMQ
        5's batched op messages are). Each half comes as its half queue offset and, to
        commit, the message it becomes (``_committed`` of its record, or built by the caller
        from what it kept of the half); None to roll back. ``halves`` is read a chunk at a
        time, so a lazy one holds no more than a chunk of messages. The caller holds
        :attr:`lock`."""
        pending = iter(halves)
        while True:
            taken = list(islice(pending, OPS_PER_RECORD))
            if not taken:
                return
            chunk = [h for h in taken if self.is_open(h[0])]
            if not chunk:
                continue
            offsets = [offset for offset, _message in chunk]
            messages = [m for _offset, m in chunk if m is not None] if commit else []
            messages.append(_op_record(offsets))
            await self.put(messages)
            self._mark_resolved(offsets)

    # ------------------------------------------------------------------ END_TRANSACTION
    async def end_transaction(self, conn: Connection, cmd: RemotingCommand
                              ) -> RemotingCommand | None:
        kind = cmd.int_field("commitOrRollback", UNKNOWN)
        if kind not in (COMMIT, ROLLBACK):
            return None  # UNKNOWN: wait for a check, answer nothing (as RocketMQ does)
        state_offset = cmd.field("tranStateTableOffset")
        try:
            half_offset = int(state_offset) if state_offset not in (None, "") else None
        except ValueError:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark=f"tranStateTableOffset is not an integer: "
                                       f"{str(state_offset)[:40]!r}")
        error = await self.resolve(cmd.int_field("commitLogOffset"), kind == COMMIT,
                                   cmd.field("producerGroup") or "", half_offset)
        if error is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=error)
        return cmd.response(ResponseCode.SUCCESS)

    async def resolve(self, offset: int, commit: bool, group: str | None = None,
                      half_offset: int | None = None) -> str | None:
        """Commit or roll back the half message at CommitLog ``offset`` (END_TRANSACTION, or
        the gRPC EndTransaction). ``group`` and ``half_offset``, when given, must be the
        half's. Returns what is wrong, or None once done (or done before)."""
        record = self.store.look_message_by_offset(offset)
        if record is None or record.topic != TRANS_HALF_TOPIC:
            return f"no half message at CommitLog offset {offset}"
        if group is not None and record.properties.get(Property.PRODUCER_GROUP) not in (
                None, group):
            return "the producer group does not match the half message"
        queue_offset = record.queue_offset
        if half_offset is not None and half_offset != queue_offset:
            return "tranStateTableOffset does not match the half message"
        async with self.lock:
            if queue_offset in self.resolved or queue_offset < self.half_offset:
                return None  # resolved already: idempotent
            if commit:
                try:
                    await self.put([self._committed(record)])
                except Exception as exc:
                    return f"commit failed: {exc}"
            await self._write_op(queue_offset)
        log.debug("transaction %s %s", record.properties.get(Property.UNIQ_KEY),
                  "committed" if commit else "rolled back")
        return None

    def _committed(self, half: MessageRecord) -> StoreMessage:
        props = dict(half.properties)
        topic = props.pop(Property.REAL_TOPIC, half.topic)
        queue_id = int(props.pop(Property.REAL_QUEUE_ID, "0") or 0)
        for name in _HALF_ONLY:
            props.pop(name, None)
        return StoreMessage.from_record(
            half, topic, queue_id, encode_properties(props),
            sysflag=(half.sysflag & ~SysFlag.TRANSACTION_MASK) | COMMIT,
            prepared_transaction_offset=half.commitlog_offset)

    # ------------------------------------------------------------------ checking
    async def run(self) -> None:
        """Check open transactions every ``transactionCheckInterval``, until cancelled."""
        while True:
            # Read on each round: UPDATE_BROKER_CONFIG may change it while the broker runs.
            await asyncio.sleep(self.config.transactionCheckInterval / 1000)
            try:
                await self.check_once()
            except Exception:
                log.exception("transaction check failed")

    async def check_once(self) -> int:
        """Ask producers about half messages open too long; return how many were asked."""
        cfg = self.config
        store = self.store
        now = int(time.time() * 1000)
        end = store.get_max_offset(TRANS_HALF_TOPIC, 0)
        asked = 0
        async with self.lock:
            offset = max(self.half_offset, store.get_min_offset(TRANS_HALF_TOPIC, 0))
            advancing = True
            while offset < end:
                if offset in self.resolved:
                    if advancing:
                        self.resolved.discard(offset)
                        self.half_offset = offset + 1
                    offset += 1
                    continue
                advancing = False
                result = store.get_messages(TRANS_HALF_TOPIC, 0, offset, 1)
                records = result.decode(decompress=False)
                result.release()
                if not records:
                    offset += 1
                    continue
                half = records[0]
                immunity = half.properties.get(Property.CHECK_IMMUNITY_TIME_IN_SECONDS)
                # ASCII digits only, and not absurdly many: "²" passes isdigit() and int()
                # refuses it, which would stop every check here.
                timeout = (int(immunity) * 1000 if immunity and immunity.isascii()
                           and immunity.isdigit() and len(immunity) <= 9
                           else cfg.transactionTimeOut)
                if now - half.store_timestamp < timeout:
                    if immunity:
                        # Its own, longer wait: the halves after it may be due already.
                        offset += 1
                        continue
                    break  # younger ones follow
                count = self.checks.get(offset, 0)
                if self.sink_orphan is not None and Property.SINK_NAME in half.properties:
                    await self.sink_orphan(half)  # an exactly-once sink's: its ledger decides
                elif count >= cfg.transactionCheckMax:
                    await self._discard(half)
                else:
                    if self._ask(half):
                        asked += 1
                    self.checks[offset] = count + 1
                offset += 1
        self.persist()
        return asked

    async def _discard(self, half: MessageRecord) -> None:
        log.warning("transaction %s of group %s discarded after %d checks",
                    half.properties.get(Property.UNIQ_KEY),
                    half.properties.get(Property.PRODUCER_GROUP),
                    self.config.transactionCheckMax)
        if self.topics.get(TRANS_CHECK_MAX_TIME_TOPIC) is None:
            self.topics.create_system(TRANS_CHECK_MAX_TIME_TOPIC, 1)
        message = StoreMessage(TRANS_CHECK_MAX_TIME_TOPIC, half.body, 0,
                               properties=encode_properties(half.properties),
                               born_timestamp=half.born_timestamp)
        await self.put([message])
        await self._write_op(half.queue_offset)

    #: Other ways to ask a producer about a half message (the gRPC endpoint's telemetry
    #: streams): called with the half as its producer sent it, and the producer group;
    #: True when one asked.
    askers: list[Callable[[MessageRecord, str], bool]]

    def _ask(self, half: MessageRecord) -> bool:
        group = half.properties.get(Property.PRODUCER_GROUP, "")
        channel = self.clients.producer_channel(group)
        if channel is None and not self.askers:
            return False
        props = dict(half.properties)
        real = MessageRecord(
            topic=props.get(Property.REAL_TOPIC, half.topic), body=half.body,
            queue_id=int(props.get(Property.REAL_QUEUE_ID, "0") or 0), flag=half.flag,
            queue_offset=half.queue_offset, commitlog_offset=half.commitlog_offset,
            sysflag=half.sysflag | SysFlag.TRANSACTION_PREPARED,
            born_timestamp=half.born_timestamp, born_host=half.born_host,
            store_timestamp=half.store_timestamp, store_host=half.store_host,
            reconsume_times=half.reconsume_times, properties=props)
        uniq = props.get(Property.UNIQ_KEY, "")
        cmd = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, {
            "topic": real.topic, "tranStateTableOffset": half.queue_offset,
            "commitLogOffset": half.commitlog_offset, "msgId": uniq,
            "transactionId": props.get(Property.TRANSACTION_ID) or uniq,
            "offsetMsgId": half.offset_msg_id}, encode_record(real), oneway=True)
        if channel is None:
            return any(ask(real, group) for ask in self.askers)
        channel.connection.oneway(cmd)
        return True
