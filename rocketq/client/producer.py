"""The producer (asyncio core): validation, routes, queue choice, retries, compression.

Queue choice is round-robin over the route's writable queues, avoiding the broker that failed
last, and with ``latency_fault_tolerance`` also brokers that were slow or failing lately
(RocketMQ's MQFaultStrategy). Synchronous and asynchronous sends retry twice, on another
broker when one is available.

``AsyncProducer`` is assembled from parts: this module (settings, lifecycle, the kinds of
send: single, oneway, batch, request-reply, transactional half), ``send_retry`` (route, queue
choice, retries, fault tolerance) and ``send_request`` (validation, encoding, the request and
its answer).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..acl import Credentials
from ..protocol import Property, SysFlag, codec, encode_properties
from .accumulator import Accumulator
from .checks import check_group, type_name
from .errors import ArgumentTypeError, ClientError, ClientTimeoutError, MessageValidationError
from .instance import ClientInstance
from .message import Message, MessageQueue, ReceivedMessage, SendResult
from .send_request import SendRequests
from .send_retry import LatencyFaultTolerance, Selector, SendRetries
from .unique_ids import unique_ids

#: Properties that make a message wait before delivery.
_DELAY_PROPERTIES = (Property.DELAY, Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_MS,
                     Property.TIMER_DELAY_SEC)


def select_by_hash(queues: list[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    """Selector for ordered messages: the same ``arg`` (an order id) always maps to the same
    queue while the queue count stays the same."""
    from ..protocol.message import java_hash

    key = arg if isinstance(arg, int) else java_hash(str(arg))
    return queues[abs(key) % len(queues)]


class AsyncProducer(SendRetries, SendRequests):
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
        self._counters: dict[str, Iterator[int]] = {}
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
                timeout = timeout or self.send_timeout
                if selector is not None:
                    route = await self._publish_route(message.topic,
                                                      time.monotonic() + timeout)
                    queue = selector(list(route.publish_queues), message, arg)
                # Awaiting the future itself, not a coroutine of the accumulator's, keeps a
                # pipelined send to one coroutine.
                future = accumulator.add(message, props, raw, queue, timeout)
                if future is None:  # no room until batches in flight are answered
                    return await accumulator.send(message, props, raw, queue, timeout)
                return await future
        return await self._send_prepared(message, body, sysflag, props, queue, selector, arg,
                                         timeout or self.send_timeout, self.retries, False)

    async def _send_again(self, message: Message, timeout: float, retries: int,
                          broker_name: str | None = None) -> SendResult:
        """Send ``message`` after a first attempt (to ``broker_name``) whose connection broke
        once the request had gone (the synchronous producer's direct path), within what is
        left of that send's ``timeout`` and ``retries``. The broker may have stored it: it
        is looked up at the group's master (a new one, after a failover) before it is sent
        again."""
        body, sysflag, props = self._prepare(message)
        return await self._send_prepared(message, body, sysflag, props, None, None, None,
                                         timeout, retries, False, maybe_sent=True,
                                         uncertain=broker_name)

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
            elements.append((m.flag, m.body, raw))
            total += len(m.body) + len(raw) + 22
        if total > self.max_message_size:
            raise MessageValidationError(
                f"the batch is {total} bytes; the maximum is {self.max_message_size}")
        self._check_frame(topic, total, 0, "the batch")
        result = await self._send_elements(topic, elements, queue,
                                           timeout or self.send_timeout)
        result.msg_id = ",".join([m.properties[Property.UNIQ_KEY] for m in messages])
        return result

    async def _send_elements(self, topic: str, elements: list[tuple[int, bytes, bytes]],
                             queue: MessageQueue | None, timeout: float) -> SendResult:
        """One SEND_BATCH_MESSAGE of validated ``(flag, body, encoded properties)`` elements;
        the broker's answer names the first message's queue offset and every offset id."""
        body = codec.encode_batch(elements)
        return await self._send_prepared(Message(topic, body), body, 0, encode_properties(
            {Property.UNIQ_KEY: unique_ids.next(), Property.WAIT: "true"}), queue, None, None,
            timeout, self.retries, False, batch=True)


__all__ = ["AsyncProducer", "LatencyFaultTolerance", "select_by_hash"]
