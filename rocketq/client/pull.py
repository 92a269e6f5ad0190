"""The pull consumer (asyncio core), like RocketMQ's DefaultLitePullConsumer.

Either ``subscribe`` (the group shares the queues, rebalanced as members come and go) or
``assign`` queues yourself; then ``poll`` returns messages as they arrive. Background tasks
long-poll each queue and keep a bounded buffer, so ``poll`` rarely waits for the network.
Offsets are the ones after the last polled message of each queue, committed every
``auto_commit_interval`` seconds or by ``commit()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Iterable
from typing import Any

from ..acl import Credentials
from ..protocol import PullSysFlag, RemotingCommand, RequestCode, ResponseCode
from .allocate import AllocateStrategy
from .consumer import GroupConsumer
from .errors import ClientError
from .instance import ClientInstance
from .message import MessageQueue, ReceivedMessage, pulled_messages

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
        self._buffer: asyncio.Queue[tuple[_QueueState, int, list[ReceivedMessage], int]] | None \
            = None
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
        if self.running:
            return
        if not self.subscriptions:
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
        await self._leave_group()

    async def __aenter__(self) -> AsyncPullConsumer:
        """The consumer, not started yet: subscribe or assign, then ``await start()``."""
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
        """Messages that arrived, waiting up to ``timeout`` seconds for the first ones."""
        if not self.running or self._buffer is None:
            raise ClientError("the consumer is not started")
        out: list[ReceivedMessage] = []
        deadline = time.monotonic() + timeout
        while not out:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            try:
                # Not wait_for: on Python 3.11 it can take an item and still time out,
                # losing it; asyncio.timeout cancels the get cleanly.
                async with asyncio.timeout(remaining):
                    item = await self._buffer.get()
            except TimeoutError:
                return out
            self._take(item, out)
            while len(out) < self.max_poll_records and not self._buffer.empty():
                self._take(self._buffer.get_nowait(), out)
        return out

    def _take(self, item: tuple[_QueueState, int, list[ReceivedMessage], int],
              out: list[ReceivedMessage]) -> None:
        state, epoch, messages, next_offset = item
        state.buffered -= len(messages)
        if epoch != state.epoch or self.owned.get(state.mq) is not state:
            return  # sought elsewhere or no longer ours
        out.extend(messages)
        # Past the batch, including messages the tag filter dropped.
        state.consumed = next_offset
        if self.auto_commit:
            self.offset_store.update(state.mq, state.consumed)

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
        """The group's committed offset of ``mq`` on the broker."""
        with contextlib.suppress(ClientError):
            response = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": self.group,
                                                    "topic": mq.topic, "queueId": mq.queue_id}),
                3, mq.topic, master_only=False)
            if response.code == ResponseCode.SUCCESS:
                return int(response.ext_fields.get("offset", "0"))
        return None
