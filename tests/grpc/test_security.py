"""The gRPC port under the broker's ACL (the ``authorization`` header checked against
``plain_acl.yml``) and under TLS (``tlsMode``)."""

from __future__ import annotations

import hashlib
import hmac
import time

import grpc
import pytest

from rocketq.client.admin import AsyncAdmin
from rocketq.grpc import GrpcServer
from rocketq.grpc.proto import definition_pb2 as pb
from rocketq.grpc.proto import service_pb2 as spb
from rocketq.grpc.proto import service_pb2_grpc

from ..acl.test_acl_servers import ADMIN, USER, write_acl
from ..certs import make_pki
from ..conftest import run_async
from .conftest import Client, message, resource


def authorization(access_key: str, secret: str, date: str) -> str:
    signature = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest()
    return (f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
            f"Signature={signature}")


def test_acl_checks_the_authorization_header(grpc_broker, tmp_path):
    async def go():
        acl = tmp_path / "plain_acl.yml"
        write_acl(acl)
        b = grpc_broker
        await b.cluster.start_namesrv()
        b.broker = await b.cluster.start_broker(aclEnable="true", aclFile=str(acl))
        b.server = GrpcServer(b.broker, "127.0.0.1", 0)
        await b.server.start()
        async with AsyncAdmin(b.cluster.namesrv, credentials=ADMIN) as admin:
            for topic in ("Orders", "ReadOnly"):
                await admin.create_topic(topic, queues=2)
        c = b.client()
        date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())

        async def send(topic, *credentials):
            md = {"x-mq-date-time": date}
            if credentials:
                md["authorization"] = authorization(*credentials, date)
            r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
                message(topic, b"x")]), **md)
            return r.status
        ok = await send("Orders", *USER)
        assert ok.code == pb.OK, ok
        wrong = await send("Orders", USER[0], "not-the-secret")
        assert wrong.code == pb.UNAUTHORIZED and "signature" in wrong.message.lower()
        unknown = await send("Orders", "nobody", "x")
        assert unknown.code == pb.UNAUTHORIZED and "nobody" in unknown.message
        missing = await send("Orders")
        assert missing.code == pb.UNAUTHORIZED
        denied = await send("ReadOnly", *USER)  # SUB only
        assert denied.code == pb.FORBIDDEN and "ReadOnly" in denied.message
        # Nothing refused was stored; the one allowed was.
        assert b.broker.store.get_max_offset("ReadOnly", 0) + \
            b.broker.store.get_max_offset("ReadOnly", 1) == 0
        await b.stop()
    run_async(go())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_port(grpc_broker, pki):
    async def go():
        from rocketq.remoting import TlsSettings

        b = grpc_broker
        await b.cluster.start_namesrv(tls=TlsSettings(
            mode="enforcing", cert_path=pki.server_cert, key_path=pki.server_key))
        b.broker = await b.cluster.start_broker(**{
            "tlsMode": "enforcing", "tls.server.certPath": pki.server_cert,
            "tls.server.keyPath": pki.server_key, "tls.client.trustCertPath": pki.ca})
        b.server = GrpcServer(b.broker, "127.0.0.1", 0)
        await b.server.start()
        async with AsyncAdmin(b.cluster.namesrv, tls=_client_ctx(pki)) as admin:
            await admin.create_topic("T", queues=1)
        with open(pki.ca, "rb") as fh:
            roots = fh.read()
        channel = grpc.aio.secure_channel(f"127.0.0.1:{b.server.port}",
                                          grpc.ssl_channel_credentials(roots))
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        c = Client(b.address)
        r = await stub.QueryRoute(spb.QueryRouteRequest(topic=resource("T")),
                                  metadata=c.metadata(), timeout=10)
        assert r.status.code == pb.OK and len(r.message_queues) == 1
        await channel.close()
        # A plain-text client cannot talk to it.
        with pytest.raises(grpc.aio.AioRpcError):
            await c.call("QueryRoute", spb.QueryRouteRequest(topic=resource("T")), timeout=3)
        await b.stop()
    run_async(go())


def _client_ctx(pki):
    import ssl
    return ssl.create_default_context(cafile=pki.ca)
