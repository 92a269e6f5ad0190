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

from ..protocol import Property, RemotingCommand, RequestCode, ResponseCode, SysFlag
from ..protocol.message import decode_records
from ..remoting import ConnectFailedError, RemotingError
from .errors import BrokerError, ClientError, ClientTimeoutError, NoMasterError
from .instance import ClientInstance, TopicRoute
from .message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus

log = logging.getLogger("rocketq.client")

#: Picks the queue of a send from the route's writable queues: ``(queues, message, arg)``.
Selector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

#: Refusals a send may pass on another attempt.
_RETRY_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_BUSY}
#: The longest pause between two looks at the route while a broker group has no master.
_NO_MASTER_PAUSE_MAX = 0.4
#: The first and the longest pause between two looks at the route while a send waits for a
#: new master after its master refused the connection (a failover takes about a second).
_FAILOVER_PAUSE_MIN = 0.05
_FAILOVER_PAUSE_MAX = 0.4
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
                             batch: bool = False, maybe_sent: bool = False,
                             uncertain: str | None = None) -> SendResult:
        """One send with its retries. ``maybe_sent``: an attempt before this call broke after
        its request went (to broker group ``uncertain``, when known), so a broker may hold
        the message already."""
        deadline = time.monotonic() + timeout
        topic = message.topic
        last_broker: str | None = None
        last_error: Exception | None = None
        #: Masters that refused this send's connection (a master killed: its group's new
        #: master is not in the route yet). The send waits for another address rather than
        #: spend its attempts on this one.
        unreachable: set[str] = set()
        refused: set[str] = set()  # every address that refused, for the log and the error
        waits = _FailoverWait()
        attempt = 0
        while attempt <= retries:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if queue is not None:
                mq = queue
                if self.instance.broker_addr(mq.broker_name) in unreachable:
                    await waits.pause(self, topic, deadline, unreachable)
                    continue
            else:
                # Waiting out a failover is for a message no broker may hold yet: after a
                # failure that left that open (a lost connection, no answer), a new master
                # may already have it, and a send waiting for it would store it twice.
                if last_error is not None and not isinstance(last_error, _NOT_SENT):
                    maybe_sent = True
                if maybe_sent and not batch and not oneway and _checkable(message, sysflag):
                    # Rather than fail it or send it twice: wait for a master, and look
                    # the message up there (a new master may hold it: its slave had it
                    # before the old master answered); send again only if it is not.
                    try:
                        found = await self._stored_already(message, uncertain, deadline)
                    except ConnectFailedError:
                        await waits.pause(self, topic, deadline, unreachable)
                        continue
                    except NoMasterError:
                        found = None  # said below, as before
                    except (RemotingError, OSError, ClientError):
                        found = None  # no answer: as before, not sent again
                    else:
                        if found is not None:
                            return found
                        maybe_sent = False  # not stored: an ordinary send from here on
                        last_error = None
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
                queues = route.publish_queues if not unreachable else [
                    q for q in route.publish_queues
                    if self.instance.broker_addr(q.broker_name) not in unreachable]
                if not queues and unreachable:
                    await waits.pause(self, topic, deadline, unreachable)
                    continue
                if selector is not None:
                    mq = selector(list(route.publish_queues), message, arg)
                    if self.instance.broker_addr(mq.broker_name) in unreachable:
                        await waits.pause(self, topic, deadline, unreachable)
                        continue
                else:
                    mq = self._choose(queues, last_broker)
                remaining = deadline - time.monotonic()  # the route may have waited
                if remaining <= 0:
                    break
            addr = self.instance.broker_addr(mq.broker_name)
            began = time.monotonic()
            try:
                result = await self._send_to(mq, message, body, sysflag, props, remaining,
                                             oneway, batch)
            except (RemotingError, OSError, ClientError) as exc:
                retriable = not isinstance(exc, BrokerError) or exc.code in _RETRY_CODES
                if self.fault is not None:
                    self.fault.update(mq.broker_name, (time.monotonic() - began) * 1000, True)
                last_error, last_broker = exc, mq.broker_name
                if not isinstance(exc, _NOT_SENT):
                    uncertain = mq.broker_name
                if isinstance(exc, BrokerError) and exc.code == ResponseCode.TOPIC_NOT_EXIST:
                    self.instance.routes.pop(topic, None)
                elif (not isinstance(exc, BrokerError)
                      or exc.code == ResponseCode.SERVICE_NOT_AVAILABLE):
                    # The broker may be gone, or no longer its group's master (a failover):
                    # learn the route now, not at the next 30 s poll, so the retry goes to
                    # the group's new master or to a group that has one.
                    with contextlib.suppress(RemotingError, OSError, ClientError):
                        await self.instance.update_route(topic)
                if (isinstance(exc, ConnectFailedError) and addr is not None
                        and self._may_fail_over(mq.broker_name, addr)):
                    # Nothing was sent, and the group has replicas: its master is likely
                    # gone and a new one about to be elected. Wait for it (or send to
                    # another group) within the timeout; the attempt does not count.
                    if addr not in refused:
                        log.info("master %s of %s refused the connection (%s); waiting for "
                                 "a new master for up to %.1f s", addr, mq.broker_name, exc,
                                 max(0.0, deadline - time.monotonic()))
                    unreachable.add(addr)
                    refused.add(addr)
                    waits.failed = exc
                    continue
                if not retriable or selector is not None or queue is not None:
                    raise
                log.info("send to %s failed (%s), attempt %d of %d", mq, exc, attempt + 1,
                         retries + 1)
                attempt += 1
                continue
            if self.fault is not None:
                self.fault.update(mq.broker_name, (time.monotonic() - began) * 1000, False)
            if oneway or result is None:
                return None  # type: ignore[return-value]
            if (result.status is not SendStatus.SEND_OK and self.retry_another_broker
                    and attempt < retries):
                last_broker = mq.broker_name
                attempt += 1
                continue
            return result
        if waits.failed is not None and last_error is waits.failed:
            groups = [queue.broker_name] if queue is not None else self._masterless(
                topic, refused) or [last_broker or ""]
            raise NoMasterError(topic, groups, (
                f"no master of {', '.join(repr(g) for g in groups)} for topic {topic} within "
                f"the send timeout of {timeout:.1f} s: "
                f"{'masters' if len(refused) > 1 else 'master'} {', '.join(sorted(refused))} "
                f"refused the connection ({waits.failed}) and no new master came into the "
                "route")) from waits.failed
        if last_error is not None:
            raise last_error
        raise ClientTimeoutError(f"sending to {topic} timed out after {timeout:.1f} s")

    async def _stored_already(self, message: Message, group: str | None, deadline: float
                              ) -> SendResult | None:
        """Whether the master of ``group`` (of every group of the topic's route when not
        known) holds ``message``, looked up by its unique id (QUERY_MESSAGE): its SendResult
        if so; None when it does not, or when the group has no master in the route while
        others have (it is sent to one of those). Waits for a master within ``deadline``
        (NoMasterError after it); ConnectFailedError when a master of a group with replicas
        refused the connection (a failover under way)."""
        topic = message.topic
        uniq = message.properties.get(Property.UNIQ_KEY, "")
        route = await self._publish_route(topic, deadline)
        in_route = {q.broker_name for q in route.publish_queues}
        for name in [group] if group is not None else sorted(in_route):
            addr = route.broker_addrs.get(name, {}).get(0)
            if name not in in_route or addr is None:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClientTimeoutError(f"sending to {topic} timed out")
            try:
                r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                    RequestCode.QUERY_MESSAGE, {
                        "topic": topic, "key": uniq, "maxNum": 1, "beginTimestamp": 0,
                        "endTimestamp": int(time.time() * 1000) + 60_000,
                        "_UNIQUE_KEY_QUERY": True}), min(left, 1.0))
            except ConnectFailedError:
                with contextlib.suppress(RemotingError, OSError, ClientError):
                    await self.instance.update_route(topic)
                if self._may_fail_over(name, addr):
                    raise
                continue
            if r.code != ResponseCode.SUCCESS:
                continue
            for record in decode_records(r.body, decompress=True):
                m = ReceivedMessage.from_record(record, name)
                if m.topic == topic and m.properties.get(Property.UNIQ_KEY) == uniq:
                    log.info("message %s was stored by %s before its connection broke; not "
                             "sent again", uniq, name)
                    return SendResult(SendStatus.SEND_OK, uniq, m.offset_msg_id,
                                      MessageQueue(topic, name, m.queue_id), m.queue_offset)
        return None

    def _masterless(self, topic: str, unreachable: set[str]) -> list[str]:
        """The broker groups of ``topic``'s route with no master, or one in ``unreachable``."""
        route = self.instance.routes.get(topic)
        if route is None:
            return []
        return sorted(name for name, addrs in route.broker_addrs.items()
                      if addrs.get(0) is None or addrs.get(0) in unreachable)

    def _may_fail_over(self, broker_name: str, addr: str) -> bool:
        """Whether ``broker_name``'s master at ``addr`` may be replaced by a failover: the
        route names other brokers of the group (replicas), or no longer names this one as
        its master. A lone broker that refuses connections is down, not failing over."""
        addrs = self.instance.broker_addrs.get(broker_name) or {}
        return any(a != addr for a in addrs.values()) or addrs.get(0) != addr

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


