"""The synchronous API: thin wrappers that run the asyncio clients on one background event
loop thread per process, so plain Python code (and threads) can produce and consume."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..protocol import Property
from ..protocol.command import FLAG_RESPONSE, FrameDecoder, ProtocolError, RemotingCommand, encode
from ..remoting import ConnectionClosedError, RemotingTimeoutError, new_event_loop
from .admin import DEFAULT_TOPIC_QUEUES, AsyncAdmin, ConsumerProgress
from .errors import BrokerError, ClientError, ClientTimeoutError
from .message import Message, MessageQueue, MessageSelector, ReceivedMessage, SendResult
from .producer import AsyncProducer, Selector
from .pull import AsyncPullConsumer
from .push import AsyncPushConsumer, Listener
from .simple import AsyncSimpleConsumer
from .transaction import AsyncTransactionProducer, TransactionListener, TransactionSendResult

if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping

    from ..acl import Credentials
    from .allocate import AllocateStrategy

T = TypeVar("T")

def _options(cls: type) -> tuple[str, ...]:
    """The options of an asyncio client the synchronous one takes: its keyword-only
    parameters but ``instance``, a ClientInstance of an event loop the caller does not run."""
    return tuple(p.name for p in inspect.signature(cls).parameters.values()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "instance")


_PRODUCER_OPTIONS = _options(AsyncProducer)


class _LoopThread:
    """A daemon thread running an event loop (uvloop when installed)."""

    _instance: _LoopThread | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self._run, name="rocketq-client-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @classmethod
    def get(cls) -> _LoopThread:
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = _LoopThread()
            return cls._instance

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a synchronous rocketq call was made from the client's own "
                               "event loop; use the rocketq.aio classes there")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except TimeoutError as exc:
            # A timeout is a ClientError like the client's other errors: the call's own
            # (asyncio's TimeoutError) or the wait for the call's result here.
            if isinstance(exc, ClientError):
                raise
            if future.done() and not future.cancelled() and future.exception() is exc:
                raise ClientTimeoutError(str(exc) or "the call timed out") from exc
            future.cancel()
            raise ClientTimeoutError(f"no result within {timeout} s") from None

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a plain function on the loop thread and return its result: the asyncio
        clients' state belongs to the loop, so even their non-coroutine methods (subscribe,
        register, seek, ...) run there, never beside a task that uses the same state."""
        async def on_loop() -> T:
            return fn(*args, **kwargs)
        return self.run(on_loop())

    def create(self, factory: Callable[[], T]) -> T:
        """Build an object inside the loop (asyncio objects bind to the running loop)."""
        return self.call(factory)


async def _refresh_route(producer: AsyncProducer, topic: str) -> None:
    with contextlib.suppress(Exception):
        await producer.instance.update_route(topic)


