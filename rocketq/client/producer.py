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
from ..remoting import RemotingError
from .accumulator import Accumulator
from .errors import BrokerError, ClientError, MessageValidationError
from .instance import ClientInstance
from .message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus, unique_ids

log = logging.getLogger("rocketq.client")

Selector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

_RETRY_CODES = {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE,
                ResponseCode.SYSTEM_ERROR, ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_BUSY}
_STATUS = {ResponseCode.SUCCESS: SendStatus.SEND_OK,
           ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
           ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE}
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
    """Sends messages. Use ``async with AsyncProducer(group, namesrv=...)``."""

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
        if not group or "%" in group:
            raise ValueError(f"illegal producer group {group!r}")
        self.group = group
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
            body = zlib.compress(body, self.compress_level)
            sysflag |= SysFlag.COMPRESSED
        encoded = encode_properties(props)
        # Bytes on the wire; an ASCII string (nearly all) is as long as its encoding.
        if (len(encoded) if encoded.isascii() else len(encoded.encode())) > MAX_PROPERTIES_SIZE:
            raise MessageValidationError(
                f"the message properties are over {MAX_PROPERTIES_SIZE} bytes")
        return body, sysflag, encoded

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
        result is still its own."""
        body, sysflag, props = self._prepare(message)
        accumulator = self.accumulator
        if accumulator is not None and not sysflag:
            raw = props.encode()
            if accumulator.fits(message, body, raw):
                if selector is not None:
                    route = self.instance.routes.get(message.topic)
                    if route is None or not route.publish_queues:
                        route = await self.instance.publish_route(
                            message.topic, self.default_topic_queue_nums)
                    queue = selector(list(route.publish_queues), message, arg)
                return await accumulator.send(message, props, raw, queue,
                                              timeout or self.send_timeout)
        return await self._send_prepared(message, body, sysflag, props, queue, selector, arg,
                                         timeout or self.send_timeout, self.retries, False)

    async def _send_half(self, message: Message, *, retries: int | None = None,
                        timeout: float | None = None) -> SendResult:
        """Store ``message`` as a transactional half message, invisible to consumers until
        its transaction is committed; the caller ends the transaction."""
        if message.delay_level:
            raise MessageValidationError("a transactional message cannot be delayed")
        message.properties[Property.TRANSACTION_PREPARED] = "true"
        message.properties[Property.PRODUCER_GROUP] = self.group
        body, sysflag, props = self._prepare(message)
        return await self._send_prepared(
            message, body, sysflag | SysFlag.TRANSACTION_PREPARED, props, None, None, None,
            timeout or self.send_timeout, self.retries if retries is None else retries, False)

    async def request(self, message: Message, timeout: float = 3.0) -> ReceivedMessage:
        """Send a request and wait for its reply (RocketMQ's request-reply): a consumer of
        the topic answers with ``create_reply(request, body)``."""
        correlation = unique_ids.next()
        message.properties[Property.CORRELATION_ID] = correlation
        message.properties[Property.REPLY_TO_CLIENT] = self.instance.client_id
        message.properties[Property.TTL] = str(int(timeout * 1000))
        waiter = self.instance.expect_reply(correlation)
        deadline = time.monotonic() + timeout
        try:
            await self.instance.publish_route(message.topic, self.default_topic_queue_nums)
            await self.instance.heartbeat_all()  # the broker must know where to push replies
            await self.send(message, timeout=timeout)
            return await asyncio.wait_for(waiter, max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise ClientError(f"no reply to request {correlation} within {timeout:.1f} s"
                              ) from None
        finally:
            self.instance.replies.pop(correlation, None)

    async def send_oneway(self, message: Message, *, queue: MessageQueue | None = None,
                          selector: Selector | None = None, arg: Any = None) -> None:
        """Send without waiting for an answer (fastest, no delivery report)."""
        body, sysflag, props = self._prepare(message)
        await self._send_prepared(message, body, sysflag, props, queue, selector, arg,
                                  self.send_timeout, 0, True)

    async def send_batch(self, messages: Sequence[Message], *,
                         queue: MessageQueue | None = None,
                         timeout: float | None = None) -> SendResult:
        """Send messages of one topic in one request; they get consecutive queue offsets."""
        if not messages:
            raise MessageValidationError("the batch is empty")
        topic = messages[0].topic
        elements = []
        total = 0
        for m in messages:
            if m.topic != topic:
                raise MessageValidationError("every message of a batch must have the same topic")
            props = m.properties
            if Property.DELAY in props and m.delay_level:
                raise MessageValidationError("delayed messages cannot be sent in a batch")
            self._validate(m)
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
                             batch: bool = False) -> SendResult:
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
                route = self.instance.routes.get(topic)
                if route is None or not route.publish_queues:
                    route = await self.instance.publish_route(topic,
                                                              self.default_topic_queue_nums)
                if selector is not None:
                    mq = selector(list(route.publish_queues), message, arg)
                else:
                    mq = self._choose(route.publish_queues, last_broker)
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
        raise ClientError(f"sending to {topic} timed out after {timeout:.1f} s")

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