#: Properties of messages stored under another topic first (delays, timers): a look-up by
#: the message's own topic would not find them.
_STORED_ELSEWHERE = (Property.DELAY, Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_SEC,
                     Property.TIMER_DELAY_MS)


def _checkable(message: Message, sysflag: int) -> bool:
    """Whether a message whose send may have landed can be looked up by its unique id in its
    topic before it is sent again: a plain message (no half message, delay or timer)."""
    props = message.properties
    return (Property.UNIQ_KEY in props and not sysflag & SysFlag.TRANSACTION_PREPARED
            and not any(k in props for k in _STORED_ELSEWHERE))


class _FailoverWait:
    """The pauses of one send waiting for a new master after its master refused the
    connection: the route is asked for again at once, then after 50, 100, 200 ms and on
    every 400 ms, up to the send's deadline. After each pause the addresses that refused
    may be tried again: a master restarted at its address is a master again."""

    def __init__(self) -> None:
        self.next = 0.0
        #: The connection failure that made the send wait.
        self.failed: Exception | None = None

    async def pause(self, owner: SendRetries, topic: str, deadline: float,
                    unreachable: set[str]) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        await asyncio.sleep(min(self.next, left))
        self.next = min(max(self.next * 2, _FAILOVER_PAUSE_MIN), _FAILOVER_PAUSE_MAX)
        with contextlib.suppress(RemotingError, OSError, ClientError):
            await owner.instance.update_route(topic)
        unreachable.clear()


__all__ = ["LatencyFaultTolerance", "SendRetries", "Selector"]
