"""The producer (asyncio core): validation, routes, queue choice, retries, compression.

Queue choice is round-robin over the route's writable queues, avoiding the broker that failed
last, and with ``latency_fault_tolerance`` also brokers that were slow or failing lately
(RocketMQ's MQFaultStrategy). Synchronous and asynchronous sends retry twice, on another
broker when one is available.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from ..acl import Credentials
from ..protocol import (
    AUTO_CREATE_TOPIC_KEY,
    FLAG_ONEWAY,
    MAX_FRAME_SIZE,
    IllegalTopicError,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SysFlag,
    codec,
    encode_properties,
    is_retry_topic,
    validate_topic,
)
from ..protocol.message import MAX_PROPERTIES_SIZE
from ..remoting import ConnectFailedError, RemotingError
from .accumulator import Accumulator
from .checks import check_group, type_name
from .errors import (
    ArgumentTypeError,
    BrokerError,
    ClientError,
    ClientTimeoutError,
    MessageValidationError,
    NoMasterError,
)
from .instance import ClientInstance, TopicRoute
from .message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus, unique_ids

log = logging.getLogger("rocketq.client")

Selector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

_RETRY_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_BUSY}
_STATUS = {ResponseCode.SUCCESS: SendStatus.SEND_OK,
           ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
           ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE}
#: Room a send request's header needs besides the properties and the names it repeats (the
#: other send header fields and the command's own), when a request is checked against the
#: remoting frame limit before it is sent.
_HEADER_ROOM = 2048
#: Properties that make a message wait before delivery.
_DELAY_PROPERTIES = (Property.DELAY, Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_MS,
                     Property.TIMER_DELAY_SEC)
#: The longest pause between two looks at the route while a broker group has no master.
_NO_MASTER_PAUSE_MAX = 1.0
#: Failures after which no broker can hold the message: a refusal, a connection never made,
#: a group found without a master before anything was sent.
_NOT_SENT = (BrokerError, ConnectFailedError, NoMasterError)
_LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
_NOT_AVAILABLE = (0, 0, 30000, 60000, 120000, 180000, 600000)


def select_by_hash(queues: list[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    """Selector for ordered messages: the same ``arg`` (an order id) always maps to the same
    queue while the queue count stays the same."""
    from ..protocol.message import java_hash

    key = arg if isinstance(arg, int) else java_hash(str(arg))
    return queues[abs(key) % len(queues)]


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


class AsyncProducer:
    """Sends messages. Use ``async with AsyncProducer(group, namesrv=...)``.

    ``group`` is the producer group (RocketMQ's rule: letters, digits, ``_``, ``-``, ``|``, at
    most 255); ``namesrv`` the NameServers, ``"host:port"`` or several joined by ``;``. A send
    waits ``send_timeout`` seconds at most and is retried ``retries`` times (``retries_async``
    for ``rocketq.Producer.send_async``), on another broker when there is one. Bodies of
    ``compress_over`` bytes or more are zlib-compressed at ``compress_level`` when that makes
    them smaller; bodies over ``max_message_size`` are refused. With
    ``retry_another_broker_when_not_store_ok`` a send stored but not flushed or replicated is
    sent again to another broker; ``latency_fault_tolerance`` avoids brokers that were slow or
    failing lately; ``default_topic_queue_nums`` is the queue count of topics the broker
    creates on first send. ``auto_batch`` gathers concurrent sends into batches (at most
    ``batch_max_bytes`` each, waiting ``batch_max_delay_ms`` at most, ``total_batch_max_bytes``
    gathered in all). ``credentials`` (an ``acl.Credentials`` or ``(access_key,
    secret_key)``) sign every request; ``tls`` is True or an ``ssl.SSLContext`` for TLS.
    ``instance`` shares another client's ClientInstance (its connections and routes).

    Raises:
        ArgumentTypeError: ``group`` or ``namesrv`` is not a str.
        InvalidArgumentError: ``group`` breaks RocketMQ's group name rule, or ``namesrv`` is not
            ``host:port[;host:port...]``.
    """

    def __init__(self, group: str, namesrv: str, *, send_timeout: float = 3.0,
                 retries: int = 2, retries_async: int = 2, compress_over: int = 4096,
                 compress_level: int = 5, max_message_size: int = 4 * 1024 * 1024,
                 retry_another_broker_when_not_store_ok: bool = False,
                 latency_fault_tolerance: bool = False, default_topic_queue_nums: int = 4,
                 auto_batch: bool = False, batch_max_delay_ms: float = 10,
                 batch_max_bytes: int = 32 * 1024,
                 total_batch_max_bytes: int = 32 * 1024 * 1024,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None,
                 instance: ClientInstance | None = None) -> None:
        self.group = check_group(group, "producer")
        self.instance = instance or ClientInstance(namesrv, credentials=credentials, tls=tls)
        self.send_timeout = send_timeout
        self.retries = retries
        self.retries_async = retries_async
        self.compress_over = compress_over
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.retry_another_broker = retry_another_broker_when_not_store_ok
        self.fault = LatencyFaultTolerance() if latency_fault_tolerance else None
        self.default_topic_queue_nums = default_topic_queue_nums
        self._counter = itertools.count()
        self._valid_topics: set[str] = set()
        #: With ``auto_batch``, sends in flight together go as batches (see accumulator).
        self.accumulator = Accumulator(
            self, max_delay_ms=batch_max_delay_ms, max_bytes=batch_max_bytes,
            total_max_bytes=total_batch_max_bytes) if auto_batch else None
        self.started = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the producer: routes are learned and brokers told of its group from now on;
        nothing is sent until the first send.

        Raises:
            Nothing.
        """
        if self.started:
            return
        instance = self.instance
        previous = instance.heartbeat_data

        def heartbeat() -> dict[str, Any]:
            data = dict(previous())
            data["producerDataSet"] = [*data.get("producerDataSet", []),
                                       {"groupName": self.group}]
            return data

        instance.heartbeat_data = heartbeat
        await instance.start()
        self.started = True

    async def shutdown(self) -> None:
        """Send what auto-batching still holds, tell the brokers the producer left, and close
        its connections.

        Raises:
            Nothing.
        """
        if not self.started:
            return
        if self.accumulator is not None:
            await self.accumulator.drain()
        self.started = False
        await self.instance.unregister(self.group, None)
        await self.instance.stop()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # ------------------------------------------------------------------ validation
    def _validate(self, message: Message) -> None:
        if type(message) is not Message and not isinstance(message, Message):
            raise ArgumentTypeError(
                f"message: a send takes a Message, not {type_name(message)}; e.g. "
                "producer.send(Message(topic, b'body'))")
        if message.topic not in self._valid_topics:
            try:
                validate_topic(message.topic)
            except IllegalTopicError as exc:
                raise MessageValidationError(str(exc)) from None
            if len(self._valid_topics) < 10_000:
                self._valid_topics.add(message.topic)
        if message.topic == AUTO_CREATE_TOPIC_KEY:
            raise MessageValidationError(f"the topic {message.topic} is reserved by the system")
        if not message.body:
            raise MessageValidationError("the message body is empty")
        if len(message.body) > self.max_message_size:
            raise MessageValidationError(
                f"the message body is {len(message.body)} bytes; the maximum is "
                f"{self.max_message_size}")

    def _prepare(self, message: Message) -> tuple[bytes, int, str]:
        """Body as sent, sysFlag, property string; sets UNIQ_KEY and WAIT."""
        self._validate(message)
        props = message.properties
        if Property.UNIQ_KEY not in props:
            props[Property.UNIQ_KEY] = unique_ids.next()
        props.setdefault(Property.WAIT, "true")
        body = message.body
        sysflag = 0
        if len(body) >= self.compress_over:
            # Kept only when smaller: a body that does not compress (random or already
            # compressed data) would grow, and could then pass the size check here and be
            # refused by the broker, which checks the body as sent.
            compressed = zlib.compress(body, self.compress_level)
            if len(compressed) < len(body):
                body = compressed
                sysflag |= SysFlag.COMPRESSED
        encoded = encode_properties(props)
        # Bytes on the wire; an ASCII string (nearly all) is as long as its encoding.
        props_size = len(encoded) if encoded.isascii() else len(encoded.encode())
        if props_size > MAX_PROPERTIES_SIZE:
            raise MessageValidationError(
                f"the message properties are over {MAX_PROPERTIES_SIZE} bytes")
        self._check_frame(message.topic, len(body), props_size, "the message body")
        return body, sysflag, encoded

    def _check_frame(self, topic: str, body_size: int, props_size: int, what: str) -> None:
        """Refuse a request over the remoting protocol's frame limit before it is sent: the
        broker would close the connection on reading its length, and every retry would end
        the same way."""
        if body_size + props_size + len(self.group) + 2 * len(topic) + _HEADER_ROOM \
                > MAX_FRAME_SIZE:
            raise MessageValidationError(
                f"{what} is {body_size} bytes as sent; with its header that is over the "
                f"{MAX_FRAME_SIZE}-byte ({MAX_FRAME_SIZE >> 20} MiB) frame limit of the "
                "remoting protocol, which brokers refuse")

    # ------------------------------------------------------------------ queue choice
    def _choose(self, queues: list[MessageQueue], last_broker: str | None) -> MessageQueue:
        if not queues:
            raise ClientError("no writable queue in the route")
        start = next(self._counter)
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

    # ------------------------------------------------------------------ sending
    async def send(self, message: Message, *, queue: MessageQueue | None = None,
                   selector: Selector | None = None, arg: Any = None,
                   timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer, retrying on another broker if one fails.
        With ``auto_batch`` the message may travel in a batch with others sent meanwhile; its
        result is still its own. ``queue`` sends to that queue, ``selector(queues, message,
        arg)`` picks one (ordered messages); ``timeout`` overrides ``send_timeout``.

        Raises:
            ArgumentTypeError: ``message`` is not a Message.
            MessageValidationError: the message breaks a rule (topic name, empty or too
                large body or properties); nothing was sent.
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the topic's broker groups had no master (a failover) until the
                timeout.
            BrokerError: the broker refused the message (after the retries, if the refusal
                was transient).
            ConnectionClosedError: the broker could not be reached or closed the connection
                (after the retries).
            ClientTimeoutError: no answer within the timeout.
            ClientError: no route for the topic and no ``TBW102`` to create it from.
        """
        body, sysflag, props = self._prepare(message)
        accumulator = self.accumulator
        if accumulator is not None and not sysflag:
            raw = props.encode()
            if accumulator.fits(message, body, raw):
                if selector is not None:
                    route = await self._publish_route(
                        message.topic, time.monotonic() + (timeout or self.send_timeout))
                    queue = selector(list(route.publish_queues), message, arg)
                return await accumulator.send(message, props, raw, queue,
                                              timeout or self.send_timeout)
        return await self._send_prepared(message, body, sysflag, props, queue, selector, arg,
                                         timeout or self.send_timeout, self.retries, False)

    async def _send_again(self, message: Message, timeout: float, retries: int
                          ) -> SendResult:
        """Send ``message`` after a first attempt whose connection broke once the request
        had gone (the synchronous producer's direct path), within what is left of that
        send's ``timeout`` and ``retries``, and without waiting out a failover, as the broker
        may have stored it."""
        body, sysflag, props = self._prepare(message)
        return await self._send_prepared(message, body, sysflag, props, None, None, None,
                                         timeout, retries, False, maybe_sent=True)

    async def _send_half(self, message: Message, *, retries: int | None = None,
                        timeout: float | None = None) -> SendResult:
        """Store ``message`` as a transactional half message, invisible to consumers until
        its transaction is committed; the caller ends the transaction."""
        self._validate(message)
        if any(name in message.properties for name in _DELAY_PROPERTIES):
            raise MessageValidationError("a transactional message cannot be delayed")
        message.properties[Property.TRANSACTION_PREPARED] = "true"
        message.properties[Property.PRODUCER_GROUP] = self.group
        body, sysflag, props = self._prepare(message)
        return await self._send_prepared(
            message, body, sysflag | SysFlag.TRANSACTION_PREPARED, props, None, None, None,
            timeout or self.send_timeout, self.retries if retries is None else retries, False)

    async def request(self, message: Message, timeout: float = 3.0) -> ReceivedMessage:
        """Send a request and wait for its reply (RocketMQ's request-reply): a consumer of
        the topic answers with ``create_reply(request, body)``.

        Raises:
            ArgumentTypeError: ``message`` is not a Message.
            MessageValidationError: the message breaks a rule; nothing was sent.
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the topic's broker groups had no master until the timeout.
            BrokerError: the broker refused the request.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: no reply within ``timeout``.
            ClientError: no route for the topic and no ``TBW102`` to create it from.
        """
        self._validate(message)
        correlation = unique_ids.next()
        message.properties[Property.CORRELATION_ID] = correlation
        message.properties[Property.REPLY_TO_CLIENT] = self.instance.client_id
        message.properties[Property.TTL] = str(int(timeout * 1000))
        waiter = self.instance.expect_reply(correlation)
        deadline = time.monotonic() + timeout
        try:
            await self._publish_route(message.topic, deadline)
            await self.instance.heartbeat_all()  # the broker must know where to push replies
            await self.send(message, timeout=timeout)
            return await asyncio.wait_for(waiter, max(0.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            if isinstance(exc, ClientError):
                raise  # the send itself timed out, and says so
            raise ClientTimeoutError(f"no reply to request {correlation} within "
                                     f"{timeout:.1f} s") from None
        finally:
            self.instance.replies.pop(correlation, None)

    async def send_oneway(self, message: Message, *, queue: MessageQueue | None = None,
                          selector: Selector | None = None, arg: Any = None) -> None:
        """Send without waiting for an answer (fastest, no delivery report).

        Raises:
            ArgumentTypeError: ``message`` is not a Message.
            MessageValidationError: the message breaks a rule; nothing was sent.
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the topic's broker groups had no master until the send timeout.
            ConnectionClosedError: the broker could not be reached.
            ClientError: no route for the topic and no ``TBW102`` to create it from.
        """
        body, sysflag, props = self._prepare(message)
        await self._send_prepared(message, body, sysflag, props, queue, selector, arg,
                                  self.send_timeout, 0, True)

    async def send_batch(self, messages: Sequence[Message], *,
                         queue: MessageQueue | None = None,
                         timeout: float | None = None) -> SendResult:
        """Send messages of one topic in one request; they get consecutive queue offsets.

        Raises:
            ArgumentTypeError: ``messages`` is not a sequence of Message.
            MessageValidationError: a message breaks a rule, the messages have different
                topics or a delay, or the batch is too large; nothing was sent.
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the topic's broker groups had no master until the timeout.
            BrokerError: the broker refused the batch.
            ConnectionClosedError: the broker could not be reached (after the retries).
            ClientTimeoutError: no answer within the timeout.
            ClientError: no route for the topic and no ``TBW102`` to create it from.
        """
        if isinstance(messages, str | bytes | Message):
            raise ArgumentTypeError(f"messages: send_batch takes a sequence of Message, not "
                                    f"{type_name(messages)}")
        if not messages:
            raise MessageValidationError("the batch is empty")
        self._validate(messages[0])
        topic = messages[0].topic
        elements = []
        total = 0
        for m in messages:
            if m.topic != topic:
                raise MessageValidationError("every message of a batch must have the same topic")
            self._validate(m)
            props = m.properties
            if any(name in props for name in _DELAY_PROPERTIES):
                raise MessageValidationError("delayed messages cannot be sent in a batch")
            if Property.UNIQ_KEY not in props:
                props[Property.UNIQ_KEY] = unique_ids.next()
            if Property.WAIT not in props:
                props[Property.WAIT] = "true"
            raw = encode_properties(props).encode()
            elements.append((m, raw))
            total += len(m.body) + len(raw) + 22
        if total > self.max_message_size:
            raise MessageValidationError(
                f"the batch is {total} bytes; the maximum is {self.max_message_size}")
        self._check_frame(topic, total, 0, "the batch")
        result = await self._send_batch_body(topic, elements, queue,
                                             timeout or self.send_timeout)
        result.msg_id = ",".join([m.properties[Property.UNIQ_KEY] for m in messages])
        return result

    async def _send_batch_body(self, topic: str, elements: Sequence[tuple[Message, bytes]],
                               queue: MessageQueue | None, timeout: float) -> SendResult:
        """One SEND_BATCH_MESSAGE of validated ``(message, encoded properties)`` elements;
        the broker's answer names the first message's queue offset and every offset id."""
        body = codec.encode_batch([(m.flag, m.body, raw) for m, raw in elements])
        return await self._send_prepared(Message(topic, body), body, 0, encode_properties(
            {Property.UNIQ_KEY: unique_ids.next(), Property.WAIT: "true"}), queue, None, None,
            timeout, self.retries, False, batch=True)

    async def _send_elements(self, topic: str, elements: Sequence[tuple[Message, bytes]],
                             queue: MessageQueue | None, timeout: float) -> list[SendResult]:
        """Send elements as one batch and give each message its own result: its UNIQ_KEY,
        its offset id and its queue offset (the batch's are consecutive)."""
        result = await self._send_batch_body(topic, elements, queue, timeout)
        offset_ids = result.offset_msg_id.split(",")
        if len(offset_ids) != len(elements):
            offset_ids = [""] * len(elements)
        status, mq, first = result.status, result.queue, result.queue_offset
        return [SendResult(status, m.properties[Property.UNIQ_KEY], offset_id, mq, first + i)
                for i, ((m, _raw), offset_id) in enumerate(zip(elements, offset_ids,
                                                               strict=True))]

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

    def _request(self, mq: MessageQueue, message: Message, body: bytes, sysflag: int,
                 props: str, oneway: bool, batch: bool) -> RemotingCommand:
        """The send request for ``mq``: SEND_MESSAGE_V2's short field names, every value a
        string, as on the wire."""
        ext = {"a": self.group, "b": mq.topic, "c": AUTO_CREATE_TOPIC_KEY,
               "d": str(self.default_topic_queue_nums), "e": str(mq.queue_id), "f": str(sysflag),
               "g": str(int(time.time() * 1000)), "h": str(message.flag), "i": props,
               "j": "0", "k": "false", "m": "true" if batch else "false",
               "n": mq.broker_name}
        if is_retry_topic(mq.topic):
            # A consumer's hand-back: the retry counters travel in the header.
            ext["j"] = message.properties.get(Property.RECONSUME_TIME, "0")
            max_times = message.properties.get(Property.MAX_RECONSUME_TIMES)
            if max_times is not None:
                ext["l"] = max_times
        if batch:
            code = RequestCode.SEND_BATCH_MESSAGE
        elif message.properties.get(Property.MSG_TYPE) == "reply":
            code = RequestCode.SEND_REPLY_MESSAGE_V2
        else:
            code = RequestCode.SEND_MESSAGE_V2
        return RemotingCommand.request_text(code, ext, body,
                                            flag=FLAG_ONEWAY if oneway else 0)

    @staticmethod
    def _result(response: RemotingCommand, mq: MessageQueue, message: Message) -> SendResult:
        """The SendResult a broker's answer describes; BrokerError for a refusal."""
        status = _STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError(response.code, f"send to {mq} refused: {response.remark}")
        ext_out = response.ext_fields
        queue_id = ext_out.get("queueId")
        queue = mq if queue_id is None or queue_id == str(mq.queue_id) else \
            MessageQueue(mq.topic, mq.broker_name, int(queue_id))
        return SendResult(status, message.properties.get(Property.UNIQ_KEY, ""),
                          ext_out.get("msgId", ""), queue, int(ext_out.get("queueOffset", -1)),
                          ext_out.get("transactionId") or None)

    async def _send_to(self, mq: MessageQueue, message: Message, body: bytes, sysflag: int,
                       props: str, timeout: float, oneway: bool, batch: bool
                       ) -> SendResult | None:
        cmd = self._request(mq, message, body, sysflag, props, oneway, batch)
        instance = self.instance
        addr = instance.broker_addr(mq.broker_name) or \
            await instance.broker_addr_or_refresh(mq.broker_name, mq.topic)
        remoting = instance.remoting
        if oneway:
            await remoting.invoke_oneway(addr, cmd)
            return None
        return self._result(await remoting.invoke(addr, cmd, timeout), mq, message)


__all__ = ["AsyncProducer", "LatencyFaultTolerance", "select_by_hash"]
