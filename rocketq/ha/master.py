"""The master's side of replication (RocketMQ's HAService and HAConnection).

Each slave connects to the master's HA port and reports its max CommitLog offset; the master
streams its CommitLog from there in chunks of at most ``haTransferBatchSize`` bytes, sends a
heartbeat (an empty chunk) when idle for ``haSendHeartbeatInterval``, and keeps the highest
offset any slave acknowledged (``push2SlaveMaxOffset``): SYNC_MASTER sends wait on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import cast

from ..store import MessageStore
from .protocol import HAProtocolError, ReportReader, encode_transfer_header

log = logging.getLogger("rocketq.ha")

#: Stop writing to a slave while this much is queued for its socket.
_HIGH_WATER = 4 << 20


class HAConnection(asyncio.Protocol):
    """One slave's link: its reports in, the CommitLog out."""

    def __init__(self, server: HAServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.reader = ReportReader()
        #: Where the slave asked to start (None until its first report).
        self.request: int | None = None
        #: The slave's last report: what it holds.
        self.acked = 0
        self.last_read = time.monotonic()
        self._wake = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ reading
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        peer = self.transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections.add(self)
        self._task = asyncio.get_running_loop().create_task(self._transfer())
        log.info("slave %s connected", self.peer)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        try:
            offset = self.reader.feed(data)
        except HAProtocolError as exc:
            self.close(str(exc))
            return
        if offset is None:
            return
        master_max = self.server.store.commitlog.max_offset
        if offset > master_max:
            self.close(f"it reported offset {offset}, beyond this master's {master_max} "
                       "(a slave of another master?)")
            return
        self.acked = offset
        if self.request is None:
            self.request = offset
            self._wake.set()
        self.server.acknowledged(offset)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        log.info("slave %s disconnected", self.peer)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def close(self, reason: str) -> None:
        """Drop the link, saying why (bad input never stops the master)."""
        log.warning("closing the HA link of slave %s: %s", self.peer, reason)
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ writing
    def wake(self) -> None:
        self._wake.set()

    async def _transfer(self) -> None:
        server = self.server
        config = server.store.config
        commitlog = server.store.commitlog
        heartbeat = config.haSendHeartbeatInterval / 1000
        while self.request is None:
            self._wake.clear()
            await self._wake.wait()
        if self.request == 0:
            # A slave with nothing starts at the master's last file, as RocketMQ's does.
            end = commitlog.max_offset
            position = end - end % config.mappedFileSizeCommitLog
        else:
            position = self.request
        last_write = time.monotonic()
        transport = self.transport
        assert transport is not None
        while not transport.is_closing():
            chunk = commitlog.read_chunk(position, config.haTransferBatchSize)
            if chunk is None:
                now = time.monotonic()
                if now - last_write >= heartbeat:
                    transport.write(encode_transfer_header(position, 0))
                    last_write = now
                if now - self.last_read > config.haHousekeepingInterval / 1000:
                    self.close("nothing heard for "
                               f"{config.haHousekeepingInterval / 1000:.0f} s")
                    return
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(heartbeat):
                        await self._wake.wait()
                continue
            size = len(chunk)
            # One write (one send call) per chunk: the header and the bytes together.
            transport.write(b"".join((encode_transfer_header(position, size), chunk)))
            chunk.release()
            position += size
            last_write = time.monotonic()
            if transport.get_write_buffer_size() > _HIGH_WATER or not self._writable.is_set():
                await self._writable.wait()


class HAServer:
    """The master's HA port: accepts slaves and streams its CommitLog to each."""

    def __init__(self, store: MessageStore, host: str, port: int) -> None:
        self.store = store
        self.host = host
        self.port = port
        self.connections: set[HAConnection] = set()
        #: The highest offset a slave acknowledged (RocketMQ's push2SlaveMaxOffset).
        self.slave_acked = 0
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._ack_waiters: list[tuple[int, asyncio.Future[bool]]] = []

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._server = await self._loop.create_server(
            lambda: HAConnection(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.store.commitlog.on_append.append(self._on_append)
        log.info("HA port %s:%d open for slaves", self.host, self.port)

    async def stop(self) -> None:
        if self._on_append in self.store.commitlog.on_append:
            self.store.commitlog.on_append.remove(self._on_append)
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()  # queued CommitLog bytes are of no use to anyone now
        if self._server is not None:
            # Bounded: some event loops wait here for every connection to be gone.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    await self._server.wait_closed()
            self._server = None
        for _, fut in self._ack_waiters:
            if not fut.done():
                fut.set_result(False)
        self._ack_waiters.clear()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _on_append(self, end: int) -> None:
        """New CommitLog bytes: wake the links (on the loop's thread, whoever appended)."""
        if threading.get_ident() == self._loop_thread:
            self._wake_all()
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for conn in self.connections:
            conn.wake()

    # ------------------------------------------------------------------ acknowledgements
    def acknowledged(self, offset: int) -> None:
        if offset <= self.slave_acked:
            return
        self.slave_acked = offset
        if self._ack_waiters:
            still = []
            for target, fut in self._ack_waiters:
                if fut.done():
                    continue
                if target <= offset:
                    fut.set_result(True)
                else:
                    still.append((target, fut))
            self._ack_waiters = still

    def slave_caught_up(self, offset: int) -> bool:
        """Whether a connected slave is within ``haSlaveFallbehindMax`` of ``offset``
        (RocketMQ's isSlaveOK): otherwise a SYNC_MASTER send is SLAVE_NOT_AVAILABLE."""
        return bool(self.connections) and (
            offset - self.slave_acked < self.store.config.haSlaveFallbehindMax)

    def wait_for_slave(self, offset: int) -> asyncio.Future[bool]:
        """A future that becomes True once a slave acknowledged ``offset``: every send waiting
        shares the one acknowledged position, as group commit shares one fsync."""
        assert self._loop is not None
        fut: asyncio.Future[bool] = self._loop.create_future()
        if self.slave_acked >= offset:
            fut.set_result(True)
        else:
            self._ack_waiters.append((offset, fut))
        return fut
