"""The push consumer (asyncio core): rebalance, long-polling pulls, a bounded pool of
listener threads, offsets.

Push is a loop of long-polled pulls, one per owned queue (RocketMQ's PullMessageService);
messages wait in the queue's ProcessQueue until the listener has consumed them, and the
offset committed for a queue is the smallest one still being consumed, so a crash re-delivers
rather than loses. Flow control pauses a queue's pulls while it holds too many messages.

AsyncPushConsumer wires the parts: the group consumer allocates queues among the members,
``rebalance.PushRebalance`` starts and stops work on the queues gained and lost (with the
orderly consumers' broker locks), ``pull_service.PullService`` feeds each queue's
``process_queue.ProcessQueue``, and a ``consume_service`` runs the listener and commits.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from ..acl import Credentials
from .allocate import AllocateStrategy
from .consume_service import (
    ConcurrentConsumeService,
    ConsumeResult,
    ConsumeService,
    ConsumeThreadPool,
    Listener,
    MessageBack,
    OrderlyConsumeService,
)
from .consumer import GroupConsumer
from .errors import ClientError, InvalidArgumentError
from .instance import ClientInstance
from .message import MessageQueue
from .process_queue import ProcessQueue
from .pull_service import PullService
from .rebalance import PushRebalance, QueueLocker

__all__ = ["AsyncPushConsumer", "ConsumeResult", "Listener", "ProcessQueue"]

log = logging.getLogger("rocketq.client")


class AsyncPushConsumer(GroupConsumer):
    """Consumes subscribed topics, calling the registered listener with each message."""

    def __init__(self, group: str, namesrv: str, *, model: str = "clustering",
                 from_where: str = "last", consume_timestamp: int | None = None,
                 allocate: AllocateStrategy | str = "averagely",
                 consume_thread_min: int = 20, consume_thread_max: int = 20,
                 pull_batch_size: int = 32, consume_message_batch_max_size: int = 1,
                 pull_threshold_for_queue: int = 1000,
                 pull_threshold_size_for_queue: int = 100 * 1024 * 1024,
                 max_reconsume_times: int = 16, suspend_timeout: float = 15.0,
                 orderly: bool = False, suspend_current_queue_time: float = 1.0,
                 rebalance_interval: float = 20.0, persist_interval: float = 5.0,
                 await_termination_when_shutdown: float = 10.0,
                 offset_store_dir: str | None = None,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None,
                 instance: ClientInstance | None = None) -> None:
        super().__init__(group, namesrv, model=model, from_where=from_where,
                         consume_timestamp=consume_timestamp, allocate=allocate,
                         rebalance_interval=rebalance_interval,
                         persist_interval=persist_interval, offset_store_dir=offset_store_dir,
                         instance=instance,
                         credentials=credentials, tls=tls)
        if consume_thread_min > consume_thread_max:
            raise InvalidArgumentError(
                "consume_thread_min is larger than consume_thread_max")
        self.consume_thread_min = consume_thread_min
        self.consume_thread_max = consume_thread_max
        self.pull_batch_size = pull_batch_size
        self.batch_size = consume_message_batch_max_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.max_reconsume_times = max_reconsume_times
        self.suspend_timeout = suspend_timeout
        self.orderly = orderly
        self.suspend_current_queue_time = suspend_current_queue_time
        #: How long a shutdown waits for the messages the listener is consuming (RocketMQ's
        #: awaitTerminationMillisWhenShutdown, in seconds; RocketMQ's default is 0).
        self.await_termination_when_shutdown = await_termination_when_shutdown
        self.listener: Listener | None = None
        self.executor: ConsumeThreadPool | None = None
        #: Added to the shutdown's "waiting" warning (the synchronous consumer names Ctrl-C).
        self._wait_hint = ""
        self._back = MessageBack(self.instance, group, max_reconsume_times)
        self._consume: ConsumeService | None = None
        self._pulls: PullService | None = None
        self._rebalance: PushRebalance | None = None

    @property
    def process_queues(self) -> dict[MessageQueue, ProcessQueue]:
        return self.owned

    @property
    def consumed_count(self) -> int:
        """Messages consumed since the consumer started."""
        return self._consume.consumed_count if self._consume is not None else 0

    # ------------------------------------------------------------------ set-up
    def register(self, listener: Listener) -> None:
        """Set the listener: called with a list of messages (``consume_message_batch_max_size``
        at most); returns ConsumeResult.SUCCESS (or None) to acknowledge them, or
        RECONSUME_LATER / raises to have them delivered again later. Any other answer
        (``False``, ``True``...) is taken as a failure and logged: the messages come again.
        A coroutine function runs on the event loop, anything else on the consume thread
        pool. Registered after start (in ``async with``), it joins the group at once and gets
        every message pulled from then on; nothing is pulled before a listener exists."""
        self.listener = listener
        if self._consume is not None:
            self._consume.listener = listener
        self._changed()

    def _ready(self) -> bool:
        return self.listener is not None

    def _wire(self, listener: Listener | None) -> PushRebalance:
        """The consume service, the pull service and the rebalance of one run."""
        consume: ConsumeService
        if self.orderly:
            consume = OrderlyConsumeService(
                listener, self.executor, self.offset_store, self._back, group=self.group,
                batch_size=self.batch_size, needs_lock=self._locking(),
                max_reconsume_times=self.max_reconsume_times,
                suspend_time=self.suspend_current_queue_time)
        else:
            consume = ConcurrentConsumeService(
                listener, self.executor, self.offset_store, self._back, group=self.group,
                batch_size=self.batch_size, broadcasting=self.model == "broadcasting")
        if self._consume is not None:  # started again: keep counting
            consume.consumed_count = self._consume.consumed_count
        pulls = PullService(
            self._pull, self.offset_store, self._all_subscriptions, consume.submit,
            commit_offsets=self.model == "clustering", pull_batch_size=self.pull_batch_size,
            suspend_timeout=self.suspend_timeout, threshold_count=self.pull_threshold_for_queue,
            threshold_bytes=self.pull_threshold_size_for_queue)
        locker = QueueLocker(self.instance, self.group) if self._locking() else None
        self._consume, self._pulls = consume, pulls
        return PushRebalance(self.owned, pulls, consume, self.offset_store, self._start_offset,
                             locker, group=self.group)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start consuming; subscribe and register a listener first. (``async with`` starts
        the consumer on entry and lets them come after.) Starting again does nothing."""
        await self._start(require_setup=True)

    async def _start(self, require_setup: bool) -> None:
        if self.running:
            return
        if require_setup and self.listener is None:
            raise ClientError("register a listener before starting the consumer")
        if require_setup and not self.subscriptions:
            raise ClientError("subscribe to a topic before starting the consumer")
        self.executor = ConsumeThreadPool(self.consume_thread_max,
                                          f"rocketq-consume-{self.group}")
        self._rebalance = self._wire(self.listener)
        await self._start_group()
        if self._locking():
            self._tasks.append(asyncio.get_running_loop().create_task(
                self._rebalance.relock_loop(min(20.0, self.rebalance_interval))))

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop pulling and stop handing pulled messages to the listener, let the messages it
        is consuming finish (up to ``timeout`` seconds, by default
        ``await_termination_when_shutdown``; ``stop_waiting`` ends the wait sooner), commit
        the offsets of what was consumed, and leave the group.

        Messages pulled but not started, and those still in the listener when the wait ends,
        are not committed: the group gets them again."""
        if not self.running:
            return
        if timeout is None:
            timeout = self.await_termination_when_shutdown
        await self._stop_loops()
        assert self._pulls is not None and self._consume is not None
        assert self._rebalance is not None
        self._pulls.close()
        self._consume.close()
        busy = self._consume.in_flight
        if busy:
            log.warning("consumer group %s is stopping: waiting up to %.1f s for %d message(s) "
                        "being consumed%s", self.group, timeout, busy, self._wait_hint)
        if not await self._consume.wait(timeout):
            log.warning("consumer group %s stops with %d message(s) still being consumed: "
                        "their offsets are not committed, the group gets them again",
                        self.group, self._consume.in_flight)
        await self._rebalance.drop_all()
        await self._leave_group()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    def stop_waiting(self) -> None:
        """End a shutdown's wait for the listener now (a second Ctrl-C): the shutdown goes on
        to commit what was consumed; messages still in the listener come again."""
        if self._consume is not None:
            self._consume.abandon()

    async def __aenter__(self) -> AsyncPushConsumer:
        """The consumer, started: subscribe and register inside (each takes effect at
        once; an ``await start()`` there does nothing). Leaving shuts it down, committing
        the offsets of what was consumed."""
        await self._start(require_setup=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _locking(self) -> bool:
        """Whether queues are locked on their brokers (orderly clustering consumers)."""
        return self.orderly and self.model == "clustering"

    # ------------------------------------------------------------------ queues
    async def _update_queues_locked(self, topic: str, mine: set[MessageQueue]) -> None:
        assert self._rebalance is not None
        await self._rebalance.update(topic, mine)

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Consume the owned queues of ``topic`` in ``offsets`` from there, as RocketMQ's
        MQClientInstance.resetOffset does: each queue's ProcessQueue is dropped with the
        messages it holds (a listener still busy with one of them has its result ignored),
        the new offsets go to the offset store and are committed, and a new ProcessQueue
        pulls from the new offset."""
        async with self._queues_lock:
            if self._rebalance is None:
                return
            await self._rebalance.reset(topic, offsets if self.running else {})
