"""The push consumer (asyncio core): rebalance, long-polling pulls, a bounded pool of
listener threads, offsets.

Push is a loop of long-polled pulls, one per owned queue (RocketMQ's PullMessageService);
messages wait in the queue's ProcessQueue until the listener has consumed them, and the
offset committed for a queue is the smallest one still being consumed, so a crash re-delivers
rather than loses. Flow control pauses a queue's pulls while it holds too many messages.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.message import Property, decode_records
from ..protocol.topic import retry_topic
from ..remoting import RemotingError
from .allocate import AllocateStrategy
from .consumer import GroupConsumer
from .errors import ClientError
from .instance import ClientInstance
from .message import Message, MessageQueue, ReceivedMessage

log = logging.getLogger("rocketq.client")

PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4


class ConsumeResult(enum.Enum):
    """What a listener says of the messages it was given."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    #: Orderly consumers: retry the same messages of this queue after a pause, in order.
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


Listener = Callable[[list[ReceivedMessage]],
                    "ConsumeResult | None | Awaitable[ConsumeResult | None]"]



class ProcessQueue:
    """Messages of one queue pulled but not yet consumed, in offset order."""

    def __init__(self, mq: MessageQueue, next_offset: int) -> None:
        self.mq = mq
        self.next_offset = next_offset
        self.messages: dict[int, ReceivedMessage] = {}
        self.cached_bytes = 0
        self.max_offset = next_offset - 1
        self.dropped = False
        self.task: asyncio.Task[None] | None = None
        #: Orderly consumption: whether the broker lock is held, and the one consume task.
        self.locked = False
        self.consume_task: asyncio.Task[None] | None = None
        #: Wall-clock ms of the last pull answer and of the last consumed batch (running info).
        self.last_pull_timestamp = 0
        self.last_consume_timestamp = 0

    def put(self, messages: Sequence[ReceivedMessage]) -> None:
        for m in messages:
            if m.queue_offset not in self.messages:
                self.messages[m.queue_offset] = m
                self.cached_bytes += len(m.body)
            if m.queue_offset > self.max_offset:
                self.max_offset = m.queue_offset

    def remove(self, messages: Sequence[ReceivedMessage]) -> int:
        """Forget consumed messages; return the offset that can now be committed."""
        self.last_consume_timestamp = int(time.time() * 1000)
        for m in messages:
            if self.messages.pop(m.queue_offset, None) is not None:
                self.cached_bytes -= len(m.body)
        if self.messages:
            return next(iter(self.messages))
        return self.max_offset + 1

    def skip_to(self, offset: int) -> None:
        """Nothing was consumable up to ``offset`` (filtered out): move the commit point."""
        if not self.messages and offset - 1 > self.max_offset:
            self.max_offset = offset - 1

    @property
    def count(self) -> int:
        return len(self.messages)


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
                 offset_store_dir: str | None = None,
                 instance: ClientInstance | None = None) -> None:
        super().__init__(group, namesrv, model=model, from_where=from_where,
                         consume_timestamp=consume_timestamp, allocate=allocate,
                         rebalance_interval=rebalance_interval,
                         persist_interval=persist_interval, offset_store_dir=offset_store_dir,
                         instance=instance)
        if consume_thread_min > consume_thread_max:
            raise ValueError("consume_thread_min is larger than consume_thread_max")
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
        self.listener: Listener | None = None
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._consuming: set[asyncio.Task[Any]] = set()
        self.consumed_count = 0

    @property
    def process_queues(self) -> dict[MessageQueue, ProcessQueue]:
        return self.owned

    # ------------------------------------------------------------------ set-up
    def register(self, listener: Listener) -> None:
        """Set the listener: called with a list of messages (``consume_message_batch_max_size``
        at most); returns ConsumeResult.SUCCESS (or None), or RECONSUME_LATER / raises to have
        them delivered again later. A coroutine function runs on the event loop, anything
        else on the consume thread pool."""
        self.listener = listener

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.running:
            return
        if self.listener is None:
            raise ClientError("register a listener before starting the consumer")
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before starting the consumer")
        self.executor = concurrent.futures.ThreadPoolExecutor(
            self.consume_thread_max, thread_name_prefix=f"rocketq-consume-{self.group}")
        await self._start_group()
        if self.orderly and self.model == "clustering":
            self._tasks.append(asyncio.get_running_loop().create_task(self._relock_loop()))

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop pulling, let in-flight listeners finish (up to ``timeout``), commit offsets,
        and leave the group."""
        if not self.running:
            return
        await self._stop_loops()
        for pq in self.owned.values():
            if pq.task is not None:
                pq.task.cancel()
        if self._consuming:
            await asyncio.wait(list(self._consuming), timeout=timeout)
        for pq in self.owned.values():
            pq.dropped = True
        if self._locking():
            # Commit first, then let the next owners lock the queues at once.
            await self.offset_store.persist(list(self.owned))
            await asyncio.gather(*(self._released(mq) for mq in self.owned))
        await self._leave_group()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> AsyncPushConsumer:
        """The consumer, not started yet: subscribe, register and ``await start()``."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def _queue_removed(self, mq: MessageQueue) -> None:
        pq = self.owned[mq]
        pq.dropped = True
        if pq.task is not None:
            pq.task.cancel()

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Consume the owned queues of ``topic`` in ``offsets`` from there, as RocketMQ's
        MQClientInstance.resetOffset does: each queue's ProcessQueue is dropped with the
        messages it holds (a listener still busy with one of them has its result ignored),
        the new offsets go to the offset store and are committed, and a new ProcessQueue
        pulls from the new offset."""
        async with self._queues_lock:
            dropped = []
            for mq, offset in sorted(offsets.items()):
                pq = self.owned.get(mq)
                if mq.topic != topic or pq is None or pq.dropped or not self.running:
                    continue
                pq.dropped = True
                if pq.task is not None:
                    pq.task.cancel()
                dropped.append((mq, pq, offset))
            for mq, pq, offset in dropped:
                if pq.consume_task is not None and not pq.consume_task.done():
                    # Orderly: the queue's messages stay in order across the reset.
                    await asyncio.wait([pq.consume_task], timeout=10)
                self.offset_store.update(mq, offset)
                fresh = self._queue_added(mq, offset)
                fresh.locked = pq.locked
                self.owned[mq] = fresh
                log.info("group %s consumes %s from offset %d after a reset", self.group, mq,
                         offset)
            await self.offset_store.persist([mq for mq, _, _ in dropped])

    # ------------------------------------------------------------------ orderly
    def _locking(self) -> bool:
        return self.orderly and self.model == "clustering"

    async def _lock(self, queues: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ on each broker: the queues this member now holds."""
        import orjson

        held: set[MessageQueue] = set()
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in queues:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, mqs in by_broker.items():
            body = orjson.dumps({"consumerGroup": self.group,
                                 "clientId": self.instance.client_id, "onlyThisBroker": False,
                                 "mqSet": [mq.to_json() for mq in mqs]})
            try:
                response = await self.instance.invoke_broker(broker, RemotingCommand.request(
                    RequestCode.LOCK_BATCH_MQ, None, body), 3, mqs[0].topic)
            except (ClientError, RemotingError, OSError) as exc:
                log.info("locking queues on %s failed: %s", broker, exc)
                continue
            if response.code == ResponseCode.SUCCESS:
                for q in orjson.loads(response.body).get("lockOKMQSet") or []:
                    held.add(MessageQueue(q["topic"], q["brokerName"], int(q["queueId"])))
        return held

    async def _may_take(self, mq: MessageQueue) -> bool:
        if not self._locking():
            return True
        return mq in await self._lock([mq])

    def _queue_added(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        pq = ProcessQueue(mq, offset)
        pq.locked = True  # _may_take locked it (or no lock is needed)
        pq.task = asyncio.get_running_loop().create_task(self._pull_loop(pq))
        return pq

    async def _finish(self, mq: MessageQueue, state: ProcessQueue) -> None:
        task = state.consume_task
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=10)

    async def _released(self, mq: MessageQueue) -> None:
        if not self._locking():
            return
        import orjson

        body = orjson.dumps({"consumerGroup": self.group, "clientId": self.instance.client_id,
                             "mqSet": [mq.to_json()]})
        try:
            await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
                RequestCode.UNLOCK_BATCH_MQ, None, body), 3, mq.topic)
        except (ClientError, RemotingError, OSError) as exc:
            log.info("unlocking %s failed: %s (the lock expires by itself)", mq, exc)

    async def _relock_loop(self) -> None:
        """Renew the locks of owned queues every 20 s (they expire after 60 s)."""
        while self.running:
            await asyncio.sleep(min(20.0, self.rebalance_interval))
            owned = list(self.owned)
            if not owned:
                continue
            held = await self._lock(owned)
            for mq in owned:
                pq = self.owned.get(mq)
                if pq is not None:
                    pq.locked = mq in held

    # ------------------------------------------------------------------ pulling
    async def _pull_loop(self, pq: ProcessQueue) -> None:
        mq = pq.mq
        subs = self._all_subscriptions()
        sub = subs.get(mq.topic)
        if sub is None:
            return
        clustering = self.model == "clustering"
        while self.running and not pq.dropped:
            if (pq.count >= self.pull_threshold_for_queue
                    or pq.cached_bytes >= self.pull_threshold_size_for_queue):
                await asyncio.sleep(0.05)  # flow control: let the listener catch up
                continue
            sysflag = PULL_SUSPEND | PULL_SUBSCRIPTION
            commit = self.offset_store.read_memory(mq) if clustering else None
            if commit is not None and commit > 0:
                sysflag |= PULL_COMMIT_OFFSET
            response = await self._pull(mq, pq.next_offset, sub, sysflag, commit or 0,
                                        self.pull_batch_size, self.suspend_timeout)
            if response is None:
                continue
            if pq.dropped:
                return
            pq.last_pull_timestamp = int(time.time() * 1000)
            code = response.code
            ext = response.ext_fields
            if code == ResponseCode.SUCCESS:
                next_offset = int(ext.get("nextBeginOffset", pq.next_offset))
                messages = [ReceivedMessage.from_record(r, mq.broker_name)
                            for r in decode_records(response.body)]
                if not sub.matches_all:
                    messages = [m for m in messages if sub.matches_tags(m.tags)]
                pq.next_offset = next_offset
                if messages:
                    pq.put(messages)
                    self._dispatch(pq, messages)
                else:
                    pq.skip_to(next_offset)
                    self._commit_if_idle(pq)
            elif code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                pq.next_offset = int(ext.get("nextBeginOffset", pq.next_offset))
                pq.skip_to(pq.next_offset)
                self._commit_if_idle(pq)
            elif code == ResponseCode.PULL_OFFSET_MOVED:
                moved = int(ext.get("nextBeginOffset", pq.next_offset))
                log.warning("offset of %s moved from %d to %d", mq, pq.next_offset, moved)
                pq.next_offset = moved
                pq.skip_to(moved)
                self.offset_store.update(mq, moved)
                await self.offset_store.persist([mq])
            else:
                log.warning("pull from %s refused: %s (code %d); retrying in 3 s", mq,
                            response.remark, code)
                await asyncio.sleep(3)

    def _commit_if_idle(self, pq: ProcessQueue) -> None:
        if not pq.messages:
            self.offset_store.update(pq.mq, pq.max_offset + 1, increase_only=True)

    # ------------------------------------------------------------------ consuming
    def _dispatch(self, pq: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        loop = asyncio.get_running_loop()
        if self.orderly:
            # One consumer per queue at a time, taking messages in offset order.
            if pq.consume_task is None or pq.consume_task.done():
                pq.consume_task = loop.create_task(self._consume_orderly(pq))
                self._consuming.add(pq.consume_task)
                pq.consume_task.add_done_callback(self._consuming.discard)
            return
        for i in range(0, len(messages), self.batch_size):
            task = loop.create_task(self._consume(pq, messages[i:i + self.batch_size]))
            self._consuming.add(task)
            task.add_done_callback(self._consuming.discard)

    async def _consume(self, pq: ProcessQueue, batch: list[ReceivedMessage]) -> None:
        result = await self._call_listener(batch)
        if result is ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            result = ConsumeResult.RECONSUME_LATER  # only orderly consumers suspend a queue
        if pq.dropped:
            return  # another member owns the queue now; it consumes from the committed offset
        done = batch
        if result is ConsumeResult.RECONSUME_LATER:
            if self.model == "broadcasting":
                log.warning("broadcasting consumer drops %d message(s) it failed", len(batch))
            else:
                failed = [m for m in batch if not await self._send_back(m)]
                if failed:
                    done = [m for m in batch if m not in failed]
                    asyncio.get_running_loop().call_later(5, self._dispatch, pq, failed)
        self.consumed_count += len(done)
        offset = pq.remove(done)
        if offset >= 0:
            self.offset_store.update(pq.mq, offset, increase_only=True)

    async def _call_listener(self, batch: list[ReceivedMessage]) -> ConsumeResult | None:
        listener = self.listener
        assert listener is not None
        try:
            if inspect.iscoroutinefunction(listener):
                return await listener(batch)
            result = await asyncio.get_running_loop().run_in_executor(self.executor, listener,
                                                                      batch)
            if inspect.isawaitable(result):
                result = await result
            return result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("listener of group %s failed on %d message(s)", self.group,
                          len(batch))
            return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT if self.orderly \
                else ConsumeResult.RECONSUME_LATER

    async def _consume_orderly(self, pq: ProcessQueue) -> None:
        while self.running and not pq.dropped and pq.messages:
            if self._locking() and not pq.locked:
                await asyncio.sleep(0.1)  # the lock is being renewed (or was lost)
                continue
            batch = [pq.messages[o] for o in itertools.islice(pq.messages, self.batch_size)]
            result = await self._call_listener(batch)
            if pq.dropped:
                return
            if result in (ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT,
                          ConsumeResult.RECONSUME_LATER):
                exhausted = [m for m in batch if m.reconsume_times >= self.max_reconsume_times]
                if not exhausted:
                    for m in batch:
                        m.reconsume_times += 1
                    await asyncio.sleep(self.suspend_current_queue_time)
                    continue  # the same messages again, nothing after them first
                # Tried too often: hand them to the dead-letter queue and move on.
                if not all([await self._resend_to_retry_topic(m) for m in batch]):
                    await asyncio.sleep(self.suspend_current_queue_time)
                    continue
            self.consumed_count += len(batch)
            offset = pq.remove(batch)
            if offset >= 0:
                self.offset_store.update(pq.mq, offset, increase_only=True)

    async def _send_back(self, message: ReceivedMessage) -> bool:
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
        return await self._resend_to_retry_topic(message)

    async def _resend_to_retry_topic(self, message: ReceivedMessage) -> bool:
        from .producer import AsyncProducer

        retry = Message(retry_topic(self.group), message.body)
        retry.properties.update(message.properties)
        retry.properties.setdefault(Property.RETRY_TOPIC, message.topic)
        retry.properties[Property.RECONSUME_TIME] = str(message.reconsume_times + 1)
        retry.properties[Property.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        retry.properties[Property.DELAY] = str(3 + message.reconsume_times)
        retry.properties.pop(Property.UNIQ_KEY, None)
        retry.properties[Property.ORIGIN_MESSAGE_ID] = message.msg_id
        producer = getattr(self, "_retry_producer", None)
        if producer is None:
            producer = self._retry_producer = AsyncProducer(
                "CLIENT_INNER_PRODUCER", "", instance=self.instance)
        try:
            await producer.send(retry)
            return True
        except (ClientError, RemotingError, OSError) as exc:
            log.warning("could not hand back message %s for a retry: %s", message.msg_id, exc)
            return False

