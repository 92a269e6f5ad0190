"""The synchronous pull consumer: ``rocketq.PullConsumer`` runs its asyncio twin
(``client/pull.py``) on the client's background event loop (``client/sync.py``) and waits
for each call; iterating it hands over the messages one at a time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .message import MessageQueue, MessageSelector, ReceivedMessage
from .pull import AsyncPullConsumer
from .sync import _LoopThread, _options

if TYPE_CHECKING:
    import ssl

    from ..acl import Credentials
    from .allocate import AllocateStrategy


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
