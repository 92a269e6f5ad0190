"""A broker with its gRPC port, on the test's event loop, and a stub speaking to it the way
the official 5.x clients do (their headers, their telemetry settings)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import grpc
import pytest

from rocketq.client.admin import AsyncAdmin
from rocketq.grpc import GrpcServer
from rocketq.grpc.proto import definition_pb2 as pb
from rocketq.grpc.proto import service_pb2 as spb
from rocketq.grpc.proto import service_pb2_grpc

from ..conftest import Cluster


class Client:
    """A bare v2 client over a channel: each call carries the 5.x headers."""

    def __init__(self, address: str, client_id: str | None = None) -> None:
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.client_id = client_id or f"test-{uuid.uuid4().hex[:12]}"
        self._telemetry: grpc.aio.StreamStreamCall | None = None
        self.queue: asyncio.Queue[spb.TelemetryCommand] = asyncio.Queue()

    def metadata(self, **extra: str) -> list[tuple[str, str]]:
        md = {"x-mq-client-id": self.client_id, "x-mq-language": "PYTHON",
              "x-mq-protocol": "GRPC_V2", "x-mq-client-version": "5.1.2",
              "x-mq-date-time": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
              "x-mq-request-id": uuid.uuid4().hex}
        md.update(extra)
        return list(md.items())

    async def call(self, name: str, request, timeout: float = 10, **md):
        return await getattr(self.stub, name)(request, metadata=self.metadata(**md),
                                              timeout=timeout)

    async def stream(self, name: str, request, timeout: float = 30, **md) -> list:
        call = getattr(self.stub, name)(request, metadata=self.metadata(**md), timeout=timeout)
        return [r async for r in call]

    async def settings(self, settings: pb.Settings) -> spb.TelemetryCommand:
        """Open the telemetry stream (once) and send ``settings``; the broker's answer."""
        if self._telemetry is None:
            self._telemetry = self.stub.Telemetry(metadata=self.metadata())

            async def read():
                with contextlib.suppress(grpc.RpcError, asyncio.CancelledError):
                    async for command in self._telemetry:
                        await self.queue.put(command)
            self._reader = asyncio.ensure_future(read())
        await self._telemetry.write(spb.TelemetryCommand(settings=settings))
        return await asyncio.wait_for(self.queue.get(), 10)

    async def close(self) -> None:
        if self._telemetry is not None:
            self._telemetry.cancel()
            self._reader.cancel()
        await self.channel.close()


def resource(name: str) -> pb.Resource:
    return pb.Resource(name=name)


def producer_settings(*topics: str) -> pb.Settings:
    return pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
        topics=[resource(t) for t in topics], validate_message_type=True))


def consumer_settings(group: str, topic: str) -> pb.Settings:
    return pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=resource(group), subscriptions=[pb.SubscriptionEntry(
            topic=resource(topic), expression=pb.FilterExpression(type=pb.TAG,
                                                                  expression="*"))]))


def message(topic: str, body: bytes, *, tag: str | None = "t", keys=(), group=None,
            deliver_at_ms=None, kind=pb.NORMAL, props=None) -> pb.Message:
    sp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=kind,
                             body_encoding=pb.IDENTITY, keys=list(keys))
    sp.born_timestamp.GetCurrentTime()
    if tag is not None:
        sp.tag = tag
    if group is not None:
        sp.message_group = group
    if deliver_at_ms is not None:
        sp.delivery_timestamp.FromMilliseconds(deliver_at_ms)
    return pb.Message(topic=resource(topic), body=body, system_properties=sp,
                      user_properties=props or {})


class GrpcBroker:
    """A NameServer, a broker and its gRPC port, on the running loop."""

    def __init__(self, tmp_path) -> None:
        self.cluster = Cluster(tmp_path)
        self.server: GrpcServer | None = None
        self.clients: list[Client] = []

    async def start(self, **conf) -> GrpcBroker:
        await self.cluster.start_namesrv()
        self.broker = await self.cluster.start_broker(**conf)
        self.server = GrpcServer(self.broker, "127.0.0.1", 0)
        await self.server.start()
        return self

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.port}"

    def client(self) -> Client:
        client = Client(self.address)
        self.clients.append(client)
        return client

    async def create_topic(self, topic: str, queues: int = 4, message_type: str | None = None
                           ) -> None:
        async with AsyncAdmin(self.cluster.namesrv) as admin:
            kwargs = {"message_type": message_type} if message_type else {}
            await admin.create_topic(topic, queues, **kwargs)

    async def stop(self) -> None:
        for client in self.clients:
            await client.close()
        if self.server is not None:
            await self.server.stop()
        await self.cluster.stop()


@pytest.fixture
def grpc_broker(tmp_path):
    return GrpcBroker(tmp_path)
