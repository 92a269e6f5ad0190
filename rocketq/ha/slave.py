"""The slave's side of replication (RocketMQ's HAService.HAClient).

The slave connects to its master's HA port, reports its max CommitLog offset, writes every
chunk the master sends at exactly that offset (its log stays the master's byte for byte) and
reports again after each; the store dispatches the bytes into ConsumeQueues and the index as
it does its own appends. A chunk for any other offset means the two logs have parted: the
link is dropped and made again, as RocketMQ does. So is a link on which the master sent
nothing, not even its idle heartbeat, for ``haHousekeepingInterval`` (a partition leaves the
connection established at both ends), and a connection not made within ``connect_timeout``.
Reconnects every ``reconnect_interval`` seconds while the master is away.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..store import MessageStore
from .protocol import HAProtocolError, TransferReader, encode_hello, encode_report

log = logging.getLogger("rocketq.ha")

#: A chunk larger than this is garbage, whatever the master's batch size.
_MAX_CHUNK = 64 << 20

_T = TypeVar("_T")


async def _within(seconds: float, what: str, step: Awaitable[_T]) -> _T:
    """``step``, or OSError saying ``what`` did not happen within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            return await step
    except TimeoutError:
        raise OSError(f"{what} took over {seconds:g} s") from None


class HAClient:
    """Follows one master; ``master_address`` says where its HA port is (it may change, as
    the NameServer tells a registering slave)."""

    def __init__(self, store: MessageStore, master_address: Callable[[], str],
                 reconnect_interval: float = 5.0, hello: int | None = None,
                 ssl: _ssl.SSLContext | None = None, connect_timeout: float = 5.0) -> None:
        self.store = store
        #: TLS for the link, when the master's HA port wants it.
        self.ssl = ssl
        #: Controller mode: this slave's broker id, said first on each link.
        self.hello = hello
        self.master_address = master_address
        self.reconnect_interval = reconnect_interval
        #: Seconds a connection (and its TLS handshake) may take, as RocketMQ's 5 s.
        self.connect_timeout = connect_timeout
        #: How many links this client has made (each reconnect is one more).
        self.links = 0
        #: The master this slave follows now, if connected.
        self.connected_to: str | None = None
        #: Controller mode: the master's confirmOffset as last heard (-1: none yet). The
        #: store dispatches no further (see ``limit_dispatch``).
        self.confirm_offset = -1
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # Bounded, and without wait_for: it would wait on for a task that does not end.
            await asyncio.wait({self._task}, timeout=2)
            self._task = None

    async def _run(self) -> None:
        while True:
            address = self.master_address()
            if address:
                try:
                    await self._follow(address)
                except (OSError, HAProtocolError, ValueError) as exc:
                    log.warning("HA link to master %s lost: %s", address, exc)
                finally:
                    self.connected_to = None
            await asyncio.sleep(self.reconnect_interval)

    async def _follow(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        reader, writer = await _within(
            self.connect_timeout, f"connecting to {address}",
            asyncio.open_connection(host, int(port), ssl=self.ssl))
        self.links += 1
        store = self.store
        config = store.config
        heartbeat = config.haSendHeartbeatInterval / 1000
        silence = config.haHousekeepingInterval / 1000
        chunks = TransferReader(_MAX_CHUNK, confirm=self.hello is not None)
        try:
            self.connected_to = address
            if self.hello is not None:
                writer.write(encode_hello(self.hello))
            writer.write(encode_report(store.commitlog.max_offset))
            reported = heard = time.monotonic()
            log.info("following master %s from offset %d", address,
                     store.commitlog.max_offset)
            while True:
                now = time.monotonic()
                if now - heard >= silence:
                    # Not even a heartbeat: the link is dead or stuck; make a new one.
                    raise OSError(f"nothing heard from the master for {now - heard:.1f} s")
                # Wake to report (RocketMQ's isTimeToReportOffset) or to give up on silence.
                wait = max(0.0, min(reported + heartbeat, heard + silence) - now)
                try:
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                    # cancellation that meets a read completing, and the link never stops.
                    async with asyncio.timeout(wait):
                        data = await reader.read(1 << 16)
                except TimeoutError:
                    data = None
                else:
                    if not data:
                        raise OSError("the master closed the link")
                    heard = time.monotonic()
                wrote = False
                for offset, body in chunks.feed(data or b""):
                    mine = store.commitlog.max_offset
                    if mine != 0 and offset != mine:
                        raise HAProtocolError(
                            f"the master sent offset {offset}; this slave holds {mine}")
                    if body:
                        store.append_replica(offset, body)
                        wrote = True
                if chunks.confirm > self.confirm_offset:
                    self.confirm_offset = chunks.confirm
                    store.dispatch_more()
                if wrote or time.monotonic() - reported >= heartbeat:
                    writer.write(encode_report(store.commitlog.max_offset))
                    reported = time.monotonic()
                    # Bounded too: a master that reads nothing fills this send buffer.
                    await _within(silence, "sending a report", writer.drain())
        finally:
            writer.transport.abort()
