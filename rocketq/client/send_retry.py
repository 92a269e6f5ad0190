"""How a send reaches a broker (RocketMQ's DefaultMQProducerImpl.sendDefaultImpl and
MQFaultStrategy): the route, waited for while a failover leaves a broker group without a
master; the queue, round-robin over the route's writable queues, avoiding the broker that
failed last and, with ``latency_fault_tolerance``, brokers slow or failing lately; and the
retries, on another broker when there is one, never where a broker may already hold the
message.

``SendRetries`` is a part of ``producer.AsyncProducer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..protocol import ResponseCode
from ..remoting import ConnectFailedError, RemotingError
from .errors import BrokerError, ClientError, ClientTimeoutError, NoMasterError
from .instance import ClientInstance, TopicRoute
from .message import Message, MessageQueue, SendResult, SendStatus

log = logging.getLogger("rocketq.client")

#: Picks the queue of a send from the route's writable queues: ``(queues, message, arg)``.
Selector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

#: Refusals a send may pass on another attempt.
_RETRY_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_BUSY}
#: The longest pause between two looks at the route while a broker group has no master.
_NO_MASTER_PAUSE_MAX = 1.0
#: Failures after which no broker can hold the message: a refusal, a connection never made,
#: a group found without a master before anything was sent.
_NOT_SENT = (BrokerError, ConnectFailedError, NoMasterError)
#: Send latencies (ms), and how long (ms) a broker that answered that slowly is avoided.
_LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
_NOT_AVAILABLE = (0, 0, 30000, 60000, 120000, 180000, 600000)


class LatencyFaultTolerance:
    """Which brokers to avoid for a while after slow or failed sends."""

    def __init__(self) -> None:
        self.unavailable_until: dict[str, float] = {}

    def update(self, broker: str, latency_ms: float, isolation: bool) -> None:
        latency = 30000 if isolation else latency_ms
        duration = 0
        for limit, wait in zip(reversed(_LATENCY_MAX), reversed(_NOT_AVAILABLE), strict=True):
            if latency >= limit:
                duration = wait
                break
        self.unavailable_until[broker] = time.monotonic() + duration / 1000

    def available(self, broker: str) -> bool:
        return self.unavailable_until.get(broker, 0) <= time.monotonic()


class SendRetries:
    """Route, queue choice and retries: a part of :class:`producer.AsyncProducer`, whose
    settings (declared below) it reads and whose ``_send_to`` sends one attempt."""

    instance: ClientInstance
    default_topic_queue_nums: int
    retry_another_broker: bool
    fault: LatencyFaultTolerance | None
    _counters: dict[str, Iterator[int]]

    def _choose(self, queues: list[MessageQueue], last_broker: str | None) -> MessageQueue:
        if not queues:
            raise ClientError("no writable queue in the route")
        # One round-robin per topic (RocketMQ's TopicPublishInfo.sendWhichQueue): a shared
        # one, stepped by sends to other topics, would skip some queues of each for good.
        topic = queues[0].topic
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters[topic] = itertools.count()
        start = next(counter)
        n = len(queues)
        if self.fault is not None:
            for i in range(n):
                mq = queues[(start + i) % n]
                if self.fault.available(mq.broker_name) and mq.broker_name != last_broker:
                    return mq
        if last_broker is not None:
            for i in range(n):
                mq = queues[(start + i) % n]
                if mq.broker_name != last_broker:
                    return mq
        return queues[start % n]

    @staticmethod
    def _is_transient(exc: BrokerError) -> bool:
        """Whether a broker's refusal may pass on another attempt (busy, no route yet,
        no master), as opposed to a refusal of the request itself."""
        return exc.code in _RETRY_CODES

    async def _send_prepared(self, message: Message, body: bytes, sysflag: int, props: str,
                             queue: MessageQueue | None, selector: Selector | None, arg: Any,
                             timeout: float, retries: int, oneway: bool, *,
                             batch: bool = False, maybe_sent: bool = False) -> SendResult:
        deadline = time.monotonic() + timeout
        topic = message.topic
        last_broker: str | None = None
        last_error: Exception | None = None
        for attempt in range(retries + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if queue is not None:
                mq = queue
            else:
                # Waiting out a failover is for a message no broker may hold yet: after a
                # failure that left that open (a lost connection, no answer), a new master
                # may already have it, and a send waiting for it would store it twice.
                if last_error is not None and not isinstance(last_error, _NOT_SENT):
                    maybe_sent = True
                try:
                    route = await self._publish_route(topic, deadline, wait=not maybe_sent)
                except NoMasterError as exc:
                    if not maybe_sent:
                        raise
                    # Say what happened to the attempt that may have landed, not only that
                    # there is no master to send it again to.
                    if last_error is not None:
                        raise last_error from exc
                    raise NoMasterError(
                        exc.topic, exc.brokers,
                        f"{exc}; not sent again: the connection of the attempt before broke "
                        "after the request went, so the broker may have stored it") from None
                if selector is not None:
                    mq = selector(list(route.publish_queues), message, arg)
                else:
                    mq = self._choose(route.publish_queues, last_broker)
                remaining = deadline - time.monotonic()  # the route may have waited
                if remaining <= 0:
                    break
            began = time.monotonic()
            try:
                result = await self._send_to(mq, message, body, sysflag, props, remaining,
                                             oneway, batch)
            except (RemotingError, OSError, ClientError) as exc:
                retriable = not isinstance(exc, BrokerError) or exc.code in _RETRY_CODES
                if self.fault is not None:
                    self.fault.update(mq.broker_name, (time.monotonic() - began) * 1000, True)
                last_error, last_broker = exc, mq.broker_name
                if isinstance(exc, BrokerError) and exc.code == ResponseCode.TOPIC_NOT_EXIST:
                    self.instance.routes.pop(topic, None)
                elif (not isinstance(exc, BrokerError)
                      or exc.code == ResponseCode.SERVICE_NOT_AVAILABLE):
                    # The broker may be gone, or no longer its group's master (a failover):
                    # learn the route now, not at the next 30 s poll, so the retry goes to
                    # the group's new master or to a group that has one.
                    with contextlib.suppress(RemotingError, OSError, ClientError):
                        await self.instance.update_route(topic)
                if not retriable or selector is not None or queue is not None:
                    raise
                log.info("send to %s failed (%s), attempt %d of %d", mq, exc, attempt + 1,
                         retries + 1)
                continue
            if self.fault is not None:
                self.fault.update(mq.broker_name, (time.monotonic() - began) * 1000, False)
            if oneway or result is None:
                return None  # type: ignore[return-value]
            if (result.status is not SendStatus.SEND_OK and self.retry_another_broker
                    and attempt < retries):
                last_broker = mq.broker_name
                continue
            return result
        if last_error is not None:
            raise last_error
        raise ClientTimeoutError(f"sending to {topic} timed out after {timeout:.1f} s")

    async def _publish_route(self, topic: str, deadline: float, *,
                             wait: bool = True) -> TopicRoute:
        """The route to send ``topic`` to. While the topic's broker groups have no master (a
        master stopped, or a failover is in progress), the route is asked for again, at
        growing intervals, until one is elected or ``deadline`` (``time.monotonic()``) passes:
        a failover takes seconds, and a send fails only when its timeout is spent. Without
        ``wait`` a route without a master raises NoMasterError at once."""
        route = self.instance.routes.get(topic)
        if route is not None and route.publish_queues:
            return route
        pause = 0.05
        logged = False
        while True:
            try:
                return await self.instance.publish_route(topic, self.default_topic_queue_nums)
            except NoMasterError as exc:
                if not wait:
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NoMasterError(exc.topic, exc.brokers,
                                        f"{exc}; the send was retried until its timeout"
                                        ) from None
                if not logged:
                    log.warning("%s; the send will be retried for up to %.1f s", exc, left)
                    logged = True
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, _NO_MASTER_PAUSE_MAX)


__all__ = ["LatencyFaultTolerance", "SendRetries", "Selector"]
