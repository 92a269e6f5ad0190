"""The synchronous API: thin wrappers that run the asyncio clients on one background event
loop thread per process, so plain Python code (and threads) can produce and consume."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from ..protocol import Property
from ..protocol.command import FLAG_RESPONSE, FrameDecoder, ProtocolError, RemotingCommand, encode
from ..remoting import RemotingTimeoutError, new_event_loop
from .admin import AsyncAdmin
from .errors import BrokerError
from .message import Message, MessageQueue, MessageSelector, ReceivedMessage, SendResult
from .producer import AsyncProducer, Selector
from .pull import AsyncPullConsumer
from .push import AsyncPushConsumer, Listener
from .transaction import AsyncTransactionProducer, TransactionListener, TransactionSendResult

T = TypeVar("T")


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
        return self.submit(coro).result(timeout)

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

    def send(self, message: Message, timeout: float | None) -> SendResult | None:
        p = self.producer
        if not p.started or p.accumulator is not None or p.fault is not None:
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
        except (OSError, ProtocolError):
            return None  # the loop's path reconnects, learns routes and retries
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
        except BaseException:
            del conns[addr]  # its state is unknown now: the next send connects afresh
            self._close(sock)
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
    """Sends messages; see ``rocketq.aio.Producer`` for the options.

    >>> with Producer("pg", namesrv="127.0.0.1:9876") as producer:   # doctest: +SKIP
    ...     result = producer.send(Message("Orders", b"hello", tags="paid"))
    """

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
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
        self._loop.run(self._async.start())
        return self

    def shutdown(self) -> None:
        self._direct.close()
        self._loop.run(self._async.shutdown())

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def send(self, message: Message, *, queue: MessageQueue | None = None,
             selector: Selector | None = None, arg: Any = None,
             timeout: float | None = None) -> SendResult:
        """Send and wait for the broker's answer (retries on failure)."""
        if queue is None and selector is None:
            result = self._direct.send(message, timeout)
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
        not make synchronous rocketq calls)."""
        future = self._loop.submit(self._async.send(message, queue=queue, selector=selector,
                                                    arg=arg, timeout=timeout))
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def request(self, message: Message, timeout: float = 3.0) -> ReceivedMessage:
        """Send a request and return the reply a consumer sent with ``create_reply``."""
        return self._loop.run(self._async.request(message, timeout), timeout + 30)

    def send_oneway(self, message: Message, *, queue: MessageQueue | None = None,
                    selector: Selector | None = None, arg: Any = None) -> None:
        """Send without waiting for any answer."""
        self._loop.run(self._async.send_oneway(message, queue=queue, selector=selector,
                                               arg=arg))

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None,
                   timeout: float | None = None) -> SendResult:
        """Send messages of one topic in one request."""
        return self._loop.run(self._async.send_batch(messages, queue=queue, timeout=timeout))


class TransactionProducer(Producer):
    """A producer of transactional messages; see ``rocketq.aio.TransactionProducer``.

    >>> class Orders:                                                    # doctest: +SKIP
    ...     def execute_local_transaction(self, message, arg):
    ...         save_order(arg)
    ...         return LocalTransactionState.COMMIT
    ...     def check_local_transaction(self, message):
    ...         return LocalTransactionState.COMMIT if order_saved(message.keys[0]) \
    ...             else LocalTransactionState.ROLLBACK
    >>> with TransactionProducer("tx-group", Orders(), namesrv=NAMESRV) as producer:
    ...     producer.send_message_in_transaction(Message("Orders", b"..."), arg=order)
    """

    _async: AsyncTransactionProducer

    def __init__(self, group: str, listener: TransactionListener, namesrv: str,
                 **options: Any) -> None:
        self._listener = listener
        super().__init__(group, namesrv, **options)

    def _new_async(self, group: str, namesrv: str, options: dict[str, Any]
                   ) -> AsyncTransactionProducer:
        return AsyncTransactionProducer(group, self._listener, namesrv, **options)

    def send_message_in_transaction(self, message: Message, arg: Any = None
                                    ) -> TransactionSendResult:
        """Store a half message, run the local transaction, then commit or roll back."""
        return self._loop.run(self._async.send_message_in_transaction(message, arg))


class PushConsumer:
    """Calls a listener with each message of the subscribed topics; see
    ``rocketq.aio.PushConsumer`` for the options.

    >>> consumer = PushConsumer("cg", namesrv="127.0.0.1:9876")      # doctest: +SKIP
    >>> consumer.subscribe("Orders", "paid || refunded")
    >>> consumer.register(lambda msgs: ConsumeResult.SUCCESS)
    >>> consumer.start()
    """

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
        self._loop = _LoopThread.get()
        self._async = self._loop.create(lambda: AsyncPushConsumer(group, namesrv, **options))

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume ``topic``, keeping the messages ``expression`` (tags or SQL) selects."""
        self._loop.call(self._async.subscribe, topic, expression)

    def register(self, listener: Listener) -> None:
        """Set the listener; a plain function runs on the consume thread pool."""
        self._loop.call(self._async.register, listener)

    def start(self) -> PushConsumer:
        self._loop.run(self._async.start())
        return self

    def shutdown(self, timeout: float = 10.0) -> None:
        self._loop.run(self._async.shutdown(timeout), timeout + 30)

    def __enter__(self) -> PushConsumer:
        """The consumer, not started yet: subscribe, register and ``start()`` inside."""
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
        return self._loop.call(self._async.assigned_queues)

    def rebalance(self) -> None:
        """Work out which queues this member owns now, without waiting for the next round."""
        self._loop.run(self._async.rebalance())

    def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Consume the owned queues of ``topic`` in ``offsets`` from those offsets."""
        self._loop.run(self._async.reset_offsets(topic, offsets))


class PullConsumer:
    """Poll messages, like RocketMQ's DefaultLitePullConsumer; see ``rocketq.aio.PullConsumer``.

    >>> with PullConsumer("cg2", namesrv="127.0.0.1:9876") as consumer:  # doctest: +SKIP
    ...     consumer.subscribe("Orders")
    ...     consumer.start()
    ...     for message in consumer.poll(timeout=1.0): ...
    """

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
        self._loop = _LoopThread.get()
        self._async = self._loop.create(lambda: AsyncPullConsumer(group, namesrv, **options))

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume ``topic`` with the group, keeping the messages ``expression`` selects."""
        self._loop.call(self._async.subscribe, topic, expression)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no group rebalancing)."""
        self._loop.call(self._async.assign, list(queues))

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return self._loop.run(self._async.fetch_queues(topic))

    def start(self) -> PullConsumer:
        self._loop.run(self._async.start())
        return self

    def shutdown(self) -> None:
        self._loop.run(self._async.shutdown())

    def __enter__(self) -> PullConsumer:
        """The consumer, not started yet: subscribe or assign, then ``start()`` inside."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def poll(self, timeout: float = 5.0) -> list[ReceivedMessage]:
        return self._loop.run(self._async.poll(timeout))

    def assignment(self) -> list[MessageQueue]:
        return self._loop.call(self._async.assignment)

    def assigned_queues(self) -> list[MessageQueue]:
        return self._loop.call(self._async.assigned_queues)

    def rebalance(self) -> None:
        """Work out which queues this member owns now, without waiting for the next round."""
        self._loop.run(self._async.rebalance())

    def seek(self, mq: MessageQueue, offset: int) -> None:
        self._loop.call(self._async.seek, mq, offset)

    def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Seek the owned queues of ``topic`` in ``offsets`` there and commit the positions."""
        self._loop.run(self._async.reset_offsets(topic, offsets))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        self._loop.run(self._async.seek_to_begin(mq))

    def seek_to_end(self, mq: MessageQueue) -> None:
        self._loop.run(self._async.seek_to_end(mq))

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._loop.run(self._async.offset_for_timestamp(mq, timestamp_ms))

    def commit(self) -> None:
        self._loop.run(self._async.commit())

    def committed(self, mq: MessageQueue) -> int | None:
        return self._loop.run(self._async.committed(mq))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        self._loop.call(self._async.pause, list(queues))

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        self._loop.call(self._async.resume, list(queues))


class Admin:
    """Topics and message queries; see ``rocketq.aio.Admin``.

    >>> with Admin(namesrv="127.0.0.1:9876") as admin:                # doctest: +SKIP
    ...     admin.create_topic("Orders", queues=8)
    """

    def __init__(self, namesrv: str, **options: Any) -> None:
        self._loop = _LoopThread.get()
        self._async = self._loop.create(lambda: AsyncAdmin(namesrv, **options))

    def close(self) -> None:
        self._loop.run(self._async.close())

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """``broker name -> master address`` of every broker (of ``cluster``, if given)."""
        return self._loop.run(self._async.masters(cluster))

    def create_topic(self, topic: str, queues: int = 4, *, cluster: str | None = None,
                     perm: int = 6, order: bool = False) -> dict[str, str]:
        """Create (or update) ``topic`` on every master broker; returns those brokers."""
        return self._loop.run(self._async.create_topic(topic, queues, cluster=cluster,
                                                       perm=perm, order=order))

    def view_message(self, offset_msg_id: str) -> ReceivedMessage:
        return self._loop.run(self._async.view_message(offset_msg_id))

    def query_messages(self, topic: str, key: str, *, max_num: int = 32, begin: int = 0,
                       end: int | None = None, unique: bool = False) -> list[ReceivedMessage]:
        """Messages of ``topic`` with key (or, with ``unique``, unique id) ``key``, stored
        between ``begin`` and ``end`` (ms since the epoch), newest first."""
        return self._loop.run(self._async.query_messages(
            topic, key, max_num=max_num, begin=begin, end=end, unique=unique))

    def query_message_by_unique_key(self, topic: str, msg_id: str) -> ReceivedMessage:
        return self._loop.run(self._async.query_message_by_unique_key(topic, msg_id))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms``."""
        return self._loop.run(self._async.search_offset(mq, timestamp_ms))
