"""Running a push consumer's listener on pulled messages (RocketMQ's
ConsumeMessageConcurrentlyService and ConsumeMessageOrderlyService).

Both call the listener (a coroutine function on the event loop, anything else on the consume
thread pool) and move the queue's commit offset in the offset store as messages are consumed.
The concurrent service consumes batches of a queue side by side and hands failed messages back
to the broker for a later retry; the orderly one consumes one batch of a queue at a time, in
offset order, retrying a failed batch locally before anything after it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import inspect
import logging
import queue
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..protocol import Property, RemotingCommand, RequestCode, ResponseCode, retry_topic
from ..remoting import RemotingError
from .errors import ClientError
from .instance import ClientInstance
from .message import Message, ReceivedMessage
from .offset_store import OffsetStore
from .process_queue import ProcessQueue

log = logging.getLogger("rocketq.client")


class ConsumeResult(enum.Enum):
    """What a listener says of the messages it was given."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    #: Orderly consumers: retry the same messages of this queue after a pause, in order.
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


Listener = Callable[[list[ReceivedMessage]],
                    "ConsumeResult | None | Awaitable[ConsumeResult | None]"]


class MessageBack:
    """Hands messages a listener failed back for a later retry (RocketMQ's sendMessageBack):
    CONSUMER_SEND_MSG_BACK to the broker that stored them, or a resend to the group's retry
    topic when that fails."""

    def __init__(self, instance: ClientInstance, group: str, max_reconsume_times: int) -> None:
        self.instance = instance
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        self._producer: Any = None

    async def send_back(self, message: ReceivedMessage) -> bool:
        """Hand a failed message back to the broker for a later retry (CONSUMER_SEND_MSG_BACK);
        if the broker cannot, resend it to the retry topic ourselves, as RocketMQ's client
        does."""
        cmd = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, {
            "offset": message.commitlog_offset, "group": self.group, "delayLevel": 0,
            "originMsgId": message.msg_id, "originTopic": message.topic, "unitMode": False,
            "maxReconsumeTimes": self.max_reconsume_times, "bname": message.broker_name})
        try:
            response = await self.instance.invoke_broker(message.broker_name, cmd, 5,
                                                         message.topic)
            if response.code == ResponseCode.SUCCESS:
                return True
        except (ClientError, RemotingError, OSError) as exc:
            log.info("send back of %s failed: %s", message.msg_id, exc)
        return await self.resend_to_retry_topic(message)

    async def resend_to_retry_topic(self, message: ReceivedMessage) -> bool:
        """Send a copy of ``message`` to the group's retry topic, one reconsume time later
        (past the maximum, the broker moves it to the dead-letter queue)."""
        from .producer import AsyncProducer

        retry = Message(retry_topic(self.group), message.body)
        retry.properties.update(message.properties)
        retry.properties.setdefault(Property.RETRY_TOPIC, message.topic)
        retry.properties[Property.RECONSUME_TIME] = str(message.reconsume_times + 1)
        retry.properties[Property.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        retry.properties[Property.DELAY] = str(3 + message.reconsume_times)
        retry.properties.pop(Property.UNIQ_KEY, None)
        retry.properties[Property.ORIGIN_MESSAGE_ID] = message.msg_id
        if self._producer is None:
            self._producer = AsyncProducer("CLIENT_INNER_PRODUCER", "", instance=self.instance)
        try:
            await self._producer.send(retry)
            return True
        except (ClientError, RemotingError, OSError) as exc:
            log.warning("could not hand back message %s for a retry: %s", message.msg_id, exc)
            return False


class ConsumeThreadPool(concurrent.futures.Executor):
    """A push consumer's listener threads (RocketMQ's consumeExecutor): up to ``size`` daemon
    threads, started as work comes.

    Daemon threads, unlike ThreadPoolExecutor's (which the interpreter joins at exit): a
    listener still running when a shutdown's bounded wait ends, or after a second Ctrl-C,
    must not keep the process alive. Its messages were not committed, so the group gets them
    again."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
                thread = threading.Thread(target=self._run, daemon=True,
                                          name=f"{self._name}_{len(self._threads)}")
                thread.start()
                self._threads.append(thread)
            return future

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._threads:
                self._work.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


class _NotStarted(Exception):
    """The consumer was shutting down before the listener got the batch: it stays pulled but
    not consumed (held, so the committed offset stays below it)."""


def _name(listener: Any) -> str:
    """How a log message names ``listener``: its qualified name, or its class's."""
    name = getattr(listener, "__qualname__", None) or type(listener).__qualname__
    module = getattr(listener, "__module__", None)
    return f"{module}.{name}" if module else name


class ConsumeService:
    """What both consume services share: calling the listener, committing consumed offsets,
    and the consume tasks in flight."""

    #: What a listener that raised, or answered neither a ConsumeResult nor None, is taken
    #: to have answered.
    failure_result = ConsumeResult.RECONSUME_LATER

    def __init__(self, listener: Listener | None, executor: concurrent.futures.Executor | None,
                 offset_store: OffsetStore, back: MessageBack, *, group: str,
                 batch_size: int) -> None:
        self.listener = listener
        self.executor = executor
        self.offset_store = offset_store
        self.back = back
        self.group = group
        self.batch_size = batch_size
        self.running = True
        #: Messages consumed so far (failed ones handed back count as consumed).
        self.consumed_count = 0
        self._consuming: set[asyncio.Task[Any]] = set()
        #: Messages inside the listener now; guarded by ``_lock`` (listener threads change it).
        self._busy = 0
        self._lock = threading.Lock()
        self._abandoned = asyncio.Event()

    def submit(self, pq: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        """Consume ``messages``, just put in ``pq``."""
        raise NotImplementedError

    @property
    def in_flight(self) -> int:
        """Messages the listener is consuming now."""
        with self._lock:
            return self._busy

    def close(self) -> None:
        """Hand the listener no more batches, even of messages pulled already (they stay held
        and are not committed); those in the listener finish (see ``wait``)."""
        with self._lock:
            self.running = False

    def abandon(self) -> None:
        """Stop a ``wait`` now: what the listener has not finished is not committed."""
        self._abandoned.set()

    async def wait(self, timeout: float) -> bool:
        """Let the batches in flight finish, up to ``timeout`` seconds or until ``abandon``;
        whether they all did."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending = [t for t in self._consuming if not t.done()]
        stop = loop.create_task(self._abandoned.wait())
        try:
            while pending and not self._abandoned.is_set():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                await asyncio.wait([*pending, stop], timeout=remaining,
                                   return_when=asyncio.FIRST_COMPLETED)
                pending = [t for t in pending if not t.done()]
        finally:
            stop.cancel()
        return not pending

    async def wait_queue(self, pq: ProcessQueue, timeout: float = 10) -> None:
        """Let work that must not overlap a new owner of ``pq``'s queue finish."""

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._consuming.add(task)
        task.add_done_callback(self._consuming.discard)
        return task

    def _committed(self, pq: ProcessQueue, offset: int, count: int) -> None:
        self.consumed_count += count
        if offset >= 0:
            self.offset_store.update(pq.mq, offset, increase_only=True)

    def _begin(self, batch: list[ReceivedMessage]) -> None:
        """The listener gets ``batch`` now, unless the consumer is shutting down."""
        with self._lock:
            if not self.running:
                raise _NotStarted
            self._busy += len(batch)

    def _end(self, batch: list[ReceivedMessage]) -> None:
        with self._lock:
            self._busy -= len(batch)

    def _run_listener(self, listener: Listener, batch: list[ReceivedMessage]) -> Any:
        """On a listener thread: the listener's answer on ``batch``. A batch that waited for
        a thread while the consumer began shutting down is not started."""
        self._begin(batch)
        try:
            return listener(batch)
        finally:
            self._end(batch)

    async def call_listener(self, batch: list[ReceivedMessage]) -> ConsumeResult | None:
        """The listener's answer on ``batch``; ``failure_result`` when it raised or returned
        something that is neither a ConsumeResult nor None; ``_NotStarted`` when the consumer
        began shutting down before the listener got it.

        Any other answer (``False``, ``True``, a string...) is a failure rather than an
        acknowledgement: taking it for success would lose messages a listener meant to
        refuse, while a retry of a batch it meant to accept only repeats it."""
        listener = self.listener
        if listener is None:  # queues are taken once there is a listener; if it was unset
            return self.failure_result
        try:
            if inspect.iscoroutinefunction(listener):
                self._begin(batch)
                try:
                    result = await listener(batch)
                finally:
                    self._end(batch)
            else:
                result = await asyncio.get_running_loop().run_in_executor(
                    self.executor, self._run_listener, listener, batch)
                if inspect.isawaitable(result):
                    result = await result
        except (asyncio.CancelledError, _NotStarted):
            raise
        except Exception:
            log.exception("listener of group %s failed on %d message(s)", self.group,
                          len(batch))
            return self.failure_result
        if result is None or isinstance(result, ConsumeResult):
            return result
        log.error("listener %s of group %s returned %r, which is neither a ConsumeResult nor "
                  "None: its %d message(s) will be delivered again. Return "
                  "ConsumeResult.SUCCESS or None to acknowledge messages, "
                  "ConsumeResult.RECONSUME_LATER or raise to have them retried",
                  _name(listener), self.group, result, len(batch))
        return self.failure_result


class ConcurrentConsumeService(ConsumeService):
    """Batches of a queue consumed side by side; failed messages go back to the broker."""

    def __init__(self, listener: Listener | None, executor: concurrent.futures.Executor | None,
                 offset_store: OffsetStore, back: MessageBack, *, group: str,
                 batch_size: int, broadcasting: bool) -> None:
        super().__init__(listener, executor, offset_store, back, group=group,
                         batch_size=batch_size)
        #: Broadcasting consumers drop failed messages: there is no group retry topic.
        self.broadcasting = broadcasting

    def submit(self, pq: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        if not self.running:
            return  # shutting down: they stay held, and are not committed
        for i in range(0, len(messages), self.batch_size):
            self._spawn(self._consume(pq, messages[i:i + self.batch_size]))

    async def _consume(self, pq: ProcessQueue, batch: list[ReceivedMessage]) -> None:
        try:
            result = await self.call_listener(batch)
        except _NotStarted:
            return
        if result is ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            result = ConsumeResult.RECONSUME_LATER  # only orderly consumers suspend a queue
        if pq.dropped:
            return  # another member owns the queue now; it consumes from the committed offset
        done = batch
        if result is ConsumeResult.RECONSUME_LATER:
            if self.broadcasting:
                log.warning("broadcasting consumer drops %d message(s) it failed", len(batch))
            else:
                failed = [m for m in batch if not await self.back.send_back(m)]
                if failed:
                    done = [m for m in batch if m not in failed]
                    # Still held by pq, so the commit offset stays below them.
                    asyncio.get_running_loop().call_later(5, self.submit, pq, failed)
        self._committed(pq, pq.remove(done), len(done))


class OrderlyConsumeService(ConsumeService):
    """One batch of a queue at a time, in offset order, while this member holds the queue's
    lock; a failed batch is retried after a pause until it succeeds or has been tried
    ``max_reconsume_times`` times, then it goes to the retry topic (and on to the dead-letter
    queue)."""

    failure_result = ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT

    def __init__(self, listener: Listener | None, executor: concurrent.futures.Executor | None,
                 offset_store: OffsetStore, back: MessageBack, *, group: str,
                 batch_size: int, needs_lock: bool, max_reconsume_times: int,
                 suspend_time: float) -> None:
        super().__init__(listener, executor, offset_store, back, group=group,
                         batch_size=batch_size)
        #: Clustering consumers consume a queue only while they hold its broker lock.
        self.needs_lock = needs_lock
        self.max_reconsume_times = max_reconsume_times
        self.suspend_time = suspend_time
        self._queue_tasks: dict[ProcessQueue, asyncio.Task[None]] = {}

    def submit(self, pq: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        # One consumer per queue at a time, taking messages in offset order.
        task = self._queue_tasks.get(pq)
        if task is None or task.done():
            task = self._spawn(self._consume(pq))
            self._queue_tasks[pq] = task
            task.add_done_callback(lambda _: self._forget(pq, task))

    def _forget(self, pq: ProcessQueue, task: asyncio.Task[None]) -> None:
        if self._queue_tasks.get(pq) is task:
            del self._queue_tasks[pq]

    async def wait_queue(self, pq: ProcessQueue, timeout: float = 10) -> None:
        """Let the batch being consumed of ``pq`` finish, so that messages of the queue are
        never consumed by two members (or from two offsets) at once."""
        task = self._queue_tasks.get(pq)
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=timeout)

    async def _consume(self, pq: ProcessQueue) -> None:
        while self.running and not pq.dropped and pq.messages:
            if self.needs_lock and not pq.locked:
                await asyncio.sleep(0.1)  # the lock is being renewed (or was lost)
                continue
            batch = pq.take(self.batch_size)
            try:
                result = await self.call_listener(batch)
            except _NotStarted:
                return
            if pq.dropped:
                return
            if result in (ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT,
                          ConsumeResult.RECONSUME_LATER):
                exhausted = [m for m in batch if m.reconsume_times >= self.max_reconsume_times]
                if not exhausted:
                    for m in batch:
                        m.reconsume_times += 1
                    await asyncio.sleep(self.suspend_time)
                    continue  # the same messages again, nothing after them first
                # Tried too often: hand them to the dead-letter queue and move on.
                if not all([await self.back.resend_to_retry_topic(m) for m in batch]):
                    await asyncio.sleep(self.suspend_time)
                    continue
            self._committed(pq, pq.commit(), len(batch))
