"""A partition between a slave and its master: both ends drop the stuck link within
``haHousekeepingInterval`` (the master even while blocked writing to a full send buffer), and
the slave catches up as soon as the partition heals."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from rocketq import Message, Producer, SendStatus
from rocketq.ha import HAClient

from ..conftest import wait_for
from .test_replication import commitlog_bytes, start_slave


class _Side(asyncio.Protocol):
    """One end of a proxied connection: forwards what it reads to its peer, with flow
    control, unless the proxy is a blackhole."""

    def __init__(self, proxy: BlackholeProxy) -> None:
        self.proxy = proxy
        self.peer: _Side | None = None
        self.transport: asyncio.Transport | None = None
        self.pending: list[bytes] = []  # read before the peer was connected

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.proxy.blackhole:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.pending.append(data)

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc) -> None:
        if self.transport is not None:
            self.transport.abort()
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.abort()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if (self.peer is not None and self.peer.transport is not None
                and not self.proxy.blackhole):
            self.peer.transport.resume_reading()


class BlackholeProxy:
    """A TCP proxy on 127.0.0.1. As a blackhole it keeps every connection open but forwards
    and reads nothing, and connections made meanwhile reach the upstream only once healed:
    what a partition looks like to both ends."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.blackhole = False
        self.accepted = 0
        self.sides: list[_Side] = []
        self._held: list[_Side] = []
        self._server: asyncio.Server | None = None
        self.address = ""

    async def start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            self._accept, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def _accept(self) -> _Side:
        self.accepted += 1
        side = _Side(self)
        self.sides.append(side)
        if self.blackhole:
            self._held.append(side)
        else:
            asyncio.get_running_loop().create_task(self._connect(side))
        return side

    async def _connect(self, client: _Side) -> None:
        try:
            _, upstream = await asyncio.get_running_loop().create_connection(
                lambda: _Side(self), *self.upstream)
        except OSError:
            if client.transport is not None:
                client.transport.abort()
            return
        self.sides.append(upstream)
        if client.transport is None or client.transport.is_closing():
            upstream.transport.abort()  # the client gave up meanwhile
            return
        upstream.peer, client.peer = client, upstream
        for data in client.pending:
            upstream.transport.write(data)
        client.pending.clear()

    def cut(self) -> None:
        self.blackhole = True
        for side in self.sides:
            if side.transport is not None and not side.transport.is_closing():
                side.transport.pause_reading()

    def heal(self) -> None:
        self.blackhole = False
        for side in self.sides:
            if side.transport is not None and not side.transport.is_closing():
                side.transport.resume_reading()
        for side in self._held:  # their connect "went through" at last
            asyncio.get_running_loop().create_task(self._connect(side))
        self._held.clear()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for side in self.sides:
            if side.transport is not None:
                side.transport.abort()


HOUSEKEEPING_MS = 2000


def bodies(broker, topic: str, queue_id: int) -> list[bytes]:
    """Every message body of a queue, read page by page."""
    store, got, offset = broker.store, [], 0
    while offset < store.get_max_offset(topic, queue_id):
        page = store.get_messages(topic, queue_id, offset, 1000)
        got.extend(m.body for m in page.decode())
        offset = page.next_begin_offset
    return got


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_both_ends_drop_a_blackholed_link_and_the_slave_catches_up_after_healing(st):
    master = st.start_broker("broker-a", haSendHeartbeatInterval=200,
                             haHousekeepingInterval=HOUSEKEEPING_MS)
    st.create_topic("Cut", 2)
    proxy = BlackholeProxy(master.ha_server.address)
    st.call(proxy.start())
    slave = start_slave(st, haMasterAddress=proxy.address,
                        haHousekeepingInterval=HOUSEKEEPING_MS)
    acked: list[bytes] = []
    try:
        with Producer("pg", namesrv=st.namesrv) as producer:
            def send(prefix: str, count: int, size: int) -> None:
                for i in range(0, count, 32):
                    bodies = [b"%s-%d-" % (prefix.encode(), i + j) + b"x" * size
                              for j in range(32)]
                    result = producer.send_batch([Message("Cut", b) for b in bodies])
                    assert result.status == SendStatus.SEND_OK
                    acked.extend(bodies)

            send("before", 320, 200)
            assert wait_for(lambda: slave.store.commitlog.max_offset
                            == master.store.commitlog.max_offset, 10)
            assert len(master.ha_server.connections) == 1
            assert slave.ha_client.links == 1

            st.loop.call_soon_threadsafe(proxy.cut)
            cut_at = time.monotonic()
            blocked, sent = False, 0
            # Sends go on (16 MiB): the master's link fills the sockets' buffers and blocks
            # writing.
            while time.monotonic() - cut_at < HOUSEKEEPING_MS / 1000 * 2.5:
                if time.monotonic() - cut_at < HOUSEKEEPING_MS / 1000 and sent < 4096:
                    send("during", 64, 4096)
                    sent += 64
                    blocked = blocked or any(c.transport.get_write_buffer_size() > 0
                                             for c in list(master.ha_server.connections))
                else:
                    time.sleep(0.05)
            assert blocked, "the master's link never blocked writing"
            # Both ends gave up on the stuck connection: the master holds no link, and the
            # slave made a new one (held by the partition; the master never saw it).
            assert not master.ha_server.connections
            assert slave.ha_client.links >= 2 and proxy.accepted >= 2
            end = master.store.commitlog.max_offset
            assert slave.store.commitlog.max_offset < end

            st.loop.call_soon_threadsafe(proxy.heal)
            healed_at = time.monotonic()
            held = slave.store.commitlog.max_offset
            assert wait_for(lambda: slave.store.commitlog.max_offset > held, 5)
            first = time.monotonic() - healed_at
            assert wait_for(lambda: slave.store.commitlog.max_offset == end, 5)
            catch_up = time.monotonic() - healed_at
            print(f"after healing: first bytes in {first:.2f} s, caught up "
                  f"{end - held} bytes in {catch_up:.2f} s")
            assert catch_up < 3
            send("after", 32, 200)
        end = master.store.commitlog.max_offset
        assert wait_for(lambda: slave.store.commitlog.max_offset == end, 5)
        assert commitlog_bytes(slave) == commitlog_bytes(master)
        # Nothing acknowledged is lost: the slave serves every message the master accepted.
        assert slave.store.wait_dispatched(timeout=5)
        served = [body for q in (0, 1) for body in bodies(slave, "Cut", q)]
        assert len(served) == len(acked) and set(served) == set(acked)
    finally:
        st.loop.call_soon_threadsafe(proxy.close)


def test_a_slave_gives_up_on_a_connection_that_never_completes(st):
    """A TLS handshake the master never answers is abandoned after ``connect_timeout`` and
    tried again."""
    master = st.start_broker("broker-a")
    accepted = []

    async def go() -> tuple[asyncio.Server, HAClient]:
        # Accepts and says nothing: the TLS handshake never completes.
        server = await asyncio.start_server(lambda r, w: accepted.append(w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = HAClient(master.store, lambda: f"127.0.0.1:{port}", reconnect_interval=0.1,
                          ssl=ssl.create_default_context(), connect_timeout=0.3)
        client.start()
        return server, client

    server, client = st.call(go())
    try:
        assert wait_for(lambda: len(accepted) >= 3, 5)
        assert client.links == 0
    finally:
        st.call(client.stop())

        def close() -> None:
            server.close()
            for w in accepted:
                w.transport.abort()
        st.loop.call_soon_threadsafe(close)
