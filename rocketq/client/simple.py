"""The simple consumer (asyncio core), RocketMQ 5's SimpleConsumer over remoting POP.

No queue is anybody's: each ``receive`` asks a master broker of a subscribed topic
(POP_MESSAGE, every queue of the topic on that broker, long-polled) for the group's next
messages, which the broker then keeps invisible to the group for ``invisible_duration``. Each
message comes with a receipt handle (RocketMQ's ``POP_CK``); ``ack`` consumes it
(ACK_MESSAGE), ``change_invisible_duration`` gives it more (or less) time
(CHANGE_MESSAGE_INVISIBLETIME), and one not acked in time is delivered again, to any member,
with its ``delivery_attempt`` one higher. The broker keeps the group's progress, so members
come and go without a rebalance, and a 4.x consumer of the same group reads on from where
they left off. The receipt handle's format is in ``receipts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..acl import Credentials
from ..protocol import (
    RemotingCommand,
    RequestCode,
    ResponseCode,
    validate_topic,
)
from ..protocol.filter import Subscription
from ..remoting import RemotingError, cancel_tasks
from .checks import check_group, check_type
from .errors import ArgumentTypeError, BrokerError, ClientError, InvalidArgumentError
from .instance import ClientInstance, no_master
from .message import MessageSelector, ReceivedMessage
from .pulled import pulled_messages
from .receipts import POP_CK, ReceiptHandle, derived_handle, offset_info

log = logging.getLogger("rocketq.client")

#: The most messages one receive may ask for (what brokers serve in one POP_MESSAGE).
MAX_MESSAGES = 32
#: The bounds of an invisible time, in seconds: what the broker takes over remoting (1 s) up
#: to RocketMQ's 12 hours.
MIN_INVISIBLE = 1.0
MAX_INVISIBLE = 12 * 3600.0
#: The longest a receive waits for a message, in seconds (the longest long poll a broker
#: holds a POP_MESSAGE for).
MAX_AWAIT = 60.0
#: Where a group new to a queue starts (RocketMQ's ConsumeInitMode.MAX, as the 5.x proxy
#: asks): at the end, or at the first message while the queue still holds it.
INIT_MODE_MAX = 1
#: Seconds to wait for an answer to an ack or an invisible-time change (RocketMQ's 3 s);
#: a receive waits that much longer than it long-polls.
REQUEST_TIMEOUT = 3.0
#: Response codes of a receive that found nothing.
_EMPTY = (ResponseCode.POLLING_TIMEOUT, ResponseCode.NO_MESSAGE, ResponseCode.PULL_NOT_FOUND)


def _seconds(value: Any, name: str, low: float, high: float) -> float:
    """``value`` (seconds, an int or float) when it lies within ``low``..``high``."""
    check_type(value, (int, float), name, "seconds as an int or float")
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be seconds as an int or float, not bool")
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be from {low:g} to {high:g} seconds, not "
                                   f"{value!r}")
    return float(value)


def _subscription(topic: Any, expression: Any) -> Subscription:
    """The subscription of ``topic`` to ``expression``, both checked."""
    check_type(topic, str, "topic", "a str")
    try:
        validate_topic(topic)
    except ValueError as exc:
        raise InvalidArgumentError(f"topic: {exc}") from None
    if isinstance(expression, MessageSelector):
        text, kind = expression.expression, expression.type
    else:
        check_type(expression, str, "expression",
                   "a tag expression (a str like 'a || b') or a MessageSelector")
        text, kind = expression, "TAG"
    return Subscription.parse(topic, text, kind, int(time.time() * 1000))


class AsyncSimpleConsumer:
    """Receives messages of the subscribed topics and acks them one by one; see the module's
    docstring and ``rocketq.SimpleConsumer``.

    ``topics`` subscribes at once: a topic name, names (every message of each), or a
    mapping of names to tag expressions or MessageSelector objects; ``subscribe`` adds more
    later. ``invisible_duration`` (seconds, 1 s to 12 h) is how long a received message
    stays invisible to the group unless ``receive`` says otherwise; ``await_duration``
    (seconds, 0 to 60) how long a receive waits for a message when none is there.

    Raises:
        ArgumentTypeError: ``group``, ``namesrv``, a topic, an expression or a duration is
            of the wrong type.
        InvalidArgumentError: ``group`` breaks RocketMQ's group name rule, ``namesrv`` is
            not ``host:port[;host:port...]``, a topic name is illegal, or a duration is out
            of range.
    """

    #: How the group's members show in admin tools (RocketMQ's ConsumeType.CONSUME_POP).
    consume_type = "CONSUME_POP"

    def __init__(self, group: str, namesrv: str, *,
                 topics: Mapping[str, str | MessageSelector] | Iterable[str] | str | None = None,
                 invisible_duration: float = 60.0, await_duration: float = 20.0,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None,
                 instance: ClientInstance | None = None) -> None:
        self.group = check_group(group, "consumer")
        self.invisible_duration = _seconds(invisible_duration, "invisible_duration",
                                           MIN_INVISIBLE, MAX_INVISIBLE)
        self.await_duration = _seconds(await_duration, "await_duration", 0.0, MAX_AWAIT)
        self.subscriptions: dict[str, Subscription] = {}
        if isinstance(topics, str):
            topics = [topics]
        if isinstance(topics, Mapping):
            for topic, expression in topics.items():
                self.subscriptions[topic] = _subscription(topic, expression)
        elif topics is not None:
            check_type(topics, Iterable, "topics",
                       "a topic name, names, or a mapping of names to expressions")
            for topic in topics:
                self.subscriptions[topic] = _subscription(topic, "*")
        self.instance = instance or ClientInstance(namesrv, credentials=credentials, tls=tls)
        self.running = False
        self._turn = 0  # round robin over the (topic, broker) pairs to receive from
        self._tasks: list[asyncio.Task[Any]] = []
        #: The instance's heartbeat before this consumer added its group to it.
        self._previous_heartbeat: Callable[[], dict[str, Any]] | None = None

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Receive messages of ``topic`` whose tag matches ``expression`` (``"*"``, or tags
        joined by ``||``), or that a ``MessageSelector.by_sql(...)`` condition selects (the
        broker needs ``enablePropertyFilter=true`` for SQL)."""
        self.subscriptions[topic] = _subscription(topic, expression)
        self._changed()

    def unsubscribe(self, topic: str) -> None:
        """Receive no more messages of ``topic``."""
        if self.subscriptions.pop(topic, None) is not None:
            self._changed()

    def _changed(self) -> None:
        """Tell the brokers of the new subscriptions now, not at the next heartbeat."""
        if not self.running:
            return
        task = asyncio.get_running_loop().create_task(self._announce())
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _announce(self) -> None:
        try:
            for topic in list(self.subscriptions):
                if topic not in self.instance.routes:
                    # Learn the brokers of a new topic first, so the heartbeat reaches them.
                    with contextlib.suppress(ClientError, RemotingError, OSError):
                        await self.instance.route(topic, refresh=True)
            await self.instance.heartbeat_all()
        except (ClientError, RemotingError, OSError) as exc:
            log.info("heartbeat of group %s after a change failed: %s", self.group, exc)

    def _heartbeat_data(self) -> dict[str, Any]:
        return {"groupName": self.group, "consumeType": self.consume_type,
                "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()]}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Join the group (subscribe first; ``async with`` starts the consumer on entry and
        lets subscriptions come after). Starting again does nothing."""
        await self._start(require_subscription=True)

    async def _start(self, require_subscription: bool) -> None:
        if self.running:
            return
        if require_subscription and not self.subscriptions:
            raise ClientError("subscribe to a topic before starting")
        self.running = True
        instance = self.instance
        previous = self._previous_heartbeat = instance.heartbeat_data

        def heartbeat() -> dict[str, Any]:
            data = dict(previous())
            data["consumerDataSet"] = [*data.get("consumerDataSet", []),
                                       self._heartbeat_data()]
            return data

        instance.heartbeat_data = heartbeat
        # Brokers tell a group's members when one comes or goes; nothing here rebalances.
        instance.on_request.setdefault(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                       lambda conn, cmd: None)
        await instance.start()
        for topic in list(self.subscriptions):
            try:
                await instance.route(topic, refresh=True)
            except (ClientError, RemotingError, OSError) as exc:
                log.warning("no route for %s yet: %s", topic, exc)
        await instance.heartbeat_all()

    async def shutdown(self) -> None:
        """Leave the group and close the connections. Messages received and not acked are
        delivered again once their invisible time is over."""
        if not self.running:
            return
        self.running = False
        await cancel_tasks(self._tasks)
        self._tasks = []
        if self._previous_heartbeat is not None:
            self.instance.heartbeat_data = self._previous_heartbeat
            self._previous_heartbeat = None
        await self.instance.unregister(None, self.group)
        await self.instance.stop()

    async def __aenter__(self) -> AsyncSimpleConsumer:
        """The consumer, started: subscribe inside (each takes effect at once; an ``await
        start()`` there does nothing). Leaving shuts it down."""
        await self._start(require_subscription=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # ------------------------------------------------------------------ receive
    async def receive(self, max_messages: int = 16, invisible_duration: float | None = None
                      ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` (1 to 32) messages for the group, from one master broker of
        a subscribed topic (the next one in turn), waiting up to ``await_duration`` seconds
        for one to arrive; an empty list when none did. They stay invisible to the group for
        ``invisible_duration`` seconds (default: the consumer's): ack each before then, or it
        is delivered again.

        Raises:
            ArgumentTypeError: ``max_messages`` or ``invisible_duration`` is of the wrong type.
            InvalidArgumentError: ``max_messages`` or ``invisible_duration`` is out of range.
            NameServerError: no NameServer answered for a topic's route.
            NoMasterError: the broker groups of the subscribed topics have no master now.
            BrokerError: the broker refused the receive (a topic or group it does not know,
                no permission, a bad filter expression).
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: the consumer is not started, subscribes to nothing, or none of its
                topics has a route.
        """
        check_type(max_messages, int, "max_messages", f"an int from 1 to {MAX_MESSAGES}")
        if not 1 <= max_messages <= MAX_MESSAGES:
            raise InvalidArgumentError(f"max_messages must be from 1 to {MAX_MESSAGES}, not "
                                       f"{max_messages}")
        invisible = self.invisible_duration if invisible_duration is None else _seconds(
            invisible_duration, "invisible_duration", MIN_INVISIBLE, MAX_INVISIBLE)
        if not self.running:
            raise ClientError("the consumer is not started")
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before receiving")
        topic, broker = await self._next_target()
        sub = self.subscriptions.get(topic) or Subscription.parse(topic, "*")
        cmd = RemotingCommand.request(RequestCode.POP_MESSAGE, {
            "consumerGroup": self.group, "topic": topic, "queueId": -1,
            "maxMsgNums": max_messages, "invisibleTime": round(invisible * 1000),
            "pollTime": round(self.await_duration * 1000),
            "bornTime": int(time.time() * 1000), "initMode": INIT_MODE_MAX,
            "expType": sub.expression_type, "exp": sub.expression, "order": False,
            "bname": broker})
        try:
            response = await self.instance.invoke_broker(
                broker, cmd, self.await_duration + REQUEST_TIMEOUT, topic)
        except (RemotingError, OSError):
            if not self.running:
                return []  # shut down while it waited
            # The broker may be gone: learn the route now (a new master may serve).
            with contextlib.suppress(ClientError, RemotingError, OSError):
                await self.instance.update_route(topic)
            raise
        if response.code in _EMPTY:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, f"receive from {topic} on {broker}: "
                                             f"{response.remark or 'no remark'}")
        messages = pulled_messages(response.body, broker)
        header = response.ext_fields
        starts = offset_info(header.get("startOffsetInfo"))
        out = []
        for message in messages:
            message.receipt_handle = message.properties.get(POP_CK) or derived_handle(
                message, header, starts, broker)
            message.topic = topic  # a retry shows the topic it was sent to
            if not sub.matches_tags(message.tags):
                # A tag whose hash code matches one of ours (brokers filter by hash codes):
                # not ours, so it is consumed here, as RocketMQ's proxy does.
                with contextlib.suppress(ClientError, RemotingError, OSError):
                    await self.ack(message)
                continue
            out.append(message)
        return out

    async def _next_target(self) -> tuple[str, str]:
        """The next (topic, broker name) to receive from, round robin over the master
        brokers of the subscribed topics."""
        pairs: list[tuple[str, str]] = []
        masterless: dict[str, list[str]] = {}
        for topic in list(self.subscriptions):
            route = await self.instance.route(topic)
            if route is None:
                continue
            for name in sorted({mq.broker_name for mq in route.subscribe_queues}):
                if self.instance.broker_addr(name) is not None:
                    pairs.append((topic, name))
                else:
                    masterless.setdefault(topic, []).append(name)
        if not pairs:
            if masterless:
                topic, brokers = next(iter(masterless.items()))
                raise no_master(topic, brokers)
            names = ", ".join(sorted(self.subscriptions))
            raise ClientError(f"No route info of the subscribed topics ({names}): create "
                              "them, or send to them first")
        pair = pairs[self._turn % len(pairs)]
        self._turn += 1
        return pair

    # ------------------------------------------------------------------ ack
    def _handle(self, message: Any) -> ReceiptHandle:
        check_type(message, ReceivedMessage, "message", "a ReceivedMessage")
        text = message.receipt_handle
        if not text:
            raise InvalidArgumentError(
                "message: it has no receipt handle (only messages a SimpleConsumer received "
                "can be acked)")
        try:
            return ReceiptHandle(text)
        except ValueError:
            raise InvalidArgumentError(
                f"message: its receipt handle {text[:80]!r} is not one") from None

    async def ack(self, message: ReceivedMessage) -> None:
        """Consume ``message``: the group never gets it again.

        Raises:
            ArgumentTypeError: ``message`` is not a ReceivedMessage.
            InvalidArgumentError: ``message`` has no receipt handle (a SimpleConsumer did
                not receive it).
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the message's broker group has no master now.
            BrokerError: the broker refused the ack: the handle expired (the message's
                invisible time ended; it is delivered again), or it is not the message's
                current handle.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: the message's broker is not in the topic's route.
        """
        handle = self._handle(message)
        cmd = RemotingCommand.request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": self.group, "topic": handle.real_topic(message.topic, self.group),
            "queueId": handle.queue_id, "extraInfo": message.receipt_handle,
            "offset": handle.queue_offset, "bname": handle.broker})
        response = await self.instance.invoke_broker(handle.broker, cmd, REQUEST_TIMEOUT,
                                                     message.topic)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, f"ack of message {message.msg_id} refused by "
                              f"{handle.broker}: {response.remark or 'no remark'}")

    async def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> None:
        """Keep ``message`` invisible to the group for ``seconds`` from now (0 to 12 h; 0
        hands it back at once), instead of what is left of its invisible time. Its
        ``receipt_handle`` changes: the old one no longer acks it.

        Raises:
            ArgumentTypeError: ``message`` is not a ReceivedMessage, or ``seconds`` is not a
                number.
            InvalidArgumentError: ``message`` has no receipt handle, or ``seconds`` is out of
                range.
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the message's broker group has no master now.
            BrokerError: the broker refused the change: the handle expired, the message was
                acked, or it is not the message's current handle.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: the message's broker is not in the topic's route.
        """
        handle = self._handle(message)
        duration = _seconds(seconds, "seconds", 0.0, MAX_INVISIBLE)
        cmd = RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": self.group, "topic": handle.real_topic(message.topic, self.group),
            "queueId": handle.queue_id, "extraInfo": message.receipt_handle,
            "offset": handle.queue_offset, "invisibleTime": round(duration * 1000),
            "bname": handle.broker})
        response = await self.instance.invoke_broker(handle.broker, cmd, REQUEST_TIMEOUT,
                                                     message.topic)
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, f"invisible time change of message "
                              f"{message.msg_id} refused by {handle.broker}: "
                              f"{response.remark or 'no remark'}")
        header = response.ext_fields
        # The broker keeps the message under a new checkpoint of its own, which starts at
        # its offset (ExtraInfoUtil.buildExtraInfo, as RocketMQ's clients rebuild it).
        text = (f"{handle.queue_offset} {header.get('popTime', '0')} "
                f"{header.get('invisibleTime', round(duration * 1000))} "
                f"{header.get('reviveQid', '0')} {handle.retry} {handle.broker} "
                f"{handle.queue_id} {handle.queue_offset}")
        message.receipt_handle = text
        if POP_CK in message.properties:
            message.properties[POP_CK] = text


__all__ = ["AsyncSimpleConsumer"]
