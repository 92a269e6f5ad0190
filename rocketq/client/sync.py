"""The synchronous API: thin wrappers that run the asyncio clients on one background event
loop thread per process, so plain Python code (and threads) can produce and consume.

This module holds that loop thread (``_LoopThread``) and the producers, with their direct
path for sends from the calling thread; the consumers are in ``sync_push``, ``sync_pull``
and ``sync_simple``, the admin client in ``sync_admin``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..protocol import Property
from ..protocol.command import FLAG_RESPONSE, FrameDecoder, ProtocolError, RemotingCommand, encode
from ..remoting import ConnectionClosedError, RemotingTimeoutError, new_event_loop
from .errors import BrokerError, ClientError, ClientTimeoutError
from .message import Message, MessageQueue, ReceivedMessage, SendResult
from .producer import AsyncProducer, Selector
from .transaction import AsyncTransactionProducer, TransactionListener, TransactionSendResult

if TYPE_CHECKING:
    import ssl

    from ..acl import Credentials

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

    def __init__(self, error: BaseException, broker_name: str) -> None:
        self.error = error
        #: The broker group the request went to.
        self.broker_name = broker_name


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
            return (_MaybeSent(exc, mq.broker_name) if getattr(exc, "maybe_sent", False)
                    else None)
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
                return self._loop.run(self._async._send_again(
                    message, left, self._async.retries - 1, result.broker_name))
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

