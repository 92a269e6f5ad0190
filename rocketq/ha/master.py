"""The master's side of replication (RocketMQ's HAService and HAConnection).

Each slave connects to the master's HA port and reports its max CommitLog offset; the master
streams its CommitLog from there in chunks of at most ``haTransferBatchSize`` bytes, sends a
heartbeat (an empty chunk) when idle for ``haSendHeartbeatInterval``, and keeps the highest
offset any slave acknowledged (``push2SlaveMaxOffset``): SYNC_MASTER sends wait on it. A link
whose slave said nothing for ``haHousekeepingInterval`` is dropped, idle or blocked writing
(a partition leaves both ends' connection established), as RocketMQ's is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import cast

from ..remoting.tls import Listener, TlsSettings, bound_socket
from ..store import MessageStore
from .protocol import HAProtocolError, ReportReader, encode_transfer_header

log = logging.getLogger("rocketq.ha")

#: Stop writing to a slave while this much is queued for its socket.
_HIGH_WATER = 4 << 20
#: How often the master notes where an append started and when (at most once per this many
#: seconds), and how many notes it keeps: 10 minutes of steady appends. They date what a
#: slave lacks (``HAServer.lag_seconds``) to within the interval.
APPEND_MARK_INTERVAL = 0.1
APPEND_MARKS = 6000


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
        #: When the slave last reported holding all the master had (controller mode's
        #: "caught up", which keeps it in the SyncStateSet).
        self.caught_up_at = 0.0
        self._wake = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._task: asyncio.Task[None] | None = None
        #: The confirmOffset last sent on this link (controller mode).
        self._told = 0
        self._watchdog: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ reading
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        peer = self.transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if not self.server.serving:
            # Controller mode: not master (yet); a slave told early comes back shortly.
            log.info("slave %s turned away: this broker is not master now", self.peer)
            self.transport.abort()
            return
        self.server.connections.add(self)
        self._task = asyncio.get_running_loop().create_task(self._transfer())
        self._watch()
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
        if offset >= master_max:
            self.caught_up_at = self.last_read
        if self.request is None:
            self.request = offset
            self._wake.set()
        self.server.acknowledged(offset)

    def connection_lost(self, exc: Exception | None) -> None:
        if self not in self.server.connections:
            return  # turned away, never served
        self.server.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
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

    def _watch(self) -> None:
        """Drop the link once the slave has said nothing for ``haHousekeepingInterval``,
        whatever the link waits on (a first report, new bytes, or room in a send buffer that
        a partition keeps full). Checked on a timer, at most a second apart."""
        silence = self.server.store.config.haHousekeepingInterval / 1000
        quiet = time.monotonic() - self.last_read
        if quiet > silence:
            log.warning("closing the HA link of slave %s: nothing heard for %.1f s",
                        self.peer, quiet)
            if self.transport is not None:
                # abort, not close: a close waits for the queued bytes to leave first.
                self.transport.abort()
            return
        delay = min(1.0, silence / 4, silence - quiet + 0.01)
        self._watchdog = asyncio.get_running_loop().call_later(delay, self._watch)

    @property
    def broker_id(self) -> int | None:
        """The slave's broker id, if it said (controller mode)."""
        return self.reader.broker_id

    # ------------------------------------------------------------------ writing
    def wake(self) -> None:
        self._wake.set()

    def _confirm(self) -> int | None:
        """The confirmOffset for this link's next header: controller-mode links only."""
        if self.broker_id is None:
            return None
        self._told = self.server.confirm_offset()
        return self._told

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
                if now - last_write >= heartbeat or (
                        self.broker_id is not None and self._told < server.confirm_offset()):
                    # Idle: a heartbeat, which also tells a controller-mode slave how far
                    # the group has confirmed.
                    transport.write(encode_transfer_header(position, 0, self._confirm()))
                    last_write = now
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(heartbeat):
                        await self._wake.wait()
                continue
            size = len(chunk)
            # One write (one send call) per chunk: the header and the bytes together.
            transport.write(b"".join((encode_transfer_header(position, size,
                                                             self._confirm()), chunk)))
            chunk.release()
            position += size
            last_write = time.monotonic()
            if transport.get_write_buffer_size() > _HIGH_WATER or not self._writable.is_set():
                await self._writable.wait()


