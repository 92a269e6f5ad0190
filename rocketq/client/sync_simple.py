"""The synchronous simple consumer: ``rocketq.SimpleConsumer`` runs its asyncio twin
(``client/simple.py``) on the client's background event loop (``client/sync.py``) and waits
for each receive, ack and change of invisible time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .message import MessageSelector, ReceivedMessage
from .simple import AsyncSimpleConsumer
from .sync import _LoopThread, _options

if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping

    from ..acl import Credentials


class SimpleConsumer:
    """Receives messages and acks them one by one, as RocketMQ 5's SimpleConsumer does (over
    the remoting protocol's POP requests); see ``rocketq.aio.SimpleConsumer``. Members of a
    group share its messages without a rebalance: each receive gets messages no other
    member has out. ``with`` starts it and shuts it down at the end:

    >>> with SimpleConsumer("cg", namesrv="127.0.0.1:9876",            # doctest: +SKIP
    ...                     topics={"Orders": "paid"}, invisible_duration=30) as consumer:
    ...     for message in consumer.receive(max_messages=16):
    ...         handle(message)
    ...         consumer.ack(message)  # not acked within 30 s: delivered again

    Raises:
        ArgumentTypeError: ``group``, ``namesrv``, a topic, an expression or a duration is
            of the wrong type.
        InvalidArgumentError: ``group`` breaks RocketMQ's group name rule, ``namesrv`` is
            not ``host:port[;host:port...]``, a topic name is illegal, or a duration is out
            of range.
    """

    def __init__(self, group: str, namesrv: str, *,
                 topics: Mapping[str, str | MessageSelector] | Iterable[str] | str | None = None,
                 invisible_duration: float = 60.0, await_duration: float = 20.0,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None) -> None:
        values = locals()  # the options, passed on by name: none can be left behind
        options = {name: values[name] for name in _options(AsyncSimpleConsumer)}
        self._loop = _LoopThread.get()
        self._async = self._loop.create(lambda: AsyncSimpleConsumer(group, namesrv, **options))

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Receive messages of ``topic`` that ``expression`` (tags, or a MessageSelector)
        selects; while running, the brokers hear of it at once.

        Raises:
            ArgumentTypeError: ``topic`` is not a str, or ``expression`` is neither a str nor
                a MessageSelector.
            InvalidArgumentError: ``topic`` is not a legal topic name.
        """
        self._loop.call(self._async.subscribe, topic, expression)

    def unsubscribe(self, topic: str) -> None:
        """Receive no more messages of ``topic``.

        Raises:
            Nothing.
        """
        self._loop.call(self._async.unsubscribe, topic)

    def start(self) -> SimpleConsumer:
        """Join the group (subscribe first); starting again does nothing.

        Raises:
            ClientError: no topic is subscribed.
        """
        self._loop.run(self._async.start())
        return self

    def shutdown(self) -> None:
        """Leave the group and close the connections; messages received and not acked are
        delivered again when their invisible time is over.

        Raises:
            Nothing.
        """
        self._loop.run(self._async.shutdown())

    def __enter__(self) -> SimpleConsumer:
        """The consumer, started: subscribe inside, each taking effect at once (``start()``
        there does nothing)."""
        self._loop.run(self._async.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def receive(self, max_messages: int = 16, invisible_duration: float | None = None
                ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` (1 to 32) messages, waiting up to the consumer's
        ``await_duration`` for one; each stays invisible to the group for
        ``invisible_duration`` seconds (default: the consumer's) unless acked.

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
        return self._loop.run(self._async.receive(max_messages, invisible_duration))

    def ack(self, message: ReceivedMessage) -> None:
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
        self._loop.run(self._async.ack(message))

    def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> None:
        """Keep ``message`` invisible for ``seconds`` from now (0 to 12 h); its
        ``receipt_handle`` changes, and the old one no longer acks it.

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
        self._loop.run(self._async.change_invisible_duration(message, seconds))
