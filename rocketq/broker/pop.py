"""POP consumption: messages handed out with an invisible time, acked one by one, and seen
again when not acked in time (RocketMQ 5's PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor and PopReviveService, and the consumption model of the 5.x
SimpleConsumer and PushConsumer). The remoting requests (``pop_requests``) and the gRPC
endpoint (``rocketq.grpc``) are two faces of this one part.

How it works:

- A pop reads a group's next messages from a queue and records a **checkpoint**: the queue
  offsets it handed out, when, and for how long they are invisible. Each message gets a
  **receipt handle** naming its checkpoint. For an ordinary group the consumer offset moves
  past the popped messages at once, so the next pop (by any member, over either protocol)
  reads on; a 4.x consumer of the same group reads on from there too.
- An **ack** marks a message of its checkpoint done. **Changing the invisible time** acks the
  message in its old checkpoint and records a new checkpoint for it alone, with a new handle.
- When a checkpoint's time is up, each message in it not acked is **revived**: stored again
  in the group's pop retry topic ``%RETRY%<group>_<topic>`` with its reconsume count plus
  one (the delivery attempt the 5.x clients show), or in the group's dead-letter topic once
  it has had ``retryMaxTimes + 1`` attempts. Pops read the retry topic beside the topic.
- A **FIFO** group (``consumeMessageOrderly``) reads a queue only while nothing popped from
  it is still out: its consumer offset moves when the batch is acked, and a batch not acked
  in time is popped again from its first message not acked, with the attempt count plus one,
  until the attempts run out and that message goes to the dead-letter topic.

**Durability.** Checkpoints and acks are records in the CommitLog, in the system topic
``rmq_sys_REVIVE_LOG_<cluster>`` (as in RocketMQ), so they are flushed and replicated with
the messages. A master, when it starts or takes over after a failover, replays that topic
from the oldest record still needed (kept as the consumer offset of
``CID_RMQ_SYS_REVIVE_GROUP`` on it) and so knows every message still out, every ack, and how
far each group has popped, whatever the consumer offset file says.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from ..protocol import Perm, Property, encode_properties
from ..protocol.filter import EXPRESSION_SQL92, Subscription
from ..protocol.message import MessageRecord, record_properties
from ..protocol.sql92 import compile_selector
from ..store import GetStatus, StoreMessage
from .config import BrokerConfig
from .offsets import ConsumerOffsets
from .send_back import dead_letter_topic
from .subscription_groups import SubscriptionGroupTable
from .topics import TopicTable

if TYPE_CHECKING:
    from ..store import MessageStore, PutResult

log = logging.getLogger("rocketq.broker.pop")

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: The bounds of an invisible time, in ms (the 5.x proxy's: 10 s to 12 h for gRPC; a remoting
#: POP_MESSAGE may ask for less, down to 1 s, as RocketMQ's broker allows any positive value).
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: Topic types in a receipt handle (RocketMQ's ExtraInfoUtil): the topic itself, or the
#: group's pop retry topic.
NORMAL_TOPIC, RETRY_TOPIC = "0", "1"
#: How often the revive loop looks for checkpoints whose time is up, in seconds.
REVIVE_INTERVAL = 0.1
#: Most messages one pop reads from one queue before moving to the next.
MAX_POP_NUMS = 32
#: Messages popped for a consumer that asks to have them renewed (the 5.x PushConsumer's
#: ``auto_renew``) stay invisible while it lives: renewed by RENEW_BY_MS whenever less than
#: RENEW_AHEAD_MS is left, for at most RENEW_MAX_MS after the pop.
RENEW_BY_MS = 60_000
RENEW_AHEAD_MS = 20_000
RENEW_MAX_MS = 30 * 60_000


def revive_topic(cluster: str) -> str:
    """The system topic holding checkpoints and acks."""
    return f"rmq_sys_REVIVE_LOG_{cluster}"


def pop_retry_topic(group: str, topic: str) -> str:
    """The topic revived messages of ``topic`` go to for ``group`` (KeyBuilder's V1 name,
    RocketMQ 5's default)."""
    return f"%RETRY%{group}_{topic}"


class PopError(Exception):
    """A pop, ack or invisible-time change that cannot be done. ``kind`` says which:
    ``handle`` (not a receipt handle of a message this group has out), ``expired`` (its
    invisible time is over), ``argument`` (a bad request value), ``topic``, ``group``,
    ``permission``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class ReceiptHandle:
    """What a pop hands out with each message, in RocketMQ's text form: ``start_offset
    pop_time invisible_ms revive_queue topic_type broker queue_id queue_offset
    commitlog_offset``, space-separated."""

    start_offset: int
    pop_time: int
    invisible_ms: int
    revive_queue: int
    topic_type: str
    broker: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int

    def encode(self) -> str:
        return (f"{self.start_offset} {self.pop_time} {self.invisible_ms} {self.revive_queue} "
                f"{self.topic_type} {self.broker} {self.queue_id} {self.queue_offset} "
                f"{self.commitlog_offset}")

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """Raises PopError("handle") for anything that is not a handle."""
        parts = (text or "").split(" ")
        if len(parts) < 8:
            raise PopError("handle", f"not a receipt handle: {text[:80]!r}")
        try:
            return cls(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4],
                       parts[5], int(parts[6]), int(parts[7]),
                       int(parts[8]) if len(parts) > 8 else -1)
        except ValueError:
            raise PopError("handle", f"not a receipt handle: {text[:80]!r}") from None

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms


@dataclass(eq=False)
class CheckPoint:
    """Messages one pop handed out from one queue."""

    group: str
    topic: str  # the topic they were read from: the topic, or the group's pop retry topic
    origin: str  # the topic the consumer asked for
    queue_id: int
    offsets: list[int]
    pop_time: int
    invisible_ms: int
    next_offset: int  # the queue offset the pop read up to
    fifo: bool = False
    attempt: int = 1  # FIFO: the delivery attempt of the batch
    acked: set[int] = field(default_factory=set)
    log_offset: int = -1  # where its record is in the revive topic
    done: bool = False
    #: Offsets whose ack (or move) is being written: not revived meanwhile.
    pending: set[int] = field(default_factory=set)
    #: Offsets moved to another checkpoint by a change of invisible time.
    moved: set[int] = field(default_factory=set)
    #: The consumer its invisible time is renewed for while it lives ("" for none), and
    #: until when at most.
    owner: str = ""
    renew_until: int = 0

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.group, self.topic, self.queue_id, self.offsets[0], self.pop_time)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms

    @property
    def open(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]

    def ref(self) -> dict[str, Any]:
        """What an ack, move or renewal record names its checkpoint by."""
        return {"g": self.group, "tp": self.topic, "q": self.queue_id, "so": self.offsets[0],
                "pt": self.pop_time}

    def record(self) -> dict[str, Any]:
        return {"t": "ck", "g": self.group, "tp": self.topic, "ot": self.origin,
                "q": self.queue_id, "o": self.offsets, "pt": self.pop_time,
                "it": self.invisible_ms, "n": self.next_offset, "f": self.fifo,
                "a": self.attempt}

    @classmethod
    def from_record(cls, data: dict[str, Any], log_offset: int) -> CheckPoint:
        return cls(data["g"], data["tp"], data["ot"], int(data["q"]),
                   [int(o) for o in data["o"]], int(data["pt"]), int(data["it"]),
                   int(data["n"]), bool(data.get("f")), int(data.get("a", 1)),
                   log_offset=log_offset)


@dataclass(slots=True)
class PoppedMessage:
    """A message handed out by a pop."""

    record: MessageRecord
    handle: str
    #: The delivery attempt: 1 the first time (reconsume count + 1; FIFO: the batch's).
    attempt: int
    #: The topic the consumer asked for (the record's topic may be the retry topic).
    topic: str
    invisible_ms: int
    pop_time: int
    #: Whether it was read from the group's pop retry topic.
    retry: bool = False


@dataclass
class PopResult:
    messages: list[PoppedMessage]
    pop_time: int
    invisible_ms: int
    #: Messages left in the queues read after this pop (RocketMQ's restNum).
    rest: int = 0


@dataclass
class FifoState:
    """A FIFO group's queue: the checkpoints out on it (one batch, split when a message's
    invisible time is changed), and the attempt the batch is at."""

    out: list[CheckPoint] = field(default_factory=list)
    attempt: int = 1
    #: Offsets at or after the consumer offset already acked (a batch acked out of order).
    acked: set[int] = field(default_factory=set)
    #: Offsets of the batch whose invisible time ended unacked, while others are still out.
    expired: set[int] = field(default_factory=set)
    #: Where in the revive topic a replay must start to know this state (the oldest record
    #: of the batch out, or the record of its last revival), or -1 when a live checkpoint
    #: holds it all.
    pin: int = -1

    @property
    def busy(self) -> bool:
        return bool(self.out) or bool(self.expired)


Put = Callable[[Sequence[StoreMessage]], Awaitable[list["PutResult"]]]


class PopService:
    """The POP state of a master: checkpoints out, FIFO locks, waiting pops, revival."""

    def __init__(self, config: BrokerConfig, store: Callable[[], MessageStore], put: Put,
                 topics: TopicTable, subscription_groups: SubscriptionGroupTable,
                 offsets: ConsumerOffsets, topics_changed: Callable[[], None]) -> None:
        self.config = config
        self._store = store
        self.put = put
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.offsets = offsets
        self.topics_changed = topics_changed
        self.revive_topic = revive_topic(config.brokerClusterName)
        self.checkpoints: dict[tuple[str, str, int, int, int], CheckPoint] = {}
        self._deadlines: list[tuple[int, int, CheckPoint]] = []
        self._seq = itertools.count()
        self.fifo: dict[tuple[str, str, int], FifoState] = {}
        #: Where a pop next reads, per (group, topic, queue), ahead of the committed offset
        #: while its checkpoint record is being written.
        self._cursor: dict[tuple[str, str, int], int] = {}
        self._queue_locks: dict[tuple[str, str, int], asyncio.Lock] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        #: Acks waiting for the end of this turn of the loop, and the writes under way.
        self._pending_acks: list[tuple[list[tuple[CheckPoint, list[int]]],
                                       asyncio.Future[None]]] = []
        self._flushing: set[asyncio.Future[None]] = set()
        #: Revive-topic writes under way: the replay start may not pass them.
        self._writing = 0
        self._last_revive_commit = 0.0
        #: FIFO queues to open again at the next revive round (an expiry left their batch
        #: back, or opening them failed).
        self._stuck: dict[tuple[str, str, int], CheckPoint] = {}
        #: Checkpoints whose invisible time is renewed for their owner.
        self._renewing: dict[tuple[str, str, int, int, int], CheckPoint] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._task: asyncio.Task[None] | None = None
        self.running = False

    @property
    def store(self) -> MessageStore:
        return self._store()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Replay the revive topic, then revive on time; on a master only."""
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self.topics.get(self.revive_topic) is None:
            self.topics.create_system(self.revive_topic, 1, Perm.READ | Perm.WRITE)
        self.checkpoints.clear()
        self._deadlines.clear()
        self._renewing.clear()  # their owners are gone with the old run
        self.fifo.clear()
        self._cursor.clear()
        await asyncio.to_thread(self.replay)
        self.store.add_dispatch_listener(self._on_dispatch)
        self.running = True
        self._task = self.loop.create_task(self._revive_loop())

    async def stop(self) -> None:
        self.running = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            self.store.remove_dispatch_listener(self._on_dispatch)
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._waiters.clear()

    def replay(self) -> int:
        """Rebuild the state from the revive topic. Returns the records read."""
        store = self.store
        store.catch_up()
        start = self.offsets.query(REVIVE_GROUP, self.revive_topic, 0)
        low = store.get_min_offset(self.revive_topic, 0)
        offset = low if start is None else max(start, low)
        end = store.get_max_offset(self.revive_topic, 0)
        read = 0
        while offset < end:
            result = store.get_messages(self.revive_topic, 0, offset, 256)
            if result.status is not GetStatus.FOUND:
                offset = max(offset + 1, result.next_begin_offset)
                result.release()
                continue
            try:
                for record in result.decode():
                    read += 1
                    try:
                        self._apply(orjson.loads(record.body), record.queue_offset)
                    except (ValueError, KeyError, TypeError, IndexError):
                        log.warning("revive topic %s: record at %d is not a checkpoint or an "
                                    "ack; skipped", self.revive_topic, record.queue_offset)
            finally:
                result.release()
            offset = result.next_begin_offset
        if read:
            log.info("POP: replayed %d checkpoint and ack records from %s: %d checkpoints "
                     "out", read, self.revive_topic, len(self.checkpoints))
        return read

    def _apply(self, data: dict[str, Any], log_offset: int) -> None:
        if data["t"] == "ck":
            ck = CheckPoint.from_record(data, log_offset)
            if not ck.fifo:
                self._track(ck)
            qkey = (ck.group, ck.topic, ck.queue_id)
            if ck.fifo:
                state = self.fifo.setdefault(qkey, FifoState())
                if not data.get("split"):
                    # A new batch: whatever the last one left open was revived before it.
                    for old in state.out:
                        old.done = True
                        self.checkpoints.pop(old.key, None)
                    state.out, state.expired = [], set()
                    state.attempt = ck.attempt
                    state.acked = {int(o) for o in data.get("ak", ())}
                    state.pin = -1
                self._track(ck)
                state.out.append(ck)
            else:
                if (self.offsets.query(ck.group, ck.topic, ck.queue_id) or 0) < ck.next_offset:
                    self.offsets.commit(ck.group, ck.topic, ck.queue_id, ck.next_offset)
        elif data["t"] == "renew":  # an owner's messages kept invisible longer
            ck = self._named(data)
            if ck is not None:
                ck.invisible_ms = int(data["it"])
                heapq.heappush(self._deadlines, (ck.deadline, next(self._seq), ck))
        elif data["t"] == "acks":  # acks written together
            for g, tp, q, so, pt, offsets in data["l"]:
                ck = self._named({"g": g, "tp": tp, "q": q, "so": so, "pt": pt})
                if ck is not None:
                    self._mark(ck, [int(o) for o in offsets])
        elif data["t"] == "ack":
            ck = self._named(data)
            if ck is not None:
                offsets = [int(o) for o in data["o"]]
                if data.get("moved"):
                    ck.moved.update(offsets)
                self._mark(ck, offsets, consumed=not data.get("moved"))
        elif data["t"] == "fifo":  # a FIFO batch revived: where it starts again, and when
            state = self.fifo.setdefault((data["g"], data["tp"], int(data["q"])), FifoState())
            for old in state.out:  # revived with it: out no longer
                old.done = True
                self.checkpoints.pop(old.key, None)
            state.acked = {int(o) for o in data.get("ak", ())}
            self._reopen(state, data["g"], data["tp"], int(data["q"]), int(data["from"]),
                         int(data["a"]))
            if state.acked or state.attempt > 1:
                state.pin = log_offset

    def _named(self, data: dict[str, Any]) -> CheckPoint | None:
        """The checkpoint a record names (see CheckPoint.ref), if it is still out."""
        return self.checkpoints.get((data["g"], data["tp"], int(data["q"]), int(data["so"]),
                                     int(data["pt"])))

    # ------------------------------------------------------------------ pop
    async def pop(self, group: str, topic: str, queue_id: int, max_nums: int,
                  invisible_ms: int, poll_ms: int, sub: Subscription, *,
                  fifo: bool | None = None, min_invisible_ms: int = MIN_INVISIBLE_MS,
                  owner: str = "") -> PopResult:
        """Hand out up to ``max_nums`` messages of ``topic`` (queue ``queue_id``, or every
        queue of it on this broker for -1) matching ``sub``, waiting up to ``poll_ms`` for
        one to arrive. ``fifo`` None takes the group's ``consumeMessageOrderly``. With an
        ``owner`` (a consumer's id) their invisible time is renewed until it is acked, the
        owner goes (:meth:`forget_owner`), or RENEW_MAX_MS passes."""
        if not self.running:
            raise PopError("permission", f"broker {self.config.brokerName} is not a master "
                                         "(POP is served by masters)")
        if not min_invisible_ms <= invisible_ms <= MAX_INVISIBLE_MS:
            raise PopError("argument", f"invisible time {invisible_ms} ms is out of range: "
                           f"it must be within {min_invisible_ms}..{MAX_INVISIBLE_MS} ms")
        if max_nums <= 0:
            raise PopError("argument", f"the number of messages to receive must be 1 or more, "
                                       f"not {max_nums}")
        group_config = self.subscription_groups.find_or_create(group)
        if group_config is None:
            raise PopError("group", f"subscription group [{group}] does not exist")
        if not group_config.consume_enable:
            raise PopError("permission", f"subscription group [{group}] may not consume")
        topic_config = self.topics.get(topic)
        if topic_config is None:
            raise PopError("topic", f"topic [{topic}] does not exist on broker "
                                    f"{self.config.brokerName}")
        if not topic_config.perm & Perm.READ or not self.config.brokerPermission & Perm.READ:
            raise PopError("permission", f"topic [{topic}] may not be read on broker "
                                         f"{self.config.brokerName}")
        if fifo is None:
            fifo = group_config.consume_message_orderly
        if queue_id >= topic_config.read_queue_nums:
            raise PopError("argument", f"queue {queue_id} of topic [{topic}] does not exist "
                           f"(it has {topic_config.read_queue_nums} read queues)")
        record_filter = _record_filter(sub)
        max_nums = min(max_nums, MAX_POP_NUMS)
        deadline = time.monotonic() + max(0, poll_ms) / 1000
        while True:
            result = await self._pop_once(group, topic, queue_id, topic_config.read_queue_nums,
                                          max_nums, invisible_ms, sub, record_filter, fifo,
                                          owner)
            remaining = deadline - time.monotonic()
            if result.messages or remaining <= 0 or not self.running:
                return result
            await self._wait(topic, remaining)

    async def _pop_once(self, group: str, topic: str, queue_id: int, queue_nums: int,
                        max_nums: int, invisible_ms: int, sub: Subscription,
                        record_filter: Callable[[memoryview], bool] | None,
                        fifo: bool, owner: str = "") -> PopResult:
        pop_time = int(time.time() * 1000)
        out: list[PoppedMessage] = []
        queues = [queue_id] if queue_id >= 0 else _rotated(queue_nums)
        sources = [(topic, q, False) for q in queues]
        if not fifo:
            retry = pop_retry_topic(group, topic)
            if self.topics.get(retry) is not None:
                # Retries first now and then, so that a busy topic does not starve them.
                entry = (retry, 0, True)
                if random.random() < 0.2:
                    sources.insert(0, entry)
                else:
                    sources.append(entry)
        rest = 0
        for source, q, retry in sources:
            if len(out) >= max_nums:
                rest += max(0, self.store.get_max_offset(source, q) -
                            self._read_from(group, source, q))
                continue
            got = await self._pop_queue(group, topic, source, q, max_nums - len(out),
                                        invisible_ms, pop_time, sub, record_filter, fifo, retry,
                                        owner)
            out.extend(got)
        return PopResult(out, pop_time, invisible_ms, rest)

    def _read_from(self, group: str, topic: str, queue_id: int) -> int:
        """Where the group's next pop of a queue reads."""
        key = (group, topic, queue_id)
        cursor = self._cursor.get(key)
        if cursor is not None:
            return cursor
        committed = self.offsets.query(group, topic, queue_id)
        if committed is not None and committed >= 0:
            return max(committed, self.store.get_min_offset(topic, queue_id))
        # A new group: from the first message while the queue still holds it (RocketMQ's
        # pop and 4.x consumers alike), else from the end.
        store = self.store
        low = store.get_min_offset(topic, queue_id)
        return 0 if low <= 0 else store.get_max_offset(topic, queue_id)

    async def _pop_queue(self, group: str, origin: str, topic: str, queue_id: int,
                         max_nums: int, invisible_ms: int, pop_time: int, sub: Subscription,
                         record_filter: Callable[[memoryview], bool] | None, fifo: bool,
                         retry: bool, owner: str = "") -> list[PoppedMessage]:
        qkey = (group, topic, queue_id)
        lock = self._queue_locks.get(qkey)
        if lock is None:
            lock = self._queue_locks[qkey] = asyncio.Lock()
        async with lock:
            state = None
            if fifo:
                state = self.fifo.setdefault(qkey, FifoState())
                if state.busy:
                    return []  # its last batch is still out: FIFO waits for the acks
            offset = self._read_from(group, topic, queue_id)
            store = self.store
            if offset >= store.get_max_offset(topic, queue_id):
                return []
            result = store.get_messages(topic, queue_id, offset, max_nums, sub.codes,
                                        record_filter)
            try:
                if result.status is not GetStatus.FOUND:
                    if result.next_begin_offset > offset and not fifo:
                        self._cursor[qkey] = result.next_begin_offset
                        self.offsets.commit(group, topic, queue_id, result.next_begin_offset)
                    elif fifo and result.next_begin_offset > offset:
                        self.offsets.commit(group, topic, queue_id, result.next_begin_offset)
                    return []
                records = result.decode()
                next_offset = result.next_begin_offset
            finally:
                result.release()
            acked_before = state.acked if state is not None else set()
            records = [r for r in records if sub.matches_tags(r.tags)
                       and r.queue_offset not in acked_before]
            if not records:
                if not fifo:
                    self._cursor[qkey] = next_offset
                self.offsets.commit(group, topic, queue_id, next_offset)
                return []
            attempt = state.attempt if state is not None else 1
            ck = CheckPoint(group, topic, origin, queue_id, [r.queue_offset for r in records],
                            pop_time, invisible_ms, next_offset, fifo, attempt)
            record = ck.record()
            if state is not None and state.acked:
                record["ak"] = sorted(state.acked)
            if not fifo:
                self._cursor[qkey] = next_offset
            try:
                ck.log_offset = await self._write(record)
            except BaseException:
                if not fifo:
                    self._cursor.pop(qkey, None)  # read them again: they were not handed out
                raise
            self._track(ck)
            if owner:
                ck.owner, ck.renew_until = owner, pop_time + RENEW_MAX_MS
                self._renewing[ck.key] = ck
            if state is not None:
                state.out.append(ck)
                state.pin = -1  # this batch's checkpoint holds the queue's state now
            else:
                self.offsets.commit(group, topic, queue_id, next_offset)
                if self._cursor.get(qkey) == next_offset:
                    del self._cursor[qkey]
        handles = []
        for r in records:
            h = ReceiptHandle(ck.offsets[0], pop_time, invisible_ms, 0,
                              RETRY_TOPIC if retry else NORMAL_TOPIC, self.config.brokerName,
                              queue_id, r.queue_offset, r.commitlog_offset)
            handles.append(PoppedMessage(
                r, h.encode(), attempt if fifo else r.reconsume_times + 1, origin,
                invisible_ms, pop_time, retry))
        return handles

    def _record(self, data: dict[str, Any]) -> StoreMessage:
        return StoreMessage.create(self.revive_topic, orjson.dumps(data), 0, tags=data["t"])

    async def _write(self, data: dict[str, Any]) -> int:
        """Append a checkpoint or ack record to the revive topic; its queue offset."""
        self._writing += 1
        try:
            results = await self.put([self._record(data)])
        finally:
            self._writing -= 1
        return results[0].queue_offset

    def _track(self, ck: CheckPoint) -> None:
        self.checkpoints[ck.key] = ck
        heapq.heappush(self._deadlines, (ck.deadline, next(self._seq), ck))

    # ------------------------------------------------------------------ ack
    def _find(self, group: str, topic: str, handle: ReceiptHandle) -> CheckPoint:
        source = pop_retry_topic(group, topic) if handle.topic_type == RETRY_TOPIC else topic
        ck = self.checkpoints.get((group, source, handle.queue_id, handle.start_offset,
                                   handle.pop_time))
        now = int(time.time() * 1000)
        if ck is None or handle.queue_offset not in ck.offsets:
            if handle.deadline <= now:
                raise PopError("expired", "the receipt handle has expired: its invisible time "
                               "ended, and the message is (or will be) delivered again")
            raise PopError("handle", f"no message of topic {topic} received by group {group} "
                           "has this receipt handle (is it another group's, or changed "
                           "since?)")
        if ck.deadline <= now:
            raise PopError("expired", "the receipt handle has expired: its invisible time "
                           "ended, and the message is (or will be) delivered again")
        return ck

    async def ack(self, group: str, topic: str, handle: str) -> None:
        """Mark a popped message consumed. Acking it twice is fine. Raises PopError for a
        handle that is not one of the group's messages out, or whose time is up."""
        error = (await self.ack_many(group, topic, [handle]))[0]
        if error is not None:
            raise error

    async def ack_many(self, group: str, topic: str, handles: Sequence[str]
                       ) -> list[PopError | None]:
        """Ack several messages at once (one record per checkpoint); what went wrong with
        each, or None."""
        self._serving()
        errors: list[PopError | None] = []
        by_ck: dict[int, tuple[CheckPoint, list[int]]] = {}
        for text in handles:
            try:
                handle = ReceiptHandle.decode(text)
                ck = self._find(group, topic, handle)
                if handle.queue_offset in ck.moved:
                    raise PopError("handle", "this receipt handle was replaced by a change "
                                   "of the message's invisible time: ack with the new one")
            except PopError as exc:
                errors.append(exc)
                continue
            errors.append(None)
            if handle.queue_offset not in ck.acked:
                by_ck.setdefault(id(ck), (ck, []))[1].append(handle.queue_offset)
        if by_ck:
            acks = list(by_ck.values())
            store = self.store
            if store.config.answers_when_safe:
                # Written once flushed or replicated: not revived meanwhile.
                for ck, offsets in acks:
                    ck.pending.update(offsets)
                try:
                    await self._ack_soon(acks)
                finally:
                    for ck, offsets in acks:
                        ck.pending.difference_update(offsets)
            else:
                # Answered once appended: written now, and the call never waits.
                store.put_messages([self._record(self._acks_record([(acks, None)]))])
                self._acked([(acks, None)])
        return errors

    def _ack_soon(self, acks: list[tuple[CheckPoint, list[int]]]) -> asyncio.Future[None]:
        """Write ``acks`` with the others made in this turn of the event loop: one record
        for all of them (the acks of many consumers, each its own call, cost one append);
        the future is done once it is written and the checkpoints marked."""
        assert self.loop is not None
        fut: asyncio.Future[None] = self.loop.create_future()
        if not self._pending_acks:
            self.loop.call_soon(self._flush_acks)
        self._pending_acks.append((acks, fut))
        return fut

    def _flush_acks(self) -> None:
        pending, self._pending_acks = self._pending_acks, []
        if not pending:
            return
        task = asyncio.ensure_future(self._write_acks(pending))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    @staticmethod
    def _acks_record(pending: list[tuple[list[tuple[CheckPoint, list[int]]],
                                         asyncio.Future[None] | None]]) -> dict[str, Any]:
        return {"t": "acks", "l": [[ck.group, ck.topic, ck.queue_id, ck.offsets[0],
                                    ck.pop_time, offsets]
                                   for acks, _ in pending for ck, offsets in acks]}

    async def _write_acks(self, pending: list[tuple[list[tuple[CheckPoint, list[int]]],
                                                    asyncio.Future[None]]]) -> None:
        try:
            await self._write(self._acks_record(pending))
        except BaseException as exc:
            for _, fut in pending:
                if not fut.done():
                    fut.set_exception(exc)
            if isinstance(exc, Exception):
                return
            raise
        self._acked(pending)

    def _acked(self, pending: list[tuple[list[tuple[CheckPoint, list[int]]],
                                         asyncio.Future[None] | None]]) -> None:
        for acks, fut in pending:
            for ck, offsets in acks:
                self._mark(ck, offsets)
            if fut is not None and not fut.done():
                fut.set_result(None)

    async def dead_letter(self, group: str, topic: str, handle: str,
                          delivery_attempt: int = 0) -> None:
        """Move a popped message to the group's dead-letter topic now (the 5.x push
        consumer's ForwardMessageToDeadLetterQueue when its attempts are spent): stored
        there first, then acked, so that a failure loses nothing."""
        self._serving()
        parsed = ReceiptHandle.decode(handle)
        ck = self._find(group, topic, parsed)
        record = self._read(ck.topic, ck.queue_id, parsed.queue_offset)
        if record is None:
            raise PopError("handle", "the message of this receipt handle is no longer stored")
        await self.put([self._dead_letter(
            record, ck, max(record.reconsume_times, delivery_attempt - 1))])
        await self.ack(group, topic, handle)

    def _dead_letter(self, record: MessageRecord, ck: CheckPoint, reconsume_times: int,
                     props: dict[str, str] | None = None) -> StoreMessage:
        """``record`` as stored in its group's dead-letter topic, saying where it came from."""
        props = dict(record.properties) if props is None else props
        props.setdefault(Property.DLQ_ORIGIN_TOPIC, ck.origin)
        props.setdefault(Property.DLQ_ORIGIN_MESSAGE_ID, record.msg_id)
        topic = dead_letter_topic(self.topics, ck.group, self.topics_changed)
        return StoreMessage.from_record(record, topic, 0, encode_properties(props),
                                        reconsume_times=reconsume_times)

    def _retry_max_times(self, group: str) -> int:
        """The group's retryMaxTimes (16 for a group this broker cannot create)."""
        config = self.subscription_groups.find_or_create(group)
        return config.retry_max_times if config is not None else 16

    async def _renew(self, now: int) -> None:
        """Keep invisible the messages of owners that asked for it (RENEW_BY_MS more when
        less than RENEW_AHEAD_MS is left): the checkpoint's invisible time grows, in place,
        so the handles the owner holds stay good."""
        for key, ck in list(self._renewing.items()):
            if ck.done or not ck.owner or now >= ck.renew_until:
                del self._renewing[key]
                continue
            if ck.deadline - now >= RENEW_AHEAD_MS or ck.pending:
                continue
            longer = now + RENEW_BY_MS - ck.pop_time
            await self._write({"t": "renew", **ck.ref(), "it": longer})
            ck.invisible_ms = longer
            heapq.heappush(self._deadlines, (ck.deadline, next(self._seq), ck))

    def forget_owner(self, owner: str) -> None:
        """``owner`` is gone: its messages are no longer renewed, and come back when their
        invisible time ends."""
        for key, ck in list(self._renewing.items()):
            if ck.owner == owner:
                ck.owner = ""
                del self._renewing[key]

    def _serving(self) -> None:
        if not self.running:
            raise PopError("permission", f"broker {self.config.brokerName} does not serve POP "
                           "now (it is a slave, or it is starting: try again)")

    def _mark(self, ck: CheckPoint, offsets: list[int], consumed: bool = True) -> None:
        """``offsets`` of ``ck`` are acked (``consumed``), or moved to another checkpoint."""
        ck.acked.update(offsets)
        if ck.fifo and consumed:
            self._fifo_state(ck).acked.update(offsets)
        if not ck.open:
            self._finish(ck)

    def _fifo_state(self, ck: CheckPoint) -> FifoState:
        return self.fifo.setdefault((ck.group, ck.topic, ck.queue_id), FifoState())

    def _finish(self, ck: CheckPoint) -> None:
        """Nothing of ``ck`` is out any more."""
        ck.done = True
        self.checkpoints.pop(ck.key, None)
        self._renewing.pop(ck.key, None)
        if ck.fifo:
            state = self._fifo_state(ck)
            if ck in state.out:
                state.out.remove(ck)
            if not state.out:
                if state.expired:
                    # Part of the batch ran out of time: reopened from its first message
                    # not acked, with the next attempt, by the revive loop (it writes).
                    self._stuck[(ck.group, ck.topic, ck.queue_id)] = ck
                else:
                    # The whole batch is acked: on after it.
                    self._reopen(state, ck.group, ck.topic, ck.queue_id, ck.next_offset, 1)
                    state.pin = -1
                    self._notify(ck.origin)

    def _reopen(self, state: FifoState, group: str, topic: str, queue_id: int, start: int,
                attempt: int) -> None:
        """A FIFO queue reads again from ``start``, its first message at ``attempt``."""
        state.out = []
        state.expired = set()
        state.attempt = attempt
        state.acked = {o for o in state.acked if o >= start}
        self.offsets.commit(group, topic, queue_id, start)

    async def change_invisible(self, group: str, topic: str, handle: str,
                               invisible_ms: int) -> str:
        """Make a popped message invisible for ``invisible_ms`` from now; the new handle."""
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise PopError("argument", f"invisible time {invisible_ms} ms is out of range: it "
                           f"must be within 0..{MAX_INVISIBLE_MS} ms")
        self._serving()
        old = ReceiptHandle.decode(handle)
        ck = self._find(group, topic, old)
        offset = old.queue_offset
        if offset in ck.acked or offset in ck.moved or offset in ck.pending:
            raise PopError("handle", "the message of this receipt handle was acked or its "
                           "invisible time changed already")
        now = int(time.time() * 1000)
        if now <= ck.pop_time:
            now = ck.pop_time + 1  # another checkpoint than the one it leaves
        new = CheckPoint(group, ck.topic, ck.origin, ck.queue_id, [offset], now,
                         invisible_ms, ck.next_offset, ck.fifo, ck.attempt)
        state = self._fifo_state(ck) if ck.fifo else None
        ck.pending.add(offset)  # not revived from the old checkpoint while this is written
        if state is not None:
            state.out.append(new)  # the batch stays out meanwhile
        try:
            new.log_offset = await self._write({**new.record(), "split": True})
            self._track(new)
            await self._write({"t": "ack", **ck.ref(), "o": [offset], "moved": True})
        except BaseException:
            if new.log_offset < 0 and state is not None and new in state.out:
                state.out.remove(new)
            raise
        finally:
            ck.pending.discard(offset)
        ck.moved.add(offset)
        self._mark(ck, [offset], consumed=False)
        return ReceiptHandle(old.queue_offset, now, invisible_ms, 0, old.topic_type,
                             old.broker, old.queue_id, old.queue_offset,
                             old.commitlog_offset).encode()

    # ------------------------------------------------------------------ revive
    async def _revive_loop(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL)
            try:
                await self.revive_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("POP: reviving messages not acked in time failed; trying again")
                await asyncio.sleep(1)

    async def revive_due(self, now: int | None = None) -> int:
        """Revive every checkpoint whose invisible time is over. Returns messages revived
        (to the retry topic, to the DLQ, or FIFO batches opened again)."""
        now = int(time.time() * 1000) if now is None else now
        revived = 0
        if self._renewing:
            await self._renew(now)
        for qkey, ck in list(self._stuck.items()):  # FIFO queues whose reopening failed
            del self._stuck[qkey]
            revived += await self._reopen_after_expiry(self.fifo[qkey], ck)
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, ck = heapq.heappop(self._deadlines)
            if ck.done or self.checkpoints.get(ck.key) is not ck:
                continue
            if ck.deadline > now:
                continue  # renewed: a later entry stands for it
            if ck.pending:
                # An ack of it is being written: look again shortly.
                heapq.heappush(self._deadlines, (now + 200, next(self._seq), ck))
                continue
            try:
                revived += await (self._revive_fifo(ck) if ck.fifo else self._revive(ck))
            except Exception as exc:
                # Nothing is lost: the checkpoint stays out and is tried again (a full
                # disk, a slave gone under SYNC_MASTER), as RocketMQ re-puts a checkpoint.
                log.warning("POP: reviving %d message(s) of %s:%d for group %s failed, "
                            "retrying in 5 s: %s", len(ck.open), ck.topic, ck.queue_id,
                            ck.group, exc)
                heapq.heappush(self._deadlines, (now + 5000, next(self._seq), ck))
                break
        if time.monotonic() - self._last_revive_commit >= 1.0:
            self._last_revive_commit = time.monotonic()
            self._commit_revive_offset()
        return revived

    async def _revive(self, ck: CheckPoint) -> int:
        max_times = self._retry_max_times(ck.group)
        todo = ck.open
        for offset in todo:
            record = self._read(ck.topic, ck.queue_id, offset)
            if record is None:
                log.warning("POP: message %d of %s:%d is gone from the store; not revived",
                            offset, ck.topic, ck.queue_id)
                continue
            times = record.reconsume_times + 1
            props = dict(record.properties)
            props.setdefault(Property.RETRY_TOPIC, ck.origin)
            props.setdefault("1ST_POP_TIME", str(ck.pop_time))
            if times > max_times:
                message = self._dead_letter(record, ck, times, props)
            else:
                message = StoreMessage.from_record(
                    record, self._retry_topic(ck.group, ck.origin), 0,
                    encode_properties(props), reconsume_times=times)
            await self.put([message])
        await self._write({"t": "ack", **ck.ref(), "o": todo})
        ck.acked.update(todo)
        self._finish(ck)
        if todo:
            self._notify(ck.origin)
        return len(todo)

    async def _revive_fifo(self, ck: CheckPoint) -> int:
        """A FIFO checkpoint not acked in time: once nothing else of its batch is out, the
        queue is read again from the first message not acked, with the next attempt; a
        message whose attempts are spent goes to the DLQ instead, and the queue reads on."""
        state = self._fifo_state(ck)
        todo = ck.open
        ck.done = True
        self.checkpoints.pop(ck.key, None)
        if ck in state.out:
            state.out.remove(ck)
        state.expired.update(todo)
        # Its record holds the batch's state until the queue is opened again.
        state.pin = ck.log_offset if state.pin < 0 else min(state.pin, ck.log_offset)
        if state.out:
            return 0  # the rest of the batch is still out: wait for it
        return await self._reopen_after_expiry(state, ck)

    async def _reopen_after_expiry(self, state: FifoState, ck: CheckPoint) -> int:
        """Open a FIFO queue again after its batch's time ran out; its state changes only
        once what that takes is written (a failure leaves it to the next round)."""
        max_attempts = self._retry_max_times(ck.group) + 1
        first = min(state.expired)
        attempt = state.attempt + 1
        acked = set(state.acked)
        try:
            if attempt > max_attempts:
                record = self._read(ck.topic, ck.queue_id, first)
                if record is not None:
                    await self.put([self._dead_letter(record, ck, state.attempt)])
                acked.add(first)
                attempt = 1
                later = [o for o in state.expired if o > first]
                start = min(later) if later else ck.next_offset
            else:
                start = first
            acked = {o for o in acked if o >= start}
            pin = await self._write({"t": "fifo", "g": ck.group, "tp": ck.topic,
                                     "q": ck.queue_id, "a": attempt, "from": start,
                                     "ak": sorted(acked)})
        except Exception:
            self._stuck[(ck.group, ck.topic, ck.queue_id)] = ck
            raise
        state.acked = acked
        count = len(state.expired)
        self._reopen(state, ck.group, ck.topic, ck.queue_id, start, attempt)
        state.pin = pin if (state.acked or attempt > 1) else -1
        self._notify(ck.origin)
        return count

    def _retry_topic(self, group: str, origin: str) -> str:
        retry = pop_retry_topic(group, origin)
        if self.topics.get(retry) is None:
            self.topics.create_system(retry, 1, Perm.READ | Perm.WRITE)
            self.topics_changed()
        return retry

    def _read(self, topic: str, queue_id: int, offset: int) -> MessageRecord | None:
        result = self.store.get_messages(topic, queue_id, offset, 1)
        try:
            if result.status is not GetStatus.FOUND:
                return None
            record = result.decode(decompress=False)[0]
            return record if record.queue_offset == offset else None
        finally:
            result.release()

    def _commit_revive_offset(self) -> None:
        """Keep where a replay must start: the oldest checkpoint still out, or FIFO state
        record still needed; never past a record being written."""
        if self._writing:
            return
        live = [ck.log_offset for ck in self.checkpoints.values() if ck.log_offset >= 0]
        live += [st.pin for st in self.fifo.values() if st.pin >= 0]
        if live:
            start = min(live)
        else:
            start = self.store.get_max_offset(self.revive_topic, 0)
        if self.offsets.query(REVIVE_GROUP, self.revive_topic, 0) != start:
            self.offsets.commit(REVIVE_GROUP, self.revive_topic, 0, start)

    # ------------------------------------------------------------------ waiting pops
    async def _wait(self, topic: str, timeout: float) -> None:
        assert self.loop is not None
        fut: asyncio.Future[None] = self.loop.create_future()
        waiters = self._waiters.setdefault(topic, set())
        waiters.add(fut)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(timeout, 1.0)):
                    await fut
        finally:
            waiters.discard(fut)
            if not waiters:
                self._waiters.pop(topic, None)

    def _notify(self, topic: str) -> None:
        for fut in self._waiters.get(topic, ()):
            if not fut.done():
                fut.set_result(None)

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Runs where the store dispatches: wake the pops waiting on ``topic``."""
        if topic.startswith("%RETRY%") and "_" in topic:
            # A revived message: wake pops of its origin topic (group names may hold "_").
            for waiting in list(self._waiters):
                if topic.endswith("_" + waiting):
                    self._wake_soon(waiting)
            return
        if topic in self._waiters:
            self._wake_soon(topic)

    def _wake_soon(self, topic: str) -> None:
        if self.loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._notify(topic)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self.loop.call_soon_threadsafe(self._notify, topic)


def _rotated(n: int) -> list[int]:
    start = random.randrange(n) if n > 0 else 0
    return [(start + i) % n for i in range(n)]


def _record_filter(sub: Subscription) -> Callable[[memoryview], bool] | None:
    if sub.expression_type != EXPRESSION_SQL92:
        return None
    selector = compile_selector(sub.expression)  # SqlError: the caller's

    def record_filter(view: memoryview) -> bool:
        return selector(record_properties(view))
    return record_filter


__all__ = ["CheckPoint", "PopError", "PopResult", "PopService", "PoppedMessage",
           "ReceiptHandle", "pop_retry_topic", "revive_topic"]
