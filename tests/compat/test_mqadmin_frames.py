"""Every request mqadmin 4.9.8 sent in the captured session, replayed byte for byte: each is
answered SUCCESS with a body mqadmin can read, none "request type not supported"."""

from __future__ import annotations

import asyncio
import time

import orjson

from rocketq import __version__
from rocketq.protocol import fastjson
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand, encode
from rocketq.protocol.message import decode_records

from ..broker.test_broker import pull, send_v2
from ..conftest import run_async
from ..raw_peer import RawPeer
from .java498_frames import frames

HOLD = "192.0.2.2@hold"


def heartbeat(client_id: str, group: str, topic: str) -> RemotingCommand:
    return RemotingCommand.request(RC.HEART_BEAT, body=orjson.dumps({
        "clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}]}]}))


def test_mqadmin_session(cluster):
    admin_frames = [f for f in frames("mqadmin")
                    if f.code not in (RC.HEART_BEAT, RC.UNREGISTER_CLIENT)]
    assert {f.code for f in admin_frames} == {28, 200, 222, 25, 26, 208, 203, 307, 202, 12}
    java_send = frames("producer", RC.SEND_MESSAGE_V2)[0]  # keys "KEY1 KEY2", topic CT_P

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        admin, hold = await RawPeer.open(broker.address), await RawPeer.open(broker.address)
        try:
            setup = [RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {
                "topic": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})
                for t in ("CT_C", "CT_2", "CT_P")]
            setup += [RemotingCommand.request(RC.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": g, "topic": t, "queueId": q, "commitOffset": 0})
                for g, t in (("CCG_TAGS", "CT_C"), ("CCG_TWO", "CT_2")) for q in range(4)]
            for cmd in setup:
                admin.write(encode(cmd))
                assert (await admin.answer(cmd.opaque)).code == 0
            hb = heartbeat(HOLD, "CCG_HOLD", "CT_C")
            hold.write(encode(hb))
            assert (await hold.answer(hb.opaque)).code == 0
            admin.write(java_send.encode())
            assert (await admin.answer(java_send.header_json["opaque"])).code == 0
            await asyncio.to_thread(broker.store.wait_dispatched)

            answers, pushed = [], []
            for f in admin_frames:
                admin.write(f.encode())
                if f.code == RC.GET_CONSUMER_RUNNING_INFO:
                    # The broker asks the consumer; the consumer's answer is mqadmin's.
                    asked = await hold.request()
                    while asked.code != RC.GET_CONSUMER_RUNNING_INFO:
                        pushed.append(asked)  # the 220 push of the reset came first
                        asked = await hold.request()
                    assert asked.field("clientId") == HOLD
                    info = {"properties": {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"},
                            "subscriptionSet": [], "mqTable": {}, "statusTable": {}}
                    hold.write(encode(asked.response(ResponseCode.SUCCESS,
                                                     body=orjson.dumps(info))))
                answer = await admin.answer(f.header_json["opaque"])
                answers.append((f, answer))
            resets = [r for r in pushed + hold.requests
                      if r.code == RC.RESET_CONSUMER_CLIENT_OFFSET]
        finally:
            await admin.close()
            await hold.close()
        return broker, answers, resets

    broker, answers, resets = run_async(main())
    for f, answer in answers:
        assert answer.code == ResponseCode.SUCCESS, (f.step, answer.code, answer.remark)
    by_code = {}
    for f, answer in answers:
        by_code.setdefault(f.code, []).append(answer)
    runtime = orjson.loads(by_code[28][0].body)["table"]
    for key in ("putTps", "getTransferedTps", "sendThreadPoolQueueSize",
                "pullThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills",
                "pullThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills",
                "earliestMessageTimeStamp", "commitLogDiskRatio"):
        assert key in runtime, key
    assert [float(x) for x in runtime["putTps"].split()]
    # As RocketMQ 4.9.8 writes them: the name of the version code, V4_9_8 for 409; rocketq's
    # own version under a key of its own.
    assert (runtime["brokerVersionDesc"], runtime["brokerVersion"]) == ("V4_9_8", "409")
    assert runtime["rocketqVersion"] == __version__
    assert b"flushConsumerOffsetInterval=6000" in by_code[26][0].body
    assert broker.config.flushConsumerOffsetInterval == 6000
    assert "CCG_ADMIN" in broker.subscription_groups.groups
    assert "CCG_ADMIN2" in broker.subscription_groups.groups
    for answer in by_code[222]:
        assert "offsetTable" in fastjson.loads(answer.body)
    assert len(resets) == 1 and resets[0].field("group") == "CCG_HOLD"
    assert orjson.loads(by_code[307][0].body)["properties"]["PROP_CONSUME_TYPE"]
    assert "offsetTable" in fastjson.loads(by_code[208][0].body)
    assert orjson.loads(by_code[203][0].body)["connectionSet"][0]["clientId"] == HOLD
    assert "offsetTable" in fastjson.loads(by_code[202][0].body)
    (found,) = decode_records(by_code[12][0].body)
    assert found.keys == ["KEY1", "KEY2"]


def test_consumer_progress_shows_the_consume_rate(cluster):
    """The captured ``consumerProgress -g CCG_HOLD`` (208) while CCG_HOLD takes one message
    a second: "Consume TPS: 1.00" (GROUP_GET_NUMS' minute for CT_C@CCG_HOLD), and the
    offsets its "Diff Total" adds up. Seconds are driven through the broker's windows, far
    ahead of its own sampler, so the rate is exact."""
    (progress,) = frames("mqadmin", RC.GET_CONSUME_STATS)
    assert progress.ext["consumerGroup"] == "CCG_HOLD" and "topic" not in progress.ext

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        admin, hold = await RawPeer.open(broker.address), await RawPeer.open(broker.address)
        items, start = broker.stats.items, time.monotonic() + 1e6
        try:
            setup = [RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {
                "topic": "CT_C", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})]
            setup += [send_v2("CT_C", b"m%d" % i) for i in range(20)]
            for cmd in setup:
                admin.write(encode(cmd))
                assert (await admin.answer(cmd.opaque)).code == 0
            hb = heartbeat(HOLD, "CCG_HOLD", "CT_C")
            hold.write(encode(hb))
            assert (await hold.answer(hb.opaque)).code == 0
            await asyncio.to_thread(broker.store.wait_dispatched)
            items.sample(start)
            for second in range(1, 11):  # one message a second, committed as it goes
                cmd = pull("CT_C", 0, second - 1, sysflag=0x1 | 0x2, group="CCG_HOLD",
                           commitOffset=second - 1, maxMsgNums=1)
                hold.write(encode(cmd))
                assert (await hold.answer(cmd.opaque)).code == 0
                items.sample(start + second)
            admin.write(progress.encode())
            return await admin.answer(progress.header_json["opaque"])
        finally:
            await admin.close()
            await hold.close()
            await cluster.stop()

    answer = run_async(main())
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    stats = fastjson.loads(answer.body)
    assert f"Consume TPS: {stats['consumeTps']:.2f}" == "Consume TPS: 1.00"
    table = {mq["queueId"]: w for mq, w in stats["offsetTable"].items}
    assert (table[0]["brokerOffset"], table[0]["consumerOffset"]) == (20, 9)
    assert sum(w["brokerOffset"] - w["consumerOffset"] for w in table.values()) == 11
