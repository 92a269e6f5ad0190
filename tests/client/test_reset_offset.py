"""rocketq's consumers answering what brokers ask of them on an admin's behalf: an offset reset
(mqadmin resetOffsetByTime -> 222 -> 220), their running info (consumerProgress -s ->
307) and consuming one message directly (consumeMessage -> 309)."""

from __future__ import annotations

import asyncio
import time

from rocketq.aio import ConsumeResult, Message
from rocketq.aio import Producer as AsyncProducer
from rocketq.aio import PullConsumer as AsyncPullConsumer
from rocketq.aio import PushConsumer as AsyncPushConsumer
from rocketq.protocol import fastjson
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand
from rocketq.remoting import RemotingClient

from ..broker.test_consumer_calls import (
    admin_call,
    committed,
    create_topic,
    offsets_of,
    reset_frame,
    running_info_frame,
)
from ..conftest import run_async


async def until(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def eventually(check, timeout: float = 15.0) -> None:
    """Wait until the coroutine function ``check`` returns true."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


async def send(namesrv: str, topic: str, bodies: list[bytes]) -> list:
    async with AsyncProducer("pg", namesrv=namesrv) as producer:
        return [await producer.send(Message(topic, body)) for body in bodies]


async def running_info(addr: str, group: str, client_id: str, jstack: bool = False) -> dict:
    r = await admin_call(addr, *running_info_frame(
        consumerGroup=group, clientId=client_id, jstackEnable=str(jstack).lower()))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return fastjson.loads(r.body)


async def consume_directly(addr: str, group: str, client_id: str, msg_id: str
                           ) -> RemotingCommand:
    c = RemotingClient()
    try:
        return await c.invoke(addr, RemotingCommand.request(RC.CONSUME_MESSAGE_DIRECTLY, {
            "consumerGroup": group, "clientId": client_id, "msgId": msg_id}))
    finally:
        await c.close()


def test_push_consumer_consumes_again_after_a_reset_to_the_start(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        addr = broker.address
        admin = RemotingClient()
        got: list[bytes] = []

        async def listener(msgs):
            got.extend(m.body for m in msgs)
            return ConsumeResult.SUCCESS

        consumer = AsyncPushConsumer("CG_PUSH", namesrv=cluster.namesrv, from_where="first",
                                     persist_interval=0.2, rebalance_interval=1)
        try:
            await create_topic(admin, addr, "RT", 2)
            consumer.subscribe("RT")
            consumer.register(listener)
            await consumer.start()
            await until(lambda: len([q for q in consumer.assigned_queues()
                                     if q.topic == "RT"]) == 2)
            first = [b"m%d" % i for i in range(10)]
            await send(cluster.namesrv, "RT", first)
            await until(lambda: len(got) == 10)

            async def all_committed(total=10):
                return sum([await committed(admin, addr, "CG_PUSH", "RT", q)
                            for q in (0, 1)]) == total
            await eventually(all_committed)

            r = await admin_call(addr, *reset_frame(group="CG_PUSH", topic="RT",
                                                    timestamp="0"))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert offsets_of(r.body) == {0: 0, 1: 0}
            await until(lambda: len(got) == 20)
            assert sorted(got[10:]) == sorted(first)  # every message once more
            await eventually(all_committed)  # and the group is past them again
            await asyncio.sleep(0.5)
            assert len(got) == 20
        finally:
            await consumer.shutdown()
            await admin.close()
            await cluster.stop()
    run_async(main())


def test_pull_consumer_polls_again_after_a_reset(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        addr = broker.address
        admin = RemotingClient()
        consumer = AsyncPullConsumer("CG_PULL", namesrv=cluster.namesrv, from_where="first",
                                     rebalance_interval=1, suspend_timeout=1,
                                     auto_commit=False)
        try:
            await create_topic(admin, addr, "RP", 2)
            consumer.subscribe("RP")
            await consumer.start()
            await until(lambda: len(consumer.assignment()) == 2)
            sent = [b"p%d" % i for i in range(8)]
            await send(cluster.namesrv, "RP", sent)
            polled: list[bytes] = []
            while len(polled) < 8:
                polled.extend(m.body for m in await consumer.poll(1))
            await consumer.commit()
            assert sorted(polled) == sorted(sent)

            r = await admin_call(addr, *reset_frame(group="CG_PULL", topic="RP",
                                                    timestamp="0"))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert offsets_of(r.body) == {0: 0, 1: 0}
            again: list[bytes] = []
            deadline = time.monotonic() + 15
            while len(again) < 8 and time.monotonic() < deadline:
                again.extend(m.body for m in await consumer.poll(1))
            assert sorted(again) == sorted(sent)
            # Polled, not committed (no auto-commit): the group stays at the reset offsets.
            assert [await committed(admin, addr, "CG_PULL", "RP", q) for q in (0, 1)] == [0, 0]

            info = await running_info(addr, "CG_PULL", consumer.instance.client_id)
            assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_ACTIVELY"
            assert [s["topic"] for s in info["subscriptionSet"]] == ["RP"]
            assert sorted(mq["queueId"] for mq, _ in info["mqTable"].items) == [0, 1]
        finally:
            await consumer.shutdown()
            await admin.close()
            await cluster.stop()
    run_async(main())


def test_running_info_and_consume_directly_of_a_push_consumer(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        addr = broker.address
        admin = RemotingClient()
        got: list = []

        def listener(msgs):  # a plain function: it runs on the consume thread pool
            got.extend(msgs)
            if msgs[0].body == b"boom":
                raise RuntimeError("cannot digest boom")
            if msgs[0].body == b"later":
                return ConsumeResult.RECONSUME_LATER
            return None

        consumer = AsyncPushConsumer("CG_INFO", namesrv=cluster.namesrv, from_where="first",
                                     rebalance_interval=1, consume_thread_max=4,
                                     consume_thread_min=2)
        try:
            await create_topic(admin, addr, "RI", 2)
            consumer.subscribe("RI", "a || b")
            consumer.register(listener)
            before = int(time.time() * 1000)
            await consumer.start()
            await until(lambda: len([q for q in consumer.assigned_queues()
                                     if q.topic == "RI"]) == 2)
            results = await send(cluster.namesrv, "RI", [b"x1", b"x2", b"x3"])
            # Nothing matches the tags, but the pulls come back.
            await until(lambda: all(pq.last_pull_timestamp for mq, pq in
                                    consumer.process_queues.items() if mq.topic == "RI"))
            assert got == []
            client_id = consumer.instance.client_id

            info = await running_info(addr, "CG_INFO", client_id)
            props = info["properties"]
            assert props["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert props["PROP_CONSUMEORDERLY"] == "false"
            assert props["PROP_THREADPOOL_CORE_SIZE"] == "4"
            assert props["PROP_NAMESERVER_ADDR"] == cluster.namesrv + ";"
            assert props["PROP_CLIENT_VERSION"].startswith("rocketq")
            assert before <= int(props["PROP_CONSUMER_START_TIMESTAMP"]) <= time.time() * 1000
            assert props["consumerGroup"] == "CG_INFO"
            assert props["messageModel"] == "CLUSTERING"
            subs = {s["topic"]: s for s in info["subscriptionSet"]}
            assert set(subs) == {"RI", "%RETRY%CG_INFO"}
            assert subs["RI"]["subString"] == "a || b"
            assert sorted(subs["RI"]["tagsSet"]) == ["a", "b"]
            table = {(mq["topic"], mq["brokerName"], mq["queueId"]): pq
                     for mq, pq in info["mqTable"].items}
            assert {k for k in table if k[0] == "RI"} == {("RI", "broker-a", 0),
                                                          ("RI", "broker-a", 1)}
            pq = table[("RI", "broker-a", 0)]
            assert pq["droped"] is False and pq["locked"] is False
            assert pq["cachedMsgCount"] == 0 and pq["lastPullTimestamp"] >= before
            assert set(info["statusTable"]) == {"RI", "%RETRY%CG_INFO"}
            assert "jstack" not in info
            jstack = (await running_info(addr, "CG_INFO", client_id, jstack=True))["jstack"]
            assert "rocketq-client" in jstack or "MainThread" in jstack

            # consumeMessage: the listener runs on the stored message, whatever its tags.
            r = await consume_directly(addr, "CG_INFO", client_id, results[0].offset_msg_id)
            assert r.code == ResponseCode.SUCCESS, r.remark
            answer = fastjson.loads(r.body)
            assert answer["consumeResult"] == "CR_SUCCESS"
            assert answer["order"] is False and answer["autoCommit"] is True
            assert answer["spentTimeMills"] >= 0 and "remark" not in answer
            assert [(m.body, m.topic, m.broker_name) for m in got] == [(b"x1", "RI",
                                                                        "broker-a")]
            boom, later = await send(cluster.namesrv, "RI", [b"boom", b"later"])
            r = await consume_directly(addr, "CG_INFO", client_id, boom.offset_msg_id)
            answer = fastjson.loads(r.body)
            assert answer["consumeResult"] == "CR_THROW_EXCEPTION"
            assert "cannot digest boom" in answer["remark"]
            r = await consume_directly(addr, "CG_INFO", client_id, later.offset_msg_id)
            assert fastjson.loads(r.body)["consumeResult"] == "CR_LATER"

            r = await admin_call(addr, *running_info_frame(consumerGroup="CG_INFO"))
            assert r.code == ResponseCode.SYSTEM_ERROR  # the captured frame's client id
            assert "not online" in r.remark
        finally:
            await consumer.shutdown()
            await admin.close()
            await cluster.stop()
    run_async(main())
