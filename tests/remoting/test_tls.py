"""TLS on the NameServer, broker and HA ports in each of RocketMQ's modes, with rocketq's
client and with ``openssl s_client``, against a CA the test makes."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

from rocketq.client.errors import NameServerError
from rocketq.client.message import Message
from rocketq.client.producer import AsyncProducer
from rocketq.client.pull import AsyncPullConsumer
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import ConnectionClosedError, RemotingClient, TlsSettings

from ..certs import make_pki
from ..conftest import run_async


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def settings(pki, mode: str, **kw) -> TlsSettings:
    return TlsSettings(mode=mode, cert_path=pki.server_cert, key_path=pki.server_key, **kw)


def broker_tls(pki, mode: str) -> dict[str, str]:
    return {"tlsMode": mode, "tls.server.certPath": pki.server_cert,
            "tls.server.keyPath": pki.server_key, "tls.client.trustCertPath": pki.ca}


def client_ctx(pki, cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if cert:
        ctx.load_cert_chain(pki.client_cert, pki.client_key)
    return ctx


def tls_connections(server) -> list[bool]:
    """For each connection a server holds: whether it is a TLS one."""
    return [c.transport.get_extra_info("ssl_object") is not None
            for c in server.connections if c.transport is not None]


async def send_and_read_back(namesrv: str, tls, topic: str, n: int = 3) -> list[bytes]:
    async with AsyncProducer("pg-tls", namesrv, tls=tls) as producer:
        for i in range(n):
            assert (await producer.send(Message(topic, b"%d" % i))).status.value == "SEND_OK"
    consumer = AsyncPullConsumer("cg-tls", namesrv, tls=tls, from_where="first")
    consumer.subscribe(topic)
    await consumer.start()
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 15
        while len(got) < n and time.monotonic() < deadline:
            got += [m.body for m in await consumer.poll(1)]
    finally:
        await consumer.shutdown()
    return sorted(got)


def test_enforcing_ports_serve_tls_clients_and_turn_plain_ones_away(cluster, pki):
    async def main():
        ns = await cluster.start_namesrv(tls=settings(pki, "enforcing"))
        broker = await cluster.start_broker(**broker_tls(pki, "enforcing"))
        try:
            assert await send_and_read_back(cluster.namesrv, client_ctx(pki), "Secure") == \
                [b"0", b"1", b"2"]
            # The broker registered over TLS too, and the clients' connections were TLS.
            assert tls_connections(ns.server) and all(tls_connections(ns.server))
            plain = AsyncProducer("pg-plain", cluster.namesrv)
            await plain.start()
            try:
                with pytest.raises(NameServerError, match="accepts TLS connections only"):
                    await plain.send(Message("Secure", b"plain"))
            finally:
                await plain.shutdown()
            client = RemotingClient()
            try:
                r = await client.invoke(broker.address, RemotingCommand.request(
                    RequestCode.GET_BROKER_RUNTIME_INFO), 3)
            finally:
                await client.close()
            assert r.code == ResponseCode.SYSTEM_ERROR and "tlsMode=enforcing" in r.remark
        finally:
            await cluster.stop()
    run_async(main())


def test_a_permissive_port_serves_tls_and_plain_clients_side_by_side(cluster, pki):
    async def main():
        await cluster.start_namesrv(tls=settings(pki, "permissive"))
        broker = await cluster.start_broker(**broker_tls(pki, "permissive"))
        try:
            tls_producer = AsyncProducer("pg-a", cluster.namesrv, tls=client_ctx(pki))
            plain_producer = AsyncProducer("pg-b", cluster.namesrv)
            await tls_producer.start()
            await plain_producer.start()
            try:
                for p in (tls_producer, plain_producer, tls_producer):
                    assert (await p.send(Message("Mixed", b"m"))).status.value == "SEND_OK"
                assert sorted(tls_connections(broker.server)) == [False, True]
            finally:
                await tls_producer.shutdown()
                await plain_producer.shutdown()
        finally:
            await cluster.stop()
    run_async(main())


def test_a_tls_client_of_a_plain_port_is_told_the_handshake_failed(cluster, pki):
    async def main():
        ns = await cluster.start_namesrv()
        client = RemotingClient(ssl=client_ctx(pki))
        try:
            with pytest.raises(ConnectionClosedError, match="TLS handshake with .* failed"):
                await client.invoke(ns.address, RemotingCommand.request(
                    RequestCode.GET_BROKER_CLUSTER_INFO), 3)
        finally:
            await client.close()
            await cluster.stop()
    run_async(main())


def test_client_certificates_are_verified_when_required(cluster, pki):
    async def main():
        ns = await cluster.start_namesrv(tls=settings(
            pki, "enforcing", need_client_auth="require", trust_cert_path=pki.ca))
        try:
            ask = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            anonymous = RemotingClient(ssl=client_ctx(pki))
            try:
                with pytest.raises((ConnectionClosedError, ConnectionError, TimeoutError)):
                    await anonymous.invoke(ns.address, ask, 3)
            finally:
                await anonymous.close()
            known = RemotingClient(ssl=client_ctx(pki, cert=True))
            try:
                r = await known.invoke(ns.address, RemotingCommand.request(
                    RequestCode.GET_BROKER_CLUSTER_INFO), 3)
                assert r.code == ResponseCode.SUCCESS
            finally:
                await known.close()
        finally:
            await cluster.stop()
    run_async(main())


@pytest.mark.parametrize("mode", ["enforcing", "permissive", "disabled"])
def test_openssl_s_client_completes_a_verified_handshake(cluster, pki, mode):
    async def main():
        ns = await cluster.start_namesrv(tls=settings(pki, mode))
        try:
            proc = await asyncio.create_subprocess_exec(
                "openssl", "s_client", "-connect", ns.address, "-CAfile", pki.ca,
                "-verify_return_error", "-verify_ip", "127.0.0.1",
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT)
            out, _ = await asyncio.wait_for(proc.communicate(), 20)
            return proc.returncode, out.decode(errors="replace")
        finally:
            await cluster.stop()
    code, out = run_async(main())
    if mode == "disabled":  # a plain port: the handshake cannot complete
        assert code != 0 and "Server certificate" not in out, out
        return
    assert code == 0, out
    assert "Verify return code: 0 (ok)" in out
    assert "CN=server" in out or "CN = server" in out


def test_bad_tls_settings_are_refused_with_the_key_to_fix():
    with pytest.raises(ValueError, match="tlsMode must be one of"):
        TlsSettings(mode="sometimes")
    with pytest.raises(ValueError, match="needs tls.server.certPath"):
        TlsSettings(mode="enforcing")
    with pytest.raises(ValueError, match="cannot load the TLS certificate"):
        _ = TlsSettings(mode="enforcing", cert_path="/nonexistent.crt",
                        key_path="/nonexistent.key").server_context


@pytest.mark.slow
def test_a_slave_replicates_over_tls(cluster, pki):
    async def main():
        await cluster.start_namesrv(tls=settings(pki, "enforcing"))
        master = await cluster.start_broker(haListenPort=0, **broker_tls(pki, "enforcing"))
        slave = await cluster.start_broker(
            "slave", brokerName="broker-a", brokerId=1, brokerRole="SLAVE", haListenPort=0,
            haMasterAddress=master.ha_server.address, haSendHeartbeatInterval=200,
            **broker_tls(pki, "enforcing"))
        try:
            async with AsyncProducer("pg-ha", cluster.namesrv, tls=client_ctx(pki)) as p:
                for i in range(20):
                    await p.send(Message("HaTls", b"x%d" % i))
            end = master.store.commitlog.max_offset
            deadline = time.monotonic() + 10
            while slave.store.commitlog.max_offset < end and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert slave.store.commitlog.max_offset == end
            links = [c.transport.get_extra_info("ssl_object") for c in
                     master.ha_server.connections if c.transport is not None]
            assert links and all(links)
        finally:
            await cluster.stop()
    run_async(main())


def test_the_sync_producers_direct_sends_are_signed_and_encrypted(tmp_path, pki):
    """The synchronous producer sends from the caller's thread once it knows the route: that
    path signs and uses TLS too."""
    from rocketq import Producer

    from ..servers import ServerThread

    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - {accessKey: direct-admin, secretKey: direct-secret, "
                   "admin: true}\n")
    st = ServerThread(tmp_path)
    try:
        st.start_namesrv(acl_file=str(acl), tls=settings(pki, "enforcing"))
        st.start_broker(aclEnable="true", aclFile=str(acl), **broker_tls(pki, "enforcing"))
        with Producer("pg-direct", namesrv=st.namesrv, credentials=("direct-admin",
                      "direct-secret"), tls=client_ctx(pki)) as producer:
            results = [producer.send(Message("Direct", b"%d" % i)) for i in range(5)]
            sockets = list(producer._direct._sockets)
        assert [r.status.value for r in results] == ["SEND_OK"] * 5
        assert sockets and all(isinstance(s, ssl.SSLSocket) for s in sockets)
    finally:
        st.stop()
