"""A group's progress is one thing over gRPC and remoting; the offset RPCs; BATCH_ACK_MESSAGE
with the body Java clients send; topic attributes from mqadmin 5's updateTopic."""

from __future__ import annotations

import asyncio
import base64

import orjson

from rocketq.aio import ConsumeResult, Message, Producer, PushConsumer
from rocketq.grpc.proto import definition_pb2 as pb
from rocketq.grpc.proto import service_pb2 as spb
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient

from ..conftest import run_async, until
from .conftest import message, resource
from .test_pop import ack
from .test_service import receive


def queue(topic: str, queue_id: int) -> pb.MessageQueue:
    return pb.MessageQueue(topic=resource(topic), id=queue_id)


async def push_bodies(namesrv: str, group: str, topic: str, count: int) -> list[bytes]:
    got: list[bytes] = []

    async def listener(messages):
        got.extend(m.body for m in messages)
        return ConsumeResult.SUCCESS
    async with PushConsumer(group, namesrv=namesrv, from_where="first") as consumer:
        consumer.subscribe(topic)
        consumer.register(listener)
        await until(lambda: len(got) >= count, 20)
        await asyncio.sleep(0.5)  # nothing more comes
    return got


def test_progress_is_shared_between_grpc_and_a_4x_push_consumer(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("Shared", 2)
        c = b.client()
        async with Producer("pg", namesrv=b.cluster.namesrv) as producer:
            for i in range(10):
                await producer.send(Message("Shared", b"a%d" % i))
        acked = []
        while len(acked) < 10:
            status, ms = await receive(c, "SG", "Shared", batch=10 - len(acked))
            for m in ms:
                assert (await ack(c, "SG", "Shared", m)).code == pb.OK
                acked.append(m.body)
        assert sorted(acked) == sorted(b"a%d" % i for i in range(10))
        async with Producer("pg", namesrv=b.cluster.namesrv) as producer:
            for i in range(6):
                await producer.send(Message("Shared", b"b%d" % i))
        # The 4.x consumer of the group starts where gRPC left off.
        got = await push_bodies(b.cluster.namesrv, "SG", "Shared", 6)
        assert sorted(got) == sorted(b"b%d" % i for i in range(6))
        # And the reverse: what the push consumer committed is not received over gRPC.
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
            message("Shared", b"c0")]))
        assert r.status.code == pb.OK
        status, ms = await receive(c, "SG", "Shared", batch=32, poll_ms=2000)
        assert [m.body for m in ms] == [b"c0"]
        await b.stop()
    run_async(go())