class _MaybeSent:
    """What a direct send returns when its connection broke after the request went: the
    broker may have stored the message, so the loop's retries must not wait for a new master
    to send it again (it may hold the message already)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _DirectSends:
    """Sends made on the caller's own thread, over its own blocking connection to the broker,
    when the producer already knows the route: no hand-off to the loop thread and back (the
    way redis-py's synchronous client works). Anything out of the ordinary (no route yet, a
    refused or failed send, fault tolerance or auto-batching turned on) returns None and the
    send goes through the loop, with its retries."""

    def __init__(self, producer: AsyncProducer, loop: _LoopThread) -> None:
        self.producer = producer
        self.loop = loop
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()

    def send(self, message: Message, timeout: float | None) -> SendResult | _MaybeSent | None:
        p = self.producer
        if not p.started or p.accumulator is not None or p.fault is not None or \
                not isinstance(message, Message):
            return None
        route = p.instance.routes.get(message.topic)
        if route is None or not route.publish_queues:
            return None
        body, sysflag, props = p._prepare(message)
        if message.properties.get(Property.MSG_TYPE) == "reply":
            return None
        mq = p._choose(route.publish_queues, None)
        addr = p.instance.broker_addr(mq.broker_name)
        if addr is None:
            return None
        cmd = p._request(mq, message, body, sysflag, props, False, False)
        try:
            response = self._call(addr, cmd, timeout or p.send_timeout)
        except TimeoutError:
            # The broker may be gone or paused (a failover): learn the route now, as the
            # loop's path does, so the next send goes to the group's new master.
            self.loop.submit(_refresh_route(p, message.topic))
            raise RemotingTimeoutError(f"no response to a send from {addr} within "
                                       f"{timeout or p.send_timeout:.1f} s") from None
        except (OSError, ProtocolError) as exc:
            # The loop's path reconnects, learns routes and retries; told whether the broker
            # may hold the message already (the connection broke after the request went).
            return _MaybeSent(exc) if getattr(exc, "maybe_sent", False) else None
        try:
            return p._result(response, mq, message)
        except BrokerError:
            return None

    def _call(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        conns: dict[str, tuple[socket.socket, FrameDecoder]] = \
            self._local.__dict__.setdefault("conns", {})
        conn = conns.get(addr)
        if conn is None:
            host, port = addr.rsplit(":", 1)
            sock = socket.create_connection((host, int(port)), timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = self.producer.instance.remoting.ssl
            if tls is not None:
                try:
                    sock = tls.wrap_socket(sock, server_hostname=host)
                except BaseException:
                    sock.close()
                    raise
            conn = conns[addr] = (sock, FrameDecoder())
            with self._lock:
                self._sockets.add(sock)
        sock, decoder = conn
        signer = self.producer.instance.remoting.signer
        if signer is not None:
            signer(cmd)
        try:
            sock.settimeout(timeout)
            sock.sendall(encode(cmd))
            while True:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionResetError("the broker closed the connection")
                for frame in decoder.feed(data):
                    if frame.flag & FLAG_RESPONSE and frame.opaque == cmd.opaque:
                        return frame
        except BaseException as exc:
            del conns[addr]  # its state is unknown now: the next send connects afresh
            self._close(sock)
            if isinstance(exc, (OSError, ProtocolError)):  # after the request went
                exc.maybe_sent = True  # type: ignore[attr-defined]
            raise

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        sock.close()

    def close(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            sock.close()


class Producer:
    """Sends messages; the options are those of ``rocketq.aio.Producer`` (which describes
    them), except its ``instance``.

    >>> with Producer("pg", namesrv="127.0.0.1:9876") as producer:   # doctest: +SKIP
    ...     result = producer.send(Message("Orders", b"hello", tags="paid"))

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
                 tls: bool | ssl.SSLContext | None = None) -> None:
        values = locals()  # the options, passed on by name: none can be left behind
        self._start_loop(group, namesrv, {name: values[name] for name in _PRODUCER_OPTIONS})

    def _start_loop(self, group: str, namesrv: str, options: dict[str, Any]) -> None:
        """Build the asyncio producer on the client's loop thread."""
        self._loop = _LoopThread.get()
        self._async = self._loop.call(self._new_async, group, namesrv, options)
        self._direct = _DirectSends(self._async, self._loop)

    def _new_async(self, group: str, namesrv: str, options: dict[str, Any]) -> AsyncProducer:
        """The asyncio producer this one drives (built on the loop thread)."""
        return AsyncProducer(group, namesrv, **options)

    @property
    def group(self) -> str:
        return self._async.group

    def start(self) -> Producer:
        """Start the producer; nothing is sent until the first send.

        Raises:
            Nothing.
        """
        self._loop.run(self._async.start())
        return self

    def shutdown(self) -> None:
        """Send what auto-batching still holds, tell the brokers the producer left, and close
        its connections.

        Raises:
            Nothing.
        """
        self._direct.close()
        self._loop.run(self._async.shutdown())

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def send(self, message: Message, *, queue: MessageQueue | None = None,
             selector: Selector | None = None, arg: Any = None,
             timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer (retries on failure); see
        ``rocketq.aio.Producer.send``.

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
        if queue is None and selector is None:
            began = time.monotonic()
            result = self._direct.send(message, timeout)
            if isinstance(result, _MaybeSent):
                # That was the first attempt: the others get what is left of the send.
                left = (timeout or self._async.send_timeout) - (time.monotonic() - began)
                if left <= 0 or self._async.retries < 1:
                    raise ConnectionClosedError(
                        f"the connection broke during a send: {result.error}") from None
                return self._loop.run(self._async._send_again(message, left,
                                                              self._async.retries - 1))
            if result is not None:
                return result
        return self._loop.run(self._async.send(message, queue=queue, selector=selector,
                                               arg=arg, timeout=timeout))

    def send_async(self, message: Message, callback: Callable[
            [concurrent.futures.Future[SendResult]], None] | None = None, *,
                   queue: MessageQueue | None = None, selector: Selector | None = None,
                   arg: Any = None, timeout: float | None = None
                   ) -> concurrent.futures.Future[SendResult]:
        """``send`` without blocking: the future holds the SendResult or the exception, and
        ``callback(future)`` runs when it is done (on the client's loop thread, so it must
        not make synchronous rocketq calls).

        Raises:
            Nothing: the errors of ``send`` are set on the future instead.
        """
        future = self._loop.submit(self._async.send(message, queue=queue, selector=selector,
                                                    arg=arg, timeout=timeout))
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def request(self, message: Message, timeout: float = 3.0) -> ReceivedMessage:
        """Send a request and return the reply a consumer sent with ``create_reply``.

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
        return self._loop.run(self._async.request(message, timeout), timeout + 30)

    def send_oneway(self, message: Message, *, queue: MessageQueue | None = None,
                    selector: Selector | None = None, arg: Any = None) -> None:
        """Send without waiting for any answer.

        Raises:
            ArgumentTypeError: ``message`` is not a Message.
            MessageValidationError: the message breaks a rule; nothing was sent.
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the topic's broker groups had no master until the send timeout.
            ConnectionClosedError: the broker could not be reached.
            ClientError: no route for the topic and no ``TBW102`` to create it from.
        """
        self._loop.run(self._async.send_oneway(message, queue=queue, selector=selector,
                                               arg=arg))

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None,
                   timeout: float | None = None) -> SendResult:
        """Send messages of one topic in one request.

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
        return self._loop.run(self._async.send_batch(messages, queue=queue, timeout=timeout))


class TransactionProducer(Producer):
    """A producer of transactional messages; ``listener`` runs the local transactions and
    answers the brokers' checks, on ``check_threads`` threads. The other options are those of
    ``rocketq.Producer``; see ``rocketq.aio.TransactionProducer``.

    >>> class Orders:                                                    # doctest: +SKIP
    ...     def execute_local_transaction(self, message, arg):
    ...         save_order(arg)
    ...         return LocalTransactionState.COMMIT
    ...     def check_local_transaction(self, message):
    ...         return LocalTransactionState.COMMIT if order_saved(message.keys[0]) \
    ...             else LocalTransactionState.ROLLBACK
    >>> with TransactionProducer("tx-group", Orders(), namesrv=NAMESRV) as producer:
    ...     producer.send_message_in_transaction(Message("Orders", b"..."), arg=order)

    Raises:
        ArgumentTypeError: ``group`` or ``namesrv`` is not a str.
        InvalidArgumentError: ``group`` breaks RocketMQ's group name rule, or ``namesrv`` is not
            ``host:port[;host:port...]``.
    """

    _async: AsyncTransactionProducer

    def __init__(self, group: str, listener: TransactionListener, namesrv: str, *,
                 check_threads: int = 4, send_timeout: float = 3.0, retries: int = 2,
                 retries_async: int = 2, compress_over: int = 4096, compress_level: int = 5,
                 max_message_size: int = 4 * 1024 * 1024,
                 retry_another_broker_when_not_store_ok: bool = False,
                 latency_fault_tolerance: bool = False, default_topic_queue_nums: int = 4,
                 auto_batch: bool = False, batch_max_delay_ms: float = 10,
                 batch_max_bytes: int = 32 * 1024,
                 total_batch_max_bytes: int = 32 * 1024 * 1024,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None) -> None:
        values = locals()  # the options, passed on by name: none can be left behind
        self._listener = listener
        self._check_threads = check_threads
        self._start_loop(group, namesrv, {name: values[name] for name in _PRODUCER_OPTIONS})

    def _new_async(self, group: str, namesrv: str, options: dict[str, Any]
                   ) -> AsyncTransactionProducer:
        return AsyncTransactionProducer(group, self._listener, namesrv,
                                        check_threads=self._check_threads, **options)

    def send_message_in_transaction(self, message: Message, arg: Any = None
                                    ) -> TransactionSendResult:
        """Store a half message, run the local transaction, then commit or roll back.

        Raises:
            ArgumentTypeError: ``message`` is not a Message.
            MessageValidationError: the message breaks a rule or is delayed; nothing was sent.
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the topic's broker groups had no master until the send timeout.
            BrokerError: the broker refused the half message.
            ConnectionClosedError: the broker could not be reached (after the retries).
            ClientTimeoutError: no answer within the send timeout.
            ClientError: no route for the topic and no ``TBW102`` to create it from.
        """
        return self._loop.run(self._async.send_message_in_transaction(message, arg))


class PushConsumer:
    """Calls a listener with each message of the subscribed topics; see
    ``rocketq.aio.PushConsumer`` for the options. ``with`` starts it, and shuts it down
    (committing the offsets of what was consumed) at the end, even on Ctrl-C:

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
                 offset_store_dir: str | None = None,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None) -> None:
        values = locals()  # the options, passed on by name: none can be left behind
        options = {name: values[name] for name in _options(AsyncPushConsumer)}
        self._loop = _LoopThread.get()
        self._async = self._loop.create(lambda: AsyncPushConsumer(group, namesrv, **options))

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

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop consuming, commit the offsets of what was consumed and leave the group; waits
        ``timeout`` seconds at most for listeners still running.

        Raises:
            ClientTimeoutError: the consumer had not stopped ``timeout`` + 30 s later.
        """
        self._loop.run(self._async.shutdown(timeout), timeout + 30)

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


class Admin:
    """Topics, consumer progress and message queries; see ``rocketq.aio.Admin``.

    >>> with Admin(namesrv="127.0.0.1:9876") as admin:                # doctest: +SKIP
    ...     admin.create_topic("Orders", queues=8)

    Raises:
        ArgumentTypeError: ``namesrv`` is not a str.
        InvalidArgumentError: ``namesrv`` is not ``host:port[;host:port...]``.
    """

    def __init__(self, namesrv: str, *,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None) -> None:
        self._loop = _LoopThread.get()
        self._async = self._loop.create(
            lambda: AsyncAdmin(namesrv, credentials=credentials, tls=tls))

    def close(self) -> None:
        """Close the admin's connections.

        Raises:
            Nothing.
        """
        self._loop.run(self._async.close())

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """``broker name -> master address`` of every broker (of ``cluster``, if given).

        Raises:
            NameServerError: no NameServer answered.
            ClientError: the NameServer refused the query.
        """
        return self._loop.run(self._async.masters(cluster))

    def create_topic(self, topic: str, queues: int = DEFAULT_TOPIC_QUEUES, *,
                     cluster: str | None = None, perm: int = 6, order: bool = False,
                     message_type: str | None = None) -> dict[str, str]:
        """Create (or update) ``topic`` on every master broker; returns those brokers.
        ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION or MIXED) sets the topic's
        ``message.type``: what the RocketMQ 5.x clients may send to it.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: no master broker was found, or one refused the topic.
            InvalidArgumentError: ``message_type`` is not one of the five.
        """
        return self._loop.run(self._async.create_topic(topic, queues, cluster=cluster,
                                                       perm=perm, order=order,
                                                       message_type=message_type))

    def list_topics(self) -> list[str]:
        """Every topic the NameServer knows, sorted, system ones included.

        Raises:
            NameServerError: no NameServer answered.
            ClientError: the NameServer refused the query.
        """
        return self._loop.run(self._async.list_topics())

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete ``topic`` from every master broker (of ``cluster``) and the NameServers;
        returns the brokers that held it. Raises ClientError if no one knew the topic.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: no broker or NameServer knew the topic, or one refused to delete it.
        """
        return self._loop.run(self._async.delete_topic(topic, cluster=cluster))

    def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        """Per queue of ``topic`` (default: every topic of the group): the queue's max
        offset, the group's committed offset and the lag; ``total_lag`` sums them.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: a broker refused the query.
        """
        return self._loop.run(self._async.consumer_progress(group, topic))

    def message_by_id(self, msg_id: str, topic: str | None = None) -> ReceivedMessage:
        """The message with this offset id or unique id (the ``msg_id`` a send returns),
        searched in ``topic`` or, without one, in every topic.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: ``msg_id`` is not a message id, or no such message was found.
        """
        return self._loop.run(self._async.message_by_id(msg_id, topic))

    def view_message(self, offset_msg_id: str) -> ReceivedMessage:
        """The message with this offset id (it names its broker and CommitLog offset).

        Raises:
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: ``offset_msg_id`` is not an offset id, or the broker has no such message.
        """
        return self._loop.run(self._async.view_message(offset_msg_id))

    def query_messages(self, topic: str, key: str, *, max_num: int = 32, begin: int = 0,
                       end: int | None = None, unique: bool = False) -> list[ReceivedMessage]:
        """Messages of ``topic`` with key (or, with ``unique``, unique id) ``key``, stored
        between ``begin`` and ``end`` (ms since the epoch), newest first.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: the topic has no route.
        """
        return self._loop.run(self._async.query_messages(
            topic, key, max_num=max_num, begin=begin, end=end, unique=unique))

    def query_message_by_unique_key(self, topic: str, msg_id: str) -> ReceivedMessage:
        """The message of ``topic`` whose unique id (UNIQ_KEY) is ``msg_id``.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: no such message was found.
        """
        return self._loop.run(self._async.query_message_by_unique_key(topic, msg_id))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms``.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            BrokerError: the broker refused the query.
        """
        return self._loop.run(self._async.search_offset(mq, timestamp_ms))
