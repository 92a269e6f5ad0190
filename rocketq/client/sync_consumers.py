"""The synchronous consumers: ``rocketq.PushConsumer``, ``PullConsumer`` and
``SimpleConsumer`` run their asyncio twins on the client's background event loop
(``client/sync.py``) and wait for each call."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .errors import ClientTimeoutError
from .message import MessageQueue, MessageSelector, ReceivedMessage
from .pull import AsyncPullConsumer
from .push import AsyncPushConsumer, Listener
from .simple import AsyncSimpleConsumer
from .sync import _LoopThread, _options

if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping

    from ..acl import Credentials
    from .allocate import AllocateStrategy

log = logging.getLogger("rocketq.client")

#: How long a shutdown interrupted by a second Ctrl-C still takes to commit and leave.
_INTERRUPTED_COMMIT_TIMEOUT = 5.0


class PushConsumer:
    """Calls a listener with each message of the subscribed topics; see
    ``rocketq.aio.PushConsumer`` for the options. ``with`` starts it, and shuts it down
    (committing the offsets of what was consumed) at the end, even on Ctrl-C, which waits up
    to ``await_termination_when_shutdown`` seconds for the messages being consumed; a second
    Ctrl-C stops that wait, commits what was consumed and exits (``SystemExit(130)``):

    >>> with PushConsumer("cg", namesrv="127.0.0.1:9876") as consumer:  # doctest: +SKIP
    ...     consumer.subscribe("Orders", "paid || refunded")
    ...     consumer.register(lambda msgs: ConsumeResult.SUCCESS)
    ...     threading.Event().wait()  # consume until interrupted

    Without ``with``: subscribe and register, then ``start()`` and later ``shutdown()``.

    Raises:
        ArgumentTypeError: ``group`` or ``namesrv`` is not a str.
        InvalidArgumentError: ``group`` breaks RocketMQ's group name rule, ``namesrv`` is not
            ``host:port[;host:port...]``, or an option is not one of its values.
    """

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
                 tls: bool | ssl.SSLContext | None = None) -> None:
        values = locals()  # the options, passed on by name: none can be left behind
        options = {name: values[name] for name in _options(AsyncPushConsumer)}
        self._loop = _LoopThread.get()
        self._async = self._loop.create(lambda: AsyncPushConsumer(group, namesrv, **options))
        self._async._wait_hint = " (Ctrl-C again to stop waiting)"

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume ``topic``, keeping the messages ``expression`` (tags or SQL) selects.

        Raises:
            Nothing.
        """
        self._loop.call(self._async.subscribe, topic, expression)

    def register(self, listener: Listener) -> None:
        """Set the listener; a plain function runs on the consume thread pool. It returns
        ConsumeResult.SUCCESS or None to acknowledge the messages, RECONSUME_LATER (or
        raises) to have them delivered again; any other answer counts as a failure.

        Raises:
            Nothing.
        """
        self._loop.call(self._async.register, listener)

    def start(self) -> PushConsumer:
        """Start consuming (subscribe and register first); starting again does nothing.

        Raises:
            ClientError: no topic is subscribed or no listener registered.
        """
        self._loop.run(self._async.start())
        return self

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop consuming (no new pulls, no pulled message handed to the listener), commit the
        offsets of what was consumed and leave the group; waits ``timeout`` seconds (by
        default ``await_termination_when_shutdown``) at most for the messages the listener
        is consuming, saying how many. Messages not consumed come again to the group.

        A Ctrl-C (KeyboardInterrupt) during that wait ends it at once: what was consumed is
        committed within seconds, and the process exits with ``SystemExit(130)``, no
        traceback; a third Ctrl-C exits without waiting for the commit.

        Raises:
            ClientTimeoutError: the consumer had not stopped ``timeout`` + 30 s later.
        """
        if timeout is None:
            timeout = self._async.await_termination_when_shutdown
        future = self._loop.submit(self._async.shutdown(timeout))
        deadline = time.monotonic() + timeout + 30
        interrupted = False
        while True:
            try:
                future.result(max(0.0, deadline - time.monotonic()))
                break
            except KeyboardInterrupt:
                if interrupted:
                    log.warning("consumer group %s: interrupted again, exiting without "
                                "waiting for the commit", self._async.group)
                    raise SystemExit(130) from None
                interrupted = True
                log.warning("consumer group %s: interrupted, stopping now: committing what "
                            "was consumed; messages still being consumed come again",
                            self._async.group)
                self.stop_waiting()
                deadline = min(deadline, time.monotonic() + _INTERRUPTED_COMMIT_TIMEOUT)
            except TimeoutError:
                if future.done():
                    raise
                future.cancel()
                if interrupted:
                    raise SystemExit(130) from None
                raise ClientTimeoutError(f"the consumer had not stopped within "
                                         f"{timeout + 30:.0f} s") from None
        if interrupted:
            raise SystemExit(130)

    def stop_waiting(self) -> None:
        """End a shutdown's wait for the listener now (from another thread; a second Ctrl-C
        does it too): the shutdown goes on to commit what was consumed, and messages still in
        the listener come again to the group.

        Raises:
            Nothing.
        """
        self._loop.call(self._async.stop_waiting)

    def __enter__(self) -> PushConsumer:
        """The consumer, started: subscribe and register inside, each taking effect at once
        (no message is pulled before a listener is registered; ``start()`` does nothing)."""
        self._loop.run(self._async.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def client_id(self) -> str:
        return self._async.instance.client_id

    @property
    def consumed_count(self) -> int:
        """Messages consumed since the consumer started."""
        return self._loop.call(lambda: self._async.consumed_count)

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this member consumes now.

        Raises:
            Nothing.
        """
        return self._loop.call(self._async.assigned_queues)

    def rebalance(self) -> None:
        """Work out which queues this member owns now, without waiting for the next round.

        Raises:
            Nothing: a topic without a route is logged and looked up again.
        """
        self._loop.run(self._async.rebalance())

    def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Consume the owned queues of ``topic`` in ``offsets`` from those offsets.

        Raises:
            Nothing.
        """
        self._loop.run(self._async.reset_offsets(topic, offsets))


class PullConsumer:
    """Poll messages, like RocketMQ's DefaultLitePullConsumer; see ``rocketq.aio.PullConsumer``.
    ``with`` starts it, and shuts it down (committing the positions polled) at the end:

    >>> with PullConsumer("cg2", namesrv="127.0.0.1:9876") as consumer:  # doctest: +SKIP
    ...     consumer.subscribe("Orders")
    ...     for message in consumer.poll(timeout=1.0): ...
    ...     for message in consumer: ...  # one at a time, until shut down

    Raises:
        ArgumentTypeError: ``group`` or ``namesrv`` is not a str.
        InvalidArgumentError: ``group`` breaks RocketMQ's group name rule, ``namesrv`` is not
            ``host:port[;host:port...]``, or an option is not one of its values.
    """

    def __init__(self, group: str, namesrv: str, *, from_where: str = "last",
                 consume_timestamp: int | None = None,
                 allocate: AllocateStrategy | str = "averagely", pull_batch_size: int = 32,
                 auto_commit: bool = True, auto_commit_interval: float = 5.0,
                 pull_threshold_for_queue: int = 1000, max_poll_records: int = 1024,
                 suspend_timeout: float = 20.0, rebalance_interval: float = 20.0,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None) -> None:
        values = locals()  # the options, passed on by name: none can be left behind
        options = {name: values[name] for name in _options(AsyncPullConsumer)}
        self._loop = _LoopThread.get()
        self._async = self._loop.create(lambda: AsyncPullConsumer(group, namesrv, **options))

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume ``topic`` with the group, keeping the messages ``expression`` selects.

        Raises:
            Nothing.
        """
        self._loop.call(self._async.subscribe, topic, expression)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no group rebalancing).

        Raises:
            Nothing.
        """
        self._loop.call(self._async.assign, list(queues))

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The queues of ``topic``, asked of the NameServer now (for ``assign``).

        Raises:
            NameServerError: no NameServer answered.
            ClientError: the topic has no route.
        """
        return self._loop.run(self._async.fetch_queues(topic))

    def start(self) -> PullConsumer:
        """Start pulling (subscribe or assign first); starting again does nothing.

        Raises:
            ClientError: no topic is subscribed and no queue assigned.
        """
        self._loop.run(self._async.start())
        return self

    def shutdown(self) -> None:
        """Stop pulling, commit the positions polled and leave the group.

        Raises:
            Nothing.
        """
        self._loop.run(self._async.shutdown())

    def __enter__(self) -> PullConsumer:
        """The consumer, started: subscribe or assign inside, each taking effect at once
        (``start()`` there does nothing)."""
        self._loop.run(self._async.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def poll(self, timeout: float = 5.0) -> list[ReceivedMessage]:
        """The messages fetched since the last poll, waiting ``timeout`` seconds at most for some;
        an empty list when none came.

        Raises:
            ClientError: the consumer is not started.
            NameServerError: none came, and the consumer has no queue to read because no
                NameServer answered (the error names the addresses tried).
        """
        return self._loop.run(self._async.poll(timeout))

    def __iter__(self) -> Iterator[ReceivedMessage]:
        """``for message in consumer``: the messages one at a time as they arrive, until the
        consumer is shut down (by another thread, say). A message counts as consumed once the
        loop asks for the next one; the one a loop left by ``break`` or an exception comes
        again (see ``rocketq.aio.PullConsumer.__aiter__``).

        Raises:
            ClientError: the consumer is not started.
        """
        messages = self._async.__aiter__()

        async def step() -> tuple[bool, ReceivedMessage | None]:
            try:
                return True, await messages.__anext__()
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                future = self._loop.submit(step())
                try:
                    more, message = future.result()
                except BaseException:
                    future.cancel()  # Ctrl-C: stop waiting on the loop too
                    raise
                if not more:
                    return
                assert message is not None
                yield message
        finally:
            # Closing the iteration hands back the message the loop was on (if the loop
            # thread is still there to do it).
            async def close() -> None:
                await messages.aclose()

            with contextlib.suppress(RuntimeError, TimeoutError):
                self._loop.run(close(), 10)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer pulls from now.

        Raises:
            Nothing.
        """
        return self._loop.call(self._async.assignment)

    def assigned_queues(self) -> list[MessageQueue]:
        """The queues this member consumes now.

        Raises:
            Nothing.
        """
        return self._loop.call(self._async.assigned_queues)

    def rebalance(self) -> None:
        """Work out which queues this member owns now, without waiting for the next round.

        Raises:
            Nothing: a topic without a route is logged and looked up again.
        """
        self._loop.run(self._async.rebalance())

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume ``mq`` from ``offset`` next.

        Raises:
            ClientError: ``mq`` is not assigned to this consumer.
        """
        self._loop.call(self._async.seek, mq, offset)

    def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Seek the owned queues of ``topic`` in ``offsets`` there and commit the positions.

        Raises:
            Nothing.
        """
        self._loop.run(self._async.reset_offsets(topic, offsets))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        """Consume ``mq`` from its first stored message next.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            BrokerError: the broker refused the offset query.
            ClientError: ``mq`` is not assigned to this consumer.
        """
        self._loop.run(self._async.seek_to_begin(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        """Consume ``mq`` from the messages stored after now.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            BrokerError: the broker refused the offset query.
            ClientError: ``mq`` is not assigned to this consumer.
        """
        self._loop.run(self._async.seek_to_end(mq))

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            BrokerError: the broker refused the query.
        """
        return self._loop.run(self._async.offset_for_timestamp(mq, timestamp_ms))

    def commit(self) -> None:
        """Commit the position after the last polled message of every queue, now.

        Raises:
            Nothing: a commit that fails is logged, and made again later.
        """
        self._loop.run(self._async.commit())

    def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq`` on the broker, or None when it has none.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
        """
        return self._loop.run(self._async.committed(mq))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop returning messages of these queues from ``poll`` until ``resume``.

        Raises:
            Nothing.
        """
        self._loop.call(self._async.pause, list(queues))

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        """Return messages of these paused queues from ``poll`` again.

        Raises:
            Nothing.
        """
        self._loop.call(self._async.resume, list(queues))


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