def test_offset_rpcs_and_pull(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("Off", 1)
        c = b.client()
        for i in range(5):
            await c.call("SendMessage", spb.SendMessageRequest(messages=[
                message("Off", b"o%d" % i)]))
        q = queue("Off", 0)
        r = await c.call("GetOffset", spb.GetOffsetRequest(group=resource("OG"),
                                                           message_queue=q))
        assert r.status.code == pb.OFFSET_NOT_FOUND
        r = await c.call("UpdateOffset", spb.UpdateOffsetRequest(
            group=resource("OG"), message_queue=q, offset=3))
        assert r.status.code == pb.OK
        r = await c.call("GetOffset", spb.GetOffsetRequest(group=resource("OG"),
                                                           message_queue=q))
        assert r.status.code == pb.OK and r.offset == 3
        assert b.broker.offsets.query("OG", "Off", 0) == 3  # the one offset table
        for policy, want in ((pb.BEGINNING, 0), (pb.END, 5)):
            r = await c.call("QueryOffset", spb.QueryOffsetRequest(
                message_queue=q, query_offset_policy=policy))
            assert r.status.code == pb.OK and r.offset == want
        r = await c.call("UpdateOffset", spb.UpdateOffsetRequest(
            group=resource("OG"), message_queue=q, offset=-1))
        assert r.status.code == pb.ILLEGAL_OFFSET
        r = await c.call("GetOffset", spb.GetOffsetRequest(group=resource("OG"),
                                                           message_queue=queue("Off", 7)))
        assert r.status.code == pb.BAD_REQUEST
        frames = await c.stream("PullMessage", spb.PullMessageRequest(
            group=resource("OG"), message_queue=q, offset=3, batch_size=10,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*")))
        kinds = [f.WhichOneof("content") for f in frames]
        assert kinds == ["status", "message", "message", "next_offset"]
        assert [f.message.body for f in frames[1:3]] == [b"o3", b"o4"]
        assert frames[-1].next_offset == 5
        # Where the group's pulls read next, as a remoting pull leaves it (the exporter's
        # in-flight count: 5 - 3 messages out at the consumer).
        assert b.broker.stats.pull_offsets[("OG", "Off", 0)] == 5
        await b.stop()
    run_async(go())


def test_batch_ack_as_java_clients_send_it(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("BA", 1)
        c = b.client()
        for i in range(4):
            await c.call("SendMessage", spb.SendMessageRequest(messages=[
                message("BA", b"x%d" % i)]))
        client = RemotingClient()
        try:
            pop = await client.invoke(b.broker.address, RemotingCommand.request(
                RequestCode.POP_MESSAGE, {"consumerGroup": "BG", "topic": "BA", "queueId": -1,
                                          "maxMsgNums": 4, "invisibleTime": 60000,
                                          "pollTime": 1000, "bornTime": 0, "initMode": 1}), 5)
            assert pop.code == ResponseCode.SUCCESS, pop.remark
            start = int(pop.ext_fields["startOffsetInfo"].split()[2])
            offsets = [int(o) for o in pop.ext_fields["msgOffsetInfo"].split()[2].split(",")]
            assert offsets == [0, 1, 2, 3]
            # Java's BitSet.toByteArray of offsets 0, 1 and 3 from the start: 0b1011.
            body = {"brokerName": "broker-a", "acks": [{
                "c": "BG", "t": "BA", "r": "0", "so": start, "q": 0, "rq": 0,
                "pt": int(pop.ext_fields["popTime"]), "it": 60000,
                "b": base64.b64encode(bytes([0b1011])).decode()}]}
            r = await client.invoke(b.broker.address, RemotingCommand.request(
                RequestCode.BATCH_ACK_MESSAGE, {}, orjson.dumps(body)), 5)
            assert r.code == ResponseCode.SUCCESS, r.remark
            ck = next(iter(b.broker.pop.checkpoints.values()))
            assert ck.acked == {0, 1, 3} and ck.open == [2]
            bad = await client.invoke(b.broker.address, RemotingCommand.request(
                RequestCode.BATCH_ACK_MESSAGE, {}, b"not json"), 5)
            assert bad.code == ResponseCode.INVALID_PARAMETER
        finally:
            await client.close()
        await b.stop()
    run_async(go())


def test_mqadmin_updatetopic_attributes(grpc_broker):
    """mqadmin 5's ``updateTopic -a +message.type=FIFO`` sends ``attributes``."""
    async def go():
        b = await grpc_broker.start()
        client = RemotingClient()
        fields = {"topic": "Attr", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
                  "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
        try:
            async def update(**more):
                return await client.invoke(b.broker.address, RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC, {**fields, **more}), 5)
            assert (await update(attributes="+message.type=FIFO")).code == ResponseCode.SUCCESS
            assert b.broker.topics.get("Attr").attributes == {"message.type": "FIFO"}
            r = await b.client().call("QueryRoute", spb.QueryRouteRequest(
                topic=resource("Attr")))
            assert list(r.message_queues[0].accept_message_types) == [pb.FIFO]
            # Kept by an update that does not name it; removed by "-".
            assert (await update()).code == ResponseCode.SUCCESS
            assert b.broker.topics.get("Attr").attributes == {"message.type": "FIFO"}
            for bad in ("+message.type=QUEUE", "+nope=1", "message.type=FIFO"):
                r = await update(attributes=bad)
                assert r.code == ResponseCode.INVALID_PARAMETER and "attribute" in r.remark
            assert (await update(attributes="-message.type")).code == ResponseCode.SUCCESS
            assert b.broker.topics.get("Attr").attributes == {}
        finally:
            await client.close()
        await b.stop()
    run_async(go())
