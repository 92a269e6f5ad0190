"""The synchronous push consumer: ``rocketq.PushConsumer`` runs its asyncio twin
(``client/push.py``) on the client's background event loop (``client/sync.py``), waits for
each call, and turns a Ctrl-C during shutdown into a quick commit and exit."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .errors import ClientTimeoutError
from .message import MessageQueue, MessageSelector
from .push import AsyncPushConsumer, Listener
from .sync import _LoopThread, _options

if TYPE_CHECKING:
    import ssl

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
