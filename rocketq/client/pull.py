"""The pull consumer (asyncio core), like RocketMQ's DefaultLitePullConsumer.

Either ``subscribe`` (the group shares the queues, rebalanced as members come and go) or
``assign`` queues yourself; then ``poll`` returns messages as they arrive (or ``async for
message in consumer`` takes them one at a time). Background tasks long-poll each queue and
keep a bounded buffer, so ``poll`` rarely waits for the network. Offsets are the ones after
the last polled message of each queue, committed by ``commit()``, or with ``auto_commit``
every ``auto_commit_interval`` seconds and at shutdown (the end of ``async with``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncGenerator, Iterable
from typing import Any

from ..acl import Credentials
from ..protocol import PullSysFlag, RemotingCommand, RequestCode, ResponseCode
from ..remoting import RemotingError
from .allocate import AllocateStrategy
from .consumer import GroupConsumer
from .errors import ClientError
from .instance import ClientInstance
from .message import MessageQueue, ReceivedMessage
from .pulled import pulled_messages

log = logging.getLogger("rocketq.client")

_LITE_PULL_FLAGS = PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION | PullSysFlag.LITE_PULL



class _QueueState:
    """Where a queue's background pull stands."""

    def __init__(self, mq: MessageQueue, offset: int) -> None:
        self.mq = mq
        self.next_offset = offset
        self.consumed = offset  # the offset after the last polled message
        self.epoch = 0  # bumped by seek: buffered batches of an older epoch are dropped
        self.buffered = 0
        self.task: asyncio.Task[None] | None = None
        self.paused = False


#: A pulled batch waiting to be polled: its queue, the queue's epoch when it was pulled, its
#: messages, and the offset after them.
_Batch = tuple[_QueueState, int, list[ReceivedMessage], int]