class HAServer:
    """The master's HA port: accepts slaves and streams its CommitLog to each."""

    def __init__(self, store: MessageStore, host: str, port: int, *,
                 tls: TlsSettings | None = None) -> None:
        self.store = store
        #: The port's TLS mode: a slave of a TLS master connects with TLS.
        self.tls = tls
        self.host = host
        self.port = port
        self.connections: set[HAConnection] = set()
        #: Whether slaves are served: always for a 4.x master; in controller mode only
        #: while this broker is its group's master.
        self.serving = True
        #: The offset SYNC_MASTER sends wait for: in 4.x, the highest any slave acknowledged
        #: (RocketMQ's push2SlaveMaxOffset); in controller mode, the confirmOffset.
        self.slave_acked = 0
        #: Controller mode: the SyncStateSet's members other than this master (None: 4.x),
        #: and how many of them must hold a message before it is answered.
        self.sync_members: set[int] | None = None
        self.acks_needed = 0
        #: Called when the waited-for position moves (the store dispatches up to it).
        self.on_confirm: Callable[[], None] | None = None
        self._server: Listener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._ack_waiters: list[tuple[int, asyncio.Future[bool]]] = []
        #: (where an append started, time.monotonic()), one per APPEND_MARK_INTERVAL.
        self.append_marks: deque[tuple[int, float]] = deque(maxlen=APPEND_MARKS)
        self._started = time.monotonic()
        self._last_end = store.commitlog.max_offset

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        sock = bound_socket(self.host, self.port)
        sock.listen(128)
        self._server = Listener(sock, lambda: HAConnection(self), self.tls)
        await self._server.start()
        self.port = self._server.port
        self.store.commitlog.on_append.append(self._on_append)
        log.info("HA port %s:%d open for slaves", self.host, self.port)

    async def stop(self) -> None:
        if self._on_append in self.store.commitlog.on_append:
            self.store.commitlog.on_append.remove(self._on_append)
        if self._server is not None:
            self._server.close()
        self.drop_links()  # queued CommitLog bytes are of no use to anyone now
        if self._server is not None:
            # Bounded: some event loops wait here for every connection to be gone.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    await self._server.wait_closed()
            self._server = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def drop_links(self) -> None:
        """Close every slave's link (this broker stopped being master) and release waiting
        sends; the port stays open but turns slaves away until ``serving`` is set again."""
        self.serving = False
        self.append_marks.clear()  # a log cut back as a slave's would make them lie
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        for _, fut in self._ack_waiters:
            if not fut.done():
                fut.set_result(False)
        self._ack_waiters.clear()

    def _on_append(self, end: int) -> None:
        """New CommitLog bytes: wake the links (on the loop's thread, whoever appended)."""
        now = time.monotonic()
        marks = self.append_marks
        if end < self._last_end:  # the log was cut back (a demoted master's tail)
            marks.clear()
            self._last_end = 0
        if not marks or now - marks[-1][1] >= APPEND_MARK_INTERVAL:
            marks.append((self._last_end, now))
        self._last_end = end
        if threading.get_ident() == self._loop_thread:
            self._wake_all()
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for conn in self.connections:
            conn.wake()

    # ------------------------------------------------------------------ acknowledgements
    def acknowledged(self, offset: int) -> None:
        """A slave reported ``offset``: move the waited-for position if it moved."""
        if self.sync_members is not None:
            offset = self._confirmed()
        if offset <= self.slave_acked:
            return
        self.slave_acked = offset
        if self.on_confirm is not None:
            self.on_confirm()
        if self.sync_members is not None:
            self._wake_all()  # the slaves hear the new confirmOffset
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

    def _confirmed(self) -> int:
        """Controller mode: the offset that ``acks_needed`` members of the SyncStateSet
        hold (RocketMQ's confirmOffset); the log's end when none is needed."""
        assert self.sync_members is not None
        if self.acks_needed <= 0:
            return self.store.commitlog.max_offset
        acks = sorted((c.acked for c in self.connections if c.broker_id in self.sync_members),
                      reverse=True)
        if len(acks) < self.acks_needed:
            return self.slave_acked
        return acks[self.acks_needed - 1]

    def set_sync_members(self, members: set[int] | None, acks_needed: int) -> None:
        """Controller mode: whom sends wait for now (the SyncStateSet without this master)."""
        self.sync_members = members
        self.acks_needed = acks_needed
        self.acknowledged(0)

    def confirm_offset(self) -> int:
        """Controller mode: how far the log is safe from a failover (RocketMQ's
        confirmOffset); the log's end when no replica needs to hold it first."""
        if self.sync_members is None or self.acks_needed <= 0:
            return self.store.commitlog.max_offset
        return self.slave_acked

    def in_sync(self, max_lag: float) -> set[int]:
        """Controller mode: the slaves (by broker id) that held all this master had within
        the last ``max_lag`` seconds (RocketMQ's haMaxTimeSlaveNotCatchup)."""
        now = time.monotonic()
        return {c.broker_id for c in self.connections
                if c.broker_id is not None and now - c.caught_up_at <= max_lag}

    def lag_seconds(self, offset: int) -> float:
        """How long ago the master appended the first byte past ``offset`` (what a slave
        that holds up to ``offset`` lacks first): 0 when nothing is past it.

        The append that wrote it is the last one marked as starting at or before it, or an
        append after that one and within APPEND_MARK_INTERVAL of it (a later one would have
        been marked): the age of that mark is the answer, high by less than the interval.
        Older than every mark kept, it is the oldest mark's age (a lower bound)."""
        if offset >= self.store.commitlog.max_offset:
            return 0.0
        marks = list(self.append_marks)
        i = bisect_right(marks, offset, key=lambda mark: mark[0])
        if i == 0:
            appended = marks[0][1] if marks else self._started
        else:
            appended = marks[i - 1][1]
        return max(0.0, time.monotonic() - appended)

    def slave_caught_up(self, offset: int) -> bool:
        """Whether a connected slave is within ``haSlaveFallbehindMax`` of ``offset``
        (RocketMQ's isSlaveOK): otherwise a SYNC_MASTER send is SLAVE_NOT_AVAILABLE."""
        if self.sync_members is not None:
            if self.acks_needed <= 0:
                return True
            linked = sum(1 for c in self.connections if c.broker_id in self.sync_members)
            return linked >= self.acks_needed
        return bool(self.connections) and (
            offset - self.slave_acked < self.store.config.haSlaveFallbehindMax)

    def wait_for_slave(self, offset: int) -> asyncio.Future[bool]:
        """A future that becomes True once a slave acknowledged ``offset``: every send waiting
        shares the one acknowledged position, as group commit shares one fsync."""
        assert self._loop is not None
        fut: asyncio.Future[bool] = self._loop.create_future()
        if self.sync_members is not None and self.acks_needed <= 0:
            fut.set_result(True)
        elif self.slave_acked >= offset:
            fut.set_result(True)
        else:
            self._ack_waiters.append((offset, fut))
        return fut
