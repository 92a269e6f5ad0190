"""The asyncio transport over real loopback sockets."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from rocketq.protocol.command import RemotingCommand, encode
from rocketq.remoting import (
    ConnectionClosedError,
    RemotingClient,
    RemotingServer,
    RemotingTimeoutError,
)


def echo_handler(conn, cmd):
    if cmd.code == 1:  # answer after the requested delay, so replies come out of order
        async def later():
            await asyncio.sleep(float(cmd.ext_fields["delay"]))
            return cmd.response(0, {"n": cmd.ext_fields["n"]})
        return later()
    if cmd.code == 2:
        raise ValueError("handler broke")
    if cmd.code == 3:
        conn.attributes.setdefault("oneway", []).append(cmd.ext_fields["n"])
        return None
    if cmd.code == 4:  # never answers
        return asyncio.sleep(10)
    return cmd.response(0, {"echo": cmd.code}, cmd.body)


async def start(handler=echo_handler, **kw):
    server = RemotingServer(handler, "127.0.0.1", 0, **kw)
    await server.start()
    return server


def test_many_requests_in_flight_answered_out_of_order():
    async def main():
        server = await start()
        client = RemotingClient()
        try:
            delays = [0.3, 0.1, 0.2, 0.0, 0.25]
            order = []

            async def one(i, d):
                r = await client.invoke(server.address, RemotingCommand.request(
                    1, {"delay": d, "n": i}), timeout=2)
                order.append(int(r.ext_fields["n"]))

            await asyncio.gather(*(one(i, d) for i, d in enumerate(delays)))
            assert sorted(order) == [0, 1, 2, 3, 4]
            assert order == [3, 1, 2, 4, 0]  # each got its own answer, in completion order
            assert len(client.connections) == 1 and len(server.connections) == 1
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_oneway_errors_and_timeouts():
    async def main():
        server = await start()
        client = RemotingClient()
        try:
            await client.invoke_oneway(server.address, RemotingCommand.request(3, {"n": "a"}))
            r = await client.invoke(server.address, RemotingCommand.request(99, body=b"x"))
            assert r.code == 0 and r.body == b"x"
            (conn,) = server.connections
            assert conn.attributes["oneway"] == ["a"]
            r = await client.invoke(server.address, RemotingCommand.request(2))
            assert r.code == 1 and "handler broke" in r.remark
            with pytest.raises(RemotingTimeoutError):
                await client.invoke(server.address, RemotingCommand.request(4), timeout=0.2)
            # The connection is still good after a timeout.
            assert (await client.invoke(server.address, RemotingCommand.request(7))).code == 0
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_each_request_times_out_on_its_own_deadline():
    """Requests with different timeouts in flight at once, some answered, some never: each
    unanswered one fails after its own timeout (within the deadline sweep's interval), the
    answered ones succeed, and the sweeper stops once nothing is in flight."""
    from rocketq.remoting.connection import SWEEP_INTERVAL

    async def main():
        server = await start()
        client = RemotingClient()
        loop = asyncio.get_running_loop()
        try:
            conn = await client.connection(server.address)

            async def silent(timeout):
                t0 = loop.time()
                with pytest.raises(RemotingTimeoutError):
                    await conn.request(RemotingCommand.request(4), timeout)
                return loop.time() - t0

            async def answered(delay):
                r = await conn.request(RemotingCommand.request(
                    1, {"delay": delay, "n": "x"}), 5)
                return r.code

            timeouts = [0.1, 0.3, 0.2, 0.45]
            results = await asyncio.gather(*(silent(t) for t in timeouts),
                                           answered(0.05), answered(0.35))
            for timeout, took in zip(timeouts, results, strict=False):
                assert timeout <= took < timeout + SWEEP_INTERVAL + 0.5
            assert results[-2:] == [0, 0]
            assert not conn.pending and not conn._deadlines
            await asyncio.sleep(2 * SWEEP_INTERVAL)
            assert conn._sweeper is None
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_server_sends_requests_to_its_clients():
    async def main():
        async def server_handler(conn, cmd):
            back = await conn.request(RemotingCommand.request(39, {"q": "state?"}), 2)
            return cmd.response(0, {"client_said": back.ext_fields["a"]})

        def client_handler(conn, cmd):
            return cmd.response(0, {"a": f"answer to {cmd.ext_fields['q']}"})

        server = await start(server_handler)
        client = RemotingClient(client_handler)
        try:
            r = await client.invoke(server.address, RemotingCommand.request(34), timeout=3)
            assert r.ext_fields["client_said"] == "answer to state?"
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def raw_send(port, data, wait=0.5):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(data)
        sock.settimeout(wait)
        try:
            return sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return None


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", 1 << 30),                      # huge length
    struct.pack(">i", -1) + b"abcd",                 # negative length
    struct.pack(">ii", 9, 5) + b"{bad}",             # bad JSON
    struct.pack(">ii", 20, 100) + b"x" * 16,         # header longer than frame
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",            # not our protocol at all
])
def test_malformed_frames_close_only_that_connection(garbage):
    async def main():
        server = await start()
        client = RemotingClient()
        try:
            assert (await client.invoke(server.address, RemotingCommand.request(5))).code == 0
            answer = await asyncio.to_thread(raw_send, server.port, garbage)
            assert not answer  # closed without a reply
            r = await client.invoke(server.address, RemotingCommand.request(6, body=b"ok"))
            assert r.code == 0 and r.body == b"ok"
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_truncated_frame_then_peer_vanishes():
    async def main():
        server = await start()
        client = RemotingClient()
        try:
            frame = encode(RemotingCommand.request(5, {"a": "b"}))
            await asyncio.to_thread(raw_send, server.port, frame[:10], 0.1)
            r = await client.invoke(server.address, RemotingCommand.request(6))
            assert r.code == 0
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_unknown_code_without_handler_is_not_supported():
    async def main():
        server = await start(None)
        client = RemotingClient()
        try:
            r = await client.invoke(server.address, RemotingCommand.request(777))
            assert r.code == 3 and "777" in r.remark
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_idle_connections_expire_and_pending_requests_fail_on_close():
    async def main():
        server = await start(idle_timeout=0.3)
        client = RemotingClient()
        try:
            conn = await client.connection(server.address)
            await asyncio.wait_for(asyncio.shield(conn.closed), 3)
            assert not server.connections
            # A fresh connection is made on the next call.
            assert (await client.invoke(server.address, RemotingCommand.request(5))).code == 0
            conn = await client.connection(server.address)
            pending = asyncio.ensure_future(conn.request(RemotingCommand.request(4), 5))
            await asyncio.sleep(0.05)
            for c in list(server.connections):
                c.abort()
            with pytest.raises(ConnectionClosedError):
                await pending
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_connect_refused_is_a_clear_error():
    async def main():
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        client = RemotingClient()
        with pytest.raises(ConnectionClosedError, match="cannot connect"):
            await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(5))

    asyncio.run(main())


def test_a_bound_server_refuses_until_it_serves():
    """bind() reserves the port; connections are refused until start(), so a broker whose
    store is still opening does not take connections it cannot answer."""
    from rocketq.remoting import RemotingServer

    async def main():
        server = RemotingServer(lambda conn, cmd: cmd.response(), "127.0.0.1", 0)
        port = server.bind()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        await server.start()
        try:
            client = RemotingClient()
            r = await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(34))
            assert r.code == 0
            await client.close()
        finally:
            await server.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


@pytest.mark.parametrize("peer_left", [False, True])
def test_stop_ends_the_requests_still_being_served(peer_left):
    """A server that stops cancels the handlers still running, for connections open and
    for peers that already left, rather than leaving their tasks pending when the loop
    closes."""
    ended = []

    def handler(conn, cmd):
        async def forever():
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                ended.append(cmd.opaque)
                raise
        return forever()

    async def main():
        server = await start(handler)
        client = RemotingClient()
        request = asyncio.ensure_future(client.invoke(
            server.address, RemotingCommand.request(9, None), timeout=30))
        while not any(conn.running_requests() for conn in server.connections):
            await asyncio.sleep(0.01)
        if peer_left:
            await client.close()
            while server.connections:
                await asyncio.sleep(0.01)
        await server.stop()
        assert len(ended) == 1
        await client.close()
        with pytest.raises(ConnectionClosedError):
            await request

    asyncio.run(main())