class AsyncPullConsumer(GroupConsumer):
    """Poll messages from subscribed or assigned queues."""

    consume_type = "CONSUME_ACTIVELY"
    subscribes_retry_topic = False

    def __init__(self, group: str, namesrv: str, *, from_where: str = "last",
                 consume_timestamp: int | None = None,
                 allocate: AllocateStrategy | str = "averagely", pull_batch_size: int = 32,
                 auto_commit: bool = True, auto_commit_interval: float = 5.0,
                 pull_threshold_for_queue: int = 1000, max_poll_records: int = 1024,
                 suspend_timeout: float = 20.0, rebalance_interval: float = 20.0,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None,
                 instance: ClientInstance | None = None) -> None:
        super().__init__(group, namesrv, model="clustering", from_where=from_where,
                         consume_timestamp=consume_timestamp, allocate=allocate,
                         rebalance_interval=rebalance_interval,
                         persist_interval=auto_commit_interval, instance=instance,
                         credentials=credentials, tls=tls)
        self.pull_batch_size = pull_batch_size
        self.auto_commit = auto_commit
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.max_poll_records = max_poll_records
        self.suspend_timeout = suspend_timeout
        #: Batches pulled and not polled yet; None, put in by shutdown, wakes waiting polls.
        self._buffer: asyncio.Queue[_Batch | None] | None = None
        self._assigned: list[MessageQueue] | None = None

    # ------------------------------------------------------------------ set-up
    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no group rebalancing)."""
        self._assigned = sorted(queues)
        self.rebalancing = False
        for mq in self._assigned:
            self.subscriptions.setdefault(mq.topic, self._sub_all(mq.topic))
        if self.running:
            asyncio.get_running_loop().create_task(self._apply_assignment())
            self._changed()

    @staticmethod
    def _sub_all(topic: str) -> Any:
        from ..protocol.filter import Subscription

        return Subscription.parse(topic, "*", "TAG", int(time.time() * 1000))

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of ``topic``, for ``assign``."""
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise ClientError(f"No route info of this topic: {topic}")
        return sorted(route.subscribe_queues)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start pulling; subscribe or assign first. (``async with`` starts the consumer on
        entry and lets them come after.) Starting again does nothing."""
        await self._start(require_setup=True)

    async def _start(self, require_setup: bool) -> None:
        if self.running:
            return
        if require_setup and not self.subscriptions:
            raise ClientError("subscribe to a topic or assign queues before starting")
        self._buffer = asyncio.Queue()
        if not self.auto_commit:
            self.persist_interval = float("inf")
        await self._start_group()
        if self._assigned is not None:
            await self._apply_assignment()

    async def _apply_assignment(self) -> None:
        assert self._assigned is not None
        by_topic: dict[str, set[MessageQueue]] = {}
        for mq in self._assigned:
            by_topic.setdefault(mq.topic, set()).add(mq)
        for topic in set(self.subscriptions) | {mq.topic for mq in self.owned}:
            await self._update_queues(topic, by_topic.get(topic, set()))

    async def shutdown(self) -> None:
        if not self.running:
            return
        await self._stop_loops()
        for state in self.owned.values():
            if state.task is not None:
                state.task.cancel()
        if self.auto_commit:
            self._sync_store()
        if self._buffer is not None:
            self._buffer.put_nowait(None)  # wakes polls and iterations waiting for messages
        await self._leave_group()

    async def __aenter__(self) -> AsyncPullConsumer:
        """The consumer, started: subscribe or assign inside (each takes effect at once; an
        ``await start()`` there does nothing). Leaving shuts it down, committing the
        positions after the messages polled (with ``auto_commit``)."""
        await self._start(require_setup=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _queue_added(self, mq: MessageQueue, offset: int) -> _QueueState:
        state = _QueueState(mq, offset)
        state.task = asyncio.get_running_loop().create_task(self._pull_loop(state))
        return state

    def _queue_removed(self, mq: MessageQueue) -> None:
        state = self.owned[mq]
        state.epoch += 1
        if state.task is not None:
            state.task.cancel()
        self.offset_store.update(mq, state.consumed)

    # ------------------------------------------------------------------ background pulls
    async def _pull_loop(self, state: _QueueState) -> None:
        mq = state.mq
        assert self._buffer is not None
        while self.running:
            if state.buffered >= self.pull_threshold_for_queue or state.paused:
                await asyncio.sleep(0.05)
                continue
            sub = self.subscriptions.get(mq.topic) or self._sub_all(mq.topic)
            epoch = state.epoch
            offset = state.next_offset
            response = await self._pull(mq, offset, sub, _LITE_PULL_FLAGS, 0,
                                        self.pull_batch_size, self.suspend_timeout)
            if response is None:
                continue
            if epoch != state.epoch:
                continue  # a seek happened meanwhile
            code = response.code
            next_offset = int(response.ext_fields.get("nextBeginOffset", offset))
            if code == ResponseCode.SUCCESS:
                messages = pulled_messages(response.body, mq.broker_name)
                if not sub.matches_all:
                    messages = [m for m in messages if sub.matches_tags(m.tags)]
                state.next_offset = next_offset
                state.buffered += len(messages)
                self._buffer.put_nowait((state, epoch, messages, next_offset))
            elif code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                state.next_offset = next_offset
            elif code == ResponseCode.PULL_OFFSET_MOVED:
                log.warning("offset of %s moved from %d to %d", mq, offset, next_offset)
                state.next_offset = next_offset
                state.consumed = next_offset
            else:
                log.warning("pull from %s refused: %s (code %d); retrying in 3 s", mq,
                            response.remark, code)
                await asyncio.sleep(3)

    # ------------------------------------------------------------------ polling
    async def poll(self, timeout: float = 5.0) -> list[ReceivedMessage]:
        """Messages that arrived, waiting up to ``timeout`` seconds for the first ones.

        Raises NameServerError when none came and the consumer has no queue to read because
        no NameServer answered (an empty list would look like an empty topic)."""
        if not self.running or self._buffer is None:
            raise ClientError("the consumer is not started")
        out: list[ReceivedMessage] = []
        deadline = time.monotonic() + timeout
        while not out:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._check_namesrv()
                return out
            try:
                # Not wait_for: on Python 3.11 it can take an item and still time out,
                # losing it; asyncio.timeout cancels the get cleanly.
                async with asyncio.timeout(remaining):
                    item = await self._buffer.get()
            except TimeoutError:
                self._check_namesrv()
                return out
            while item is not None:
                self._take(item, out)
                if len(out) >= self.max_poll_records or self._buffer.empty():
                    break
                item = self._buffer.get_nowait()
            if item is None:  # shut down meanwhile; leave the mark for other waiters
                self._buffer.put_nowait(None)
                return out
        return out

    async def __aiter__(self) -> AsyncGenerator[ReceivedMessage, None]:
        """``async for message in consumer``: the messages one at a time as they arrive,
        until the consumer is shut down.

        A message counts as consumed (its position goes to the offset store, committed with
        ``auto_commit``) once the loop asks for the next one. A loop left on ``break`` or an
        exception has not consumed the message it was on: that one and the rest of its batch
        come again, here (the queue is sought back when the iteration is closed) or, after a
        shutdown, to the group's next consumer."""
        if not self.running or self._buffer is None:
            raise ClientError("the consumer is not started")
        buffer = self._buffer
        while self.running:
            item = await buffer.get()
            if item is None:  # shut down
                buffer.put_nowait(None)
                return
            state, epoch, messages, next_offset = item
            state.buffered -= len(messages)
            handed: int | None = None  # offset of the message out in the loop's hands
            try:
                for message in messages:
                    if not self._current(state, epoch):
                        break  # sought elsewhere or no longer ours
                    handed = message.queue_offset
                    yield message
                    handed = None
                    if self._current(state, epoch):
                        self._consumed(state, message.queue_offset + 1)
                if self._current(state, epoch):
                    # Past the batch, with messages the tag filter dropped.
                    self._consumed(state, next_offset)
            finally:
                if handed is not None and self.running and self._current(state, epoch):
                    self.seek(state.mq, handed)

    def _current(self, state: _QueueState, epoch: int) -> bool:
        """Whether a batch pulled at ``epoch`` is still the queue's to hand out (not sought
        elsewhere since, and the queue still ours)."""
        return epoch == state.epoch and self.owned.get(state.mq) is state

    def _consumed(self, state: _QueueState, offset: int) -> None:
        state.consumed = offset
        if self.auto_commit:
            self.offset_store.update(state.mq, offset)

    def _take(self, item: _Batch, out: list[ReceivedMessage]) -> None:
        state, epoch, messages, next_offset = item
        state.buffered -= len(messages)
        if not self._current(state, epoch):
            return  # sought elsewhere or no longer ours
        out.extend(messages)
        # Past the batch, including messages the tag filter dropped.
        self._consumed(state, next_offset)

    # ------------------------------------------------------------------ positions
    def assignment(self) -> list[MessageQueue]:
        return sorted(self.owned)

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume ``mq`` from ``offset`` next."""
        state = self.owned.get(mq)
        if state is None:
            raise ClientError(f"{mq} is not assigned to this consumer")
        state.epoch += 1
        state.next_offset = state.consumed = offset
        self.offset_store.update(mq, offset)
        if state.task is not None:
            state.task.cancel()
            state.task = asyncio.get_running_loop().create_task(self._pull_loop(state))

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Seek the owned queues of ``topic`` in ``offsets`` there and commit the positions
        (RESET_CONSUMER_CLIENT_OFFSET, after an admin reset the group's offsets); messages
        fetched but not polled yet are dropped."""
        async with self._queues_lock:
            moved = [mq for mq in sorted(offsets)
                     if mq.topic == topic and mq in self.owned and self.running]
            for mq in moved:
                self.seek(mq, offsets[mq])
                log.info("group %s polls %s from offset %d after a reset", self.group, mq,
                         offsets[mq])
            await self.offset_store.persist(moved)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        self.seek(mq, await self._offset_query(RequestCode.GET_MIN_OFFSET, mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        self.seek(mq, await self._offset_query(RequestCode.GET_MAX_OFFSET, mq))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self._offset_query(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq,
                                        timestamp=timestamp_ms)

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            if mq in self.owned:
                self.owned[mq].paused = True

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        for mq in queues:
            if mq in self.owned:
                self.owned[mq].paused = False

    def _sync_store(self) -> None:
        for mq, state in self.owned.items():
            self.offset_store.update(mq, state.consumed)

    async def commit(self) -> None:
        """Commit the position after the last polled message of every queue, now."""
        self._sync_store()
        await self.offset_store.persist(list(self.owned))

    async def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq`` on the broker; None when there is none (or
        the broker is not in the topic's route). A broker that cannot be reached raises."""
        try:
            response = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": self.group,
                                                    "topic": mq.topic, "queueId": mq.queue_id}),
                3, mq.topic, master_only=False)
        except RemotingError:
            raise
        except ClientError:
            return None
        if response.code == ResponseCode.SUCCESS:
            return int(response.ext_fields.get("offset", "0"))
        return None
