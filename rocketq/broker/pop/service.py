"""POP consumption: messages handed out with an invisible time, acked one by one, and seen
again when not acked in time (RocketMQ 5's PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor and PopReviveService, and the consumption model of the 5.x
SimpleConsumer and PushConsumer). The remoting requests (``requests``) and the gRPC
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

The service is built of five modules: ``records`` (handles, checkpoints and the other
values), ``acks`` (ack, change of invisible time, dead-lettering), ``revive`` (replay,
revival, FIFO reopening, renewal), ``waiting`` (pops waiting for messages) and this one (the
state, its start and stop, and the pop).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from ...protocol import Perm
from ...protocol.filter import EXPRESSION_SQL92, Subscription
from ...protocol.message import record_properties
from ...protocol.sql92 import compile_selector
from ...store import GetStatus, StoreMessage
from ..config import BrokerConfig
from ..offsets.table import ConsumerOffsets
from ..stats import Stats
from ..subscription_groups import SubscriptionGroupTable
from ..topics import TopicTable
from .acks import PopAcks
from .records import (
    MAX_INVISIBLE_MS,
    MAX_POP_NUMS,
    MIN_INVISIBLE_MS,
    NORMAL_TOPIC,
    RENEW_MAX_MS,
    RETRY_TOPIC,
    CheckPoint,
    FifoState,
    PopError,
    PoppedMessage,
    PopResult,
    Put,
    ReceiptHandle,
    pop_retry_topic,
    revive_topic,
)
from .revive import PopRevival
from .waiting import PopWaiting

if TYPE_CHECKING:
    from ...store import MessageStore


class PopService(PopAcks, PopRevival, PopWaiting):
    """The POP state of a master: checkpoints out, FIFO locks, waiting pops, revival."""

    def __init__(self, config: BrokerConfig, store: Callable[[], MessageStore], put: Put,
                 topics: TopicTable, subscription_groups: SubscriptionGroupTable,
                 offsets: ConsumerOffsets, topics_changed: Callable[[], None],
                 stats: Stats | None = None) -> None:
        self.config = config
        #: Where pops count the messages they hand out and those sent to a dead-letter topic.
        self.stats = stats or Stats()
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
        self._wake_all()

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
        self.stats.get(len(records), topic, group, sum(r.store_size for r in records))
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
