"""The MessagingService on a real broker, called over a real gRPC channel the way the
official 5.x clients call it."""

from __future__ import annotations

import asyncio
import time
import uuid

from rocketq.client.admin import AsyncAdmin
from rocketq.grpc.proto import definition_pb2 as pb
from rocketq.grpc.proto import service_pb2 as spb

from ..conftest import run_async
from .conftest import consumer_settings, message, producer_settings, resource


def receive_request(group: str, topic: str, *, batch: int = 8, invisible_ms: int = 10_000,
                    poll_ms: int = 1000) -> spb.ReceiveMessageRequest:
    request = spb.ReceiveMessageRequest(
        group=resource(group), message_queue=pb.MessageQueue(topic=resource(topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch)
    request.invisible_duration.FromMilliseconds(invisible_ms)
    request.long_polling_timeout.FromMilliseconds(poll_ms)
    return request


async def receive(client, group, topic, **kw) -> tuple[pb.Status, list[pb.Message]]:
    frames = await client.stream("ReceiveMessage", receive_request(group, topic, **kw))
    statuses = [f.status for f in frames if f.WhichOneof("content") == "status"]
    assert len(statuses) == 1, frames
    assert frames[-1].WhichOneof("content") == "delivery_timestamp"
    return statuses[0], [f.message for f in frames if f.WhichOneof("content") == "message"]


def test_route_send_receive_ack(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("T", 4)
        producer, consumer = b.client(), b.client()
        route = await producer.call("QueryRoute", spb.QueryRouteRequest(topic=resource("T")))
        assert route.status.code == pb.OK
        assert len(route.message_queues) == 4
        q = route.message_queues[0]
        assert q.broker.id == 0 and q.permission == pb.READ_WRITE
        assert q.broker.endpoints.scheme == pb.IPv4
        assert q.broker.endpoints.addresses[0].port == b.server.port
        assert list(q.accept_message_types) == [pb.NORMAL]
        reply = await producer.settings(producer_settings("T"))
        assert reply.status.code == pb.OK
        assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
        assert reply.settings.backoff_policy.max_attempts == 3
        sent = await producer.call("SendMessage", spb.SendMessageRequest(messages=[
            message("T", b"hello", tag="a", keys=["k1", "k2"], props={"p": "v"})]))
        assert sent.status.code == pb.OK, sent
        assert len(sent.entries) == 1 and sent.entries[0].status.code == pb.OK
        message_id = sent.entries[0].message_id
        reply = await consumer.settings(consumer_settings("G", "T"))
        assert reply.status.code == pb.OK
        assert reply.settings.subscription.fifo is False
        assert reply.settings.backoff_policy.max_attempts == 17
        status, messages = await receive(consumer, "G", "T")
        assert status.code == pb.OK and len(messages) == 1
        m = messages[0]
        assert m.body == b"hello" and m.topic.name == "T"
        sp = m.system_properties
        assert sp.message_id == message_id and sp.tag == "a" and list(sp.keys) == ["k1", "k2"]
        assert dict(m.user_properties) == {"p": "v"}
        assert sp.delivery_attempt == 1 and sp.receipt_handle
        ack = await consumer.call("AckMessage", spb.AckMessageRequest(
            group=resource("G"), topic=resource("T"), entries=[spb.AckMessageEntry(
                message_id=message_id, receipt_handle=sp.receipt_handle)]))
        assert ack.status.code == pb.OK and ack.entries[0].status.code == pb.OK
        t0 = time.monotonic()
        status, messages = await receive(consumer, "G", "T", poll_ms=5000)
        assert status.code == pb.MESSAGE_NOT_FOUND and not messages
        assert time.monotonic() - t0 >= 4  # it waited for a message (long polling)
        await b.stop()
    run_async(go())


def test_a_rocketmq5_message_id_finds_the_message_through_the_admin(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("T5", 2)
        c = b.client()
        sent = message("T5", b"five")
        five = "01" + uuid.uuid4().hex.upper()  # MessageIdCodec: "01" and 32 hex digits
        sent.system_properties.message_id = five
        reply = await c.call("SendMessage", spb.SendMessageRequest(messages=[sent]))
        assert reply.entries[0].status.code == pb.OK and reply.entries[0].message_id == five
        assert await asyncio.to_thread(b.broker.store.wait_dispatched)
        async with AsyncAdmin(b.cluster.namesrv) as admin:
            for topic in (None, "T5"):
                found = await admin.message_by_id(five, topic)
                assert (found.msg_id, found.topic, found.body) == (five, "T5", b"five")
        await b.stop()
    run_async(go())


def test_unacked_comes_back_with_the_next_attempt(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("T", 2)
        c = b.client()
        await c.call("SendMessage", spb.SendMessageRequest(messages=[message("T", b"x")]))
        status, first = await receive(c, "G", "T", invisible_ms=10_000)
        assert len(first) == 1
        # Made visible again in 1 s instead of 10.
        changed = await c.call("ChangeInvisibleDuration", spb.ChangeInvisibleDurationRequest(
            group=resource("G"), topic=resource("T"),
            receipt_handle=first[0].system_properties.receipt_handle,
            invisible_duration=_duration(1000),
            message_id=first[0].system_properties.message_id))
        assert changed.status.code == pb.OK and changed.receipt_handle
        await asyncio.sleep(1.5)
        status, again = await receive(c, "G", "T", poll_ms=5000)
        assert len(again) == 1
        assert again[0].system_properties.message_id == first[0].system_properties.message_id
        assert again[0].system_properties.delivery_attempt == 2
        # The old handles are no good any more.
        ack = await c.call("AckMessage", spb.AckMessageRequest(
            group=resource("G"), topic=resource("T"), entries=[spb.AckMessageEntry(
                message_id="x", receipt_handle=first[0].system_properties.receipt_handle)]))
        assert ack.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        await b.stop()
    run_async(go())


def _duration(ms):
    from rocketq.grpc.convert import duration
    return duration(ms)
