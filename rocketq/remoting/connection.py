"""One remoting connection, client or server side, over asyncio.

Requests and responses are matched by opaque, so many requests can be in flight on one
connection and answered in any order (a long-polled pull must never hold up the others).
Either side may send requests; requests from the peer go to a handler, which returns a
response, None (no answer), or an awaitable of one.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import ClientError, ClientTimeoutError
from ..protocol import (
    FLAG_ONEWAY,
    MAX_FRAME_SIZE,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    ResponseCode,
)
from ..protocol.command import encode, encode_prefix

log = logging.getLogger("rocketq.remoting")

#: Buffers queued for writing that make a write before the burst producing them ends.
FLUSH_CHUNKS = 32
FLUSH_BYTES = 8192
#: How often a connection checks its requests' deadlines: a request times out at most this
#: much after its timeout.
SWEEP_INTERVAL = 0.02

HandlerResult = RemotingCommand | None | Awaitable[RemotingCommand | None]
Handler = Callable[["Connection", RemotingCommand], HandlerResult]
#: Adds a signature to a request about to be sent (ACL credentials).
Signer = Callable[[RemotingCommand], None]
#: Told of each request a server's connection answered: its request code, the response code,
#: the seconds from its arrival to its answer being written, whether the handler held it
#: (returned an awaitable, as a long-polled pull), and whether the connection was open.
Observer = Callable[[int, int, float, bool, bool], None]
#: Requests timed at once on one connection while an observer is set; past this many (answers
#: that never come), the timings start over.
MAX_TIMED = 4096


class RemotingError(ClientError):
    """A request could not be completed over the connection (a ClientError, so callers of the
    client catch it with the client's other errors)."""


class RemotingTimeoutError(RemotingError, ClientTimeoutError):
    """No response within the timeout; also a TimeoutError."""


class ConnectionClosedError(RemotingError, ConnectionError):
    """The connection closed before the response came, or could not be made; also a
    ConnectionError."""


class ConnectFailedError(ConnectionClosedError):
    """The connection could not be made (refused, unreachable, a failed TLS handshake): the
    request was never sent, so sending it elsewhere cannot store it twice."""


class ConnectTimeoutError(ConnectFailedError, RemotingTimeoutError):
    """The connection was not made in time: never sent, as ConnectFailedError; also a
    timeout."""


class Connection(asyncio.Protocol):
    """A remoting connection. Create it through RemotingServer or RemotingClient."""

    def __init__(self, handler: Handler | None = None, *, max_frame: int = MAX_FRAME_SIZE,
                 on_close: Callable[[Connection], None] | None = None,
                 signer: Signer | None = None) -> None:
        self.handler = handler
        self.on_close = on_close
        self.signer = signer
        self.decoder = FrameDecoder(max_frame)
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.last_active = self.loop.time()
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self.peer: tuple[str, int] = ("", 0)
        #: Free-form state for the owner (client id, language, version of the peer).
        self.attributes: dict[str, Any] = {}
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._out: list[bytes | memoryview] | None = None
        self._reading = False
        self._out_size = 0
        #: While a request is served: whether more commands of the same read follow it.
        self.more_to_serve = False
        self._deadlines: dict[int, float] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        #: Set by the server when a metrics exporter watches it; None costs one check.
        self.observer: Observer | None = None
        #: opaque -> [request code, arrival (perf_counter), held], while an observer is set.
        self._timed: dict[int, list[Any]] = {}

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio's.
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (peer[0], peer[1])

    def data_received(self, data: bytes) -> None:
        self.last_active = self.loop.time()
        try:
            commands = self.decoder.feed(data)
        except ProtocolError as exc:
            # What the peer speaks instead, told by its first bytes (read as a frame length,
            # they are far too long), so the log says what the peer did wrong.
            head = data[:4]
            if head[:1] == b"\x16":
                exc = ProtocolError(f"{exc} (a TLS handshake, but this port has TLS disabled)")
            elif head == b"PRI ":  # "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                exc = ProtocolError(
                    f"{exc} (an HTTP/2 preface, as gRPC clients send: this is the remoting "
                    f"port; RocketMQ 5.x gRPC clients connect to the gRPC proxy port)")
            elif head in (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC"):
                exc = ProtocolError(f"{exc} (an HTTP request: this is the remoting port, "
                                    f"which does not speak HTTP)")
            log.warning("closing connection from %s:%d: %s", *self.peer, exc)
            self.close()
            return
        self._reading = True
        last = commands[-1] if commands else None
        try:
            for cmd in commands:
                self.more_to_serve = cmd is not last
                if cmd.flag & 1:  # a response
                    fut = self.pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                    # A response nobody waits for (a timed-out or oneway request) is dropped.
                else:
                    self._dispatch(cmd)
        finally:
            self._reading = False
            self.more_to_serve = False
        if self._out:
            # Answers made while reading go out now, in one write, before the callbacks the
            # handlers scheduled (such as dispatching what they appended) delay them.
            self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        error = ConnectionClosedError(f"connection to {self.peer[0]}:{self.peer[1]} closed")
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(error)
        self.pending.clear()
        self._deadlines.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._drain_waiters.clear()
        if not self.closed.done():
            self.closed.set_result(None)
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # ------------------------------------------------------------------ serving
    def _dispatch(self, cmd: RemotingCommand) -> None:
        handler = self.handler
        if self.observer is not None and not cmd.flag & FLAG_ONEWAY:
            if len(self._timed) >= MAX_TIMED:
                self._timed.clear()
            self._timed[cmd.opaque] = [cmd.code, time.perf_counter(), False]
        if handler is None:
            if not cmd.is_oneway:
                self.send(cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                       remark=f" request type {cmd.code} not supported"))
            return
        try:
            result = handler(self, cmd)
        except Exception as exc:
            self._reply_error(cmd, exc)
            return
        if result is None:
            return
        if type(result) is RemotingCommand:
            if not cmd.flag & FLAG_ONEWAY:
                self._answer(cmd, result)
        elif inspect.isawaitable(result):
            if self.observer is not None and cmd.opaque in self._timed:
                self._timed[cmd.opaque][2] = True
            task = self.loop.create_task(self._finish(cmd, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif not cmd.is_oneway:
            self._answer(cmd, result)

    async def _finish(self, cmd: RemotingCommand,
                      pending: Awaitable[RemotingCommand | None]) -> None:
        try:
            result = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._reply_error(cmd, exc)
            return
        if result is not None and not cmd.is_oneway:
            self._answer(cmd, result)

    def _answer(self, cmd: RemotingCommand, result: Any) -> None:
        """Send a handler's answer; an answer that cannot be encoded (a handler's bug) is
        answered SYSTEM_ERROR with the reason, so the client learns it at once instead of
        waiting for its timeout."""
        try:
            self.send(result)
        except Exception as exc:
            self._reply_error(cmd, exc, "its answer could not be encoded")

    def _reply_error(self, cmd: RemotingCommand, exc: Exception,
                     what: str = "failed") -> None:
        if isinstance(exc, ProtocolError):
            log.info("bad request %d from %s:%d: %s", cmd.code, *self.peer, exc)
        else:
            log.exception("request %d from %s:%d: %s", cmd.code, *self.peer, what)
        if not cmd.is_oneway and self.is_open:
            reason = f"{type(exc).__name__}: {exc}"
            if what != "failed":
                reason = f"request {cmd.code}: {what}: {reason}"
            self.send(cmd.response(ResponseCode.SYSTEM_ERROR, remark=reason))

    # ------------------------------------------------------------------ sending
    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def send(self, cmd: RemotingCommand) -> None:
        """Write a command (a response, or a request whose answer nobody awaits)."""
        if self.observer is not None and cmd.flag & 1:
            self._observe(cmd)
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if cmd.body_parts is not None:
                self.send_with_body(cmd, cmd.body_parts)
            else:
                self._write(encode(cmd))

    def _observe(self, response: RemotingCommand) -> None:
        """Tell the observer how the request ``response`` answers went."""
        timed = self._timed.pop(response.opaque, None)
        if timed is None or self.observer is None:
            return
        try:
            self.observer(timed[0], response.code, time.perf_counter() - timed[1], timed[2],
                          self.is_open)
        except Exception:
            log.exception("the request observer failed; it is removed")
            self.observer = None

    def send_with_body(self, cmd: RemotingCommand, parts: Sequence[bytes | memoryview]) -> None:
        """Write a command whose body is ``parts`` back to back, without joining them."""
        if self.is_open:
            assert self.transport is not None
            size = sum(len(p) for p in parts)
            self._write(encode_prefix(cmd, size), *parts)

    def _write(self, *chunks: bytes | memoryview) -> None:
        """Queue frames and write them together at the end of the read being served or of
        this loop iteration, so a burst of requests or answers costs one system call, not
        one each."""
        out = self._out
        if out is None:
            out = self._out = []
            self._out_size = 0
            if not self._reading:  # else data_received writes when it is done
                self.loop.call_soon(self.flush)
        out += chunks
        self._out_size += sum(map(len, chunks))
        if len(out) >= FLUSH_CHUNKS or self._out_size >= FLUSH_BYTES:
            # Long bursts go out in parts, so the peer starts on the first frames while the
            # rest are being made: both sides then work at once instead of taking turns.
            self.flush()

    def flush(self) -> None:
        """Write what is queued now (normally done at the end of the read or iteration)."""
        out, self._out = self._out, None
        transport = self.transport
        if out and transport is not None and not transport.is_closing():
            transport.writelines(out)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if self._paused and self.is_open:
            waiter = self.loop.create_future()
            self._drain_waiters.append(waiter)
            await waiter

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response."""
        if not self.is_open:
            raise ConnectionClosedError(f"connection to {self.peer[0]}:{self.peer[1]} is closed")
        fut: asyncio.Future[RemotingCommand] = self.loop.create_future()
        opaque = cmd.opaque
        self.pending[opaque] = fut
        # Deadlines are checked by one sweeper per connection, not a timer per request: with
        # hundreds of requests in flight, timers cost more than the rest of the request.
        self._deadlines[opaque] = self.loop.time() + timeout
        if self._sweeper is None:
            self._sweeper = self.loop.call_later(SWEEP_INTERVAL, self._sweep)
        if self.signer is not None:
            self.signer(cmd)
        self.send(cmd)
        try:
            return await fut
        except TimeoutError:
            raise RemotingTimeoutError(
                f"no response to request {cmd.code} from {self.peer[0]}:{self.peer[1]} "
                f"within {timeout:.1f} s") from None
        finally:
            self.pending.pop(opaque, None)
            self._deadlines.pop(opaque, None)

    def _sweep(self) -> None:
        """Fail the requests whose deadline has passed; runs every SWEEP_INTERVAL seconds
        while requests are in flight."""
        now = self.loop.time()
        for opaque, deadline in list(self._deadlines.items()):
            if deadline <= now:
                del self._deadlines[opaque]
                fut = self.pending.get(opaque)
                if fut is not None and not fut.done():
                    fut.set_exception(TimeoutError())
        self._sweeper = (self.loop.call_later(SWEEP_INTERVAL, self._sweep) if self._deadlines
                         else None)

    def oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that gets no response."""
        cmd.flag |= FLAG_ONEWAY
        if self.signer is not None:
            self.signer(cmd)
        self.send(cmd)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def running_requests(self) -> list[asyncio.Task[Any]]:
        """The tasks of the requests whose handlers are still running."""
        return [task for task in self._tasks if not task.done()]

    def cancel_requests(self) -> list[asyncio.Task[Any]]:
        """Cancel the requests whose handlers are still running (a server that stops), and
        return their tasks to await: they would otherwise be left pending when the loop
        closes."""
        tasks = self.running_requests()
        for task in tasks:
            task.cancel()
        return tasks

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def __repr__(self) -> str:
        return f"Connection({self.peer[0]}:{self.peer[1]})"

