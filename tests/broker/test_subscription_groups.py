"""Subscription groups: mqadmin's updateSubGroup (200), the list (201) and delete (207), each
field checked before anything changes, and the table's settings honoured by pulls, retries and
the dead-letter queue."""

from __future__ import annotations

import asyncio
import os

import orjson
import pytest

from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand, encode
from rocketq.protocol.message import decode_offset_msg_id, decode_records
from rocketq.protocol.topic import SCHEDULE_TOPIC

from ..compat.java498_frames import frames
from ..conftest import run_async
from ..raw_peer import RawPeer
from .test_broker import pull, send_v2


def update_group(**fields) -> RemotingCommand:
    return RemotingCommand.request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                   body=orjson.dumps(fields))


async def ask(peer: RawPeer, cmd: RemotingCommand) -> RemotingCommand:
    peer.write(encode(cmd))
    return await peer.answer(cmd.opaque)


def table_file(broker) -> bytes:
    with open(broker.subscription_groups.path, "rb") as fh:
        return fh.read()


BAD = [
    ({"groupName": "G", "retryQueueNums": 65536}, "retryQueueNums"),
    ({"groupName": "G", "retryQueueNums": -1}, "retryQueueNums"),
    ({"groupName": "G", "retryQueueNums": 1.5}, "retryQueueNums"),
    ({"groupName": "G", "retryMaxTimes": 1 << 31}, "retryMaxTimes"),
    ({"groupName": "G", "retryMaxTimes": -2}, "retryMaxTimes"),
    ({"groupName": "G", "brokerId": -1}, "brokerId"),
    ({"groupName": "G", "brokerId": 1 << 63}, "brokerId"),
    ({"groupName": "G", "whichBrokerWhenConsumeSlowly": "1"}, "whichBrokerWhenConsumeSlowly"),
    ({"groupName": "G", "consumeEnable": "false"}, "consumeEnable"),
    ({"groupName": "G", "consumeBroadcastEnable": 0}, "consumeBroadcastEnable"),
    ({"groupName": "G", "notifyConsumerIdsChangedEnable": None},
     "notifyConsumerIdsChangedEnable"),
    ({"groupName": "bad group!"}, "groupName"),
    ({"groupName": "G\n"}, "groupName"),
    ({"groupName": ""}, "groupName"),
    ({"groupName": "g" * 256}, "groupName"),
    ({"retryMaxTimes": 3}, "groupName"),
]


def test_update_list_delete_and_bad_fields(cluster):
    captured = frames("mqadmin", RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            for f in captured:  # mqadmin's own bytes
                peer.write(f.encode())
                answer = await peer.answer(f.header_json["opaque"])
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            listed = orjson.loads((await ask(peer, RemotingCommand.request(
                RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))).body)
            table = listed["subscriptionGroupTable"]
            # mqadmin 4.9's config, and RocketMQ 5's FIFO flag (consumeMessageOrderly).
            assert table["CCG_ADMIN2"] == {**orjson.loads(captured[1].body),
                                           "consumeMessageOrderly": False}
            assert table["TOOLS_CONSUMER"]["retryMaxTimes"] == 16  # a system group
            assert listed["dataVersion"]["counter"] >= 2

            before_file, before = table_file(broker), dict(broker.subscription_groups.groups)
            for fields, name in BAD:
                answer = await ask(peer, update_group(**fields))
                assert answer.code == ResponseCode.INVALID_PARAMETER, fields
                assert name in answer.remark, (fields, answer.remark)
            for body in (b'{"groupName":"G","retryQueueNums":99999999999999999999}',
                         b'{"groupName":"G","brokerId":-99999999999999999999}'):
                answer = await ask(peer, RemotingCommand.request(
                    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
                assert answer.code == ResponseCode.INVALID_PARAMETER
                assert body.split(b'"')[5].decode() in answer.remark, answer.remark
            for body in (b"not json", b"[1, 2]", b""):
                answer = await ask(peer, RemotingCommand.request(
                    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
                assert answer.code == ResponseCode.INVALID_PARAMETER, body
            assert table_file(broker) == before_file
            assert broker.subscription_groups.groups == before

            # A valid change afterwards is saved and survives a restart.
            answer = await ask(peer, update_group(groupName="G", retryMaxTimes=3,
                                                  consumeEnable=False, retryQueueNums=2))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            saved = orjson.loads(table_file(broker))["subscriptionGroupTable"]["G"]
            assert (saved["retryMaxTimes"], saved["consumeEnable"]) == (3, False)
            answer = await ask(peer, RemotingCommand.request(
                RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "CCG_ADMIN"}))
            assert answer.code == ResponseCode.SUCCESS
        finally:
            await peer.close()
        await broker.stop()
        cluster.brokers.remove(broker)
        again = await cluster.start_broker()
        return again.subscription_groups.groups

    groups = run_async(main())
    assert groups["G"].retry_max_times == 3 and groups["G"].consume_enable is False
    assert groups["G"].retry_queue_nums == 2
    assert "CCG_ADMIN" not in groups and "CCG_ADMIN2" in groups


def test_a_change_that_cannot_be_saved_changes_nothing(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            os.mkdir(broker.subscription_groups.path + ".tmp")  # the save's rename fails
            before = dict(broker.subscription_groups.groups)
            answer = await ask(peer, update_group(groupName="Unsaved"))
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "nothing changed" in answer.remark
            assert broker.subscription_groups.groups == before
            os.rmdir(broker.subscription_groups.path + ".tmp")
            assert (await ask(peer, update_group(groupName="Saved"))).code == 0
            assert "Saved" in orjson.loads(table_file(broker))["subscriptionGroupTable"]
        finally:
            await peer.close()

    run_async(main())


def test_consume_enable_and_auto_creation(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker(autoCreateSubscriptionGroup="false")
        peer = await RawPeer.open(broker.address)
        try:
            assert (await ask(peer, send_v2("Pulled", b"m"))).code == 0
            await asyncio.to_thread(broker.store.wait_dispatched)
            queue = next(q for q in range(4) if broker.store.get_max_offset("Pulled", q))
            answer = await ask(peer, pull("Pulled", queue, 0, group="Unknown"))
            assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, answer.remark
            assert "Unknown" not in broker.subscription_groups.groups
            # A CID_RMQ_SYS_ group is created all the same (MixAll.isSysConsumerGroup).
            answer = await ask(peer, pull("Pulled", queue, 0, group="CID_RMQ_SYS_Probe"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert "CID_RMQ_SYS_Probe" in orjson.loads(table_file(broker))[
                "subscriptionGroupTable"]
            assert (await ask(peer, update_group(groupName="Unknown"))).code == 0
            assert (await ask(peer, pull("Pulled", queue, 0, group="Unknown"))).code == 0
            assert (await ask(peer, update_group(groupName="Unknown",
                                                 consumeEnable=False))).code == 0
            answer = await ask(peer, pull("Pulled", queue, 0, group="Unknown"))
            assert answer.code == ResponseCode.NO_PERMISSION
            assert answer.remark == "subscription group no permission, Unknown"
        finally:
            await peer.close()

    run_async(main())


def heartbeat(group: str, model: str = "CLUSTERING", client_id: str = "") -> RemotingCommand:
    return RemotingCommand.request(RC.HEART_BEAT, body=orjson.dumps({
        "clientID": client_id or f"192.0.2.7@{group}", "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": model,
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": "Pulled", "subString": "*", "subVersion": 1}]}]}))


def test_broadcast_enable_and_retry_queue_nums(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            assert (await ask(peer, send_v2("Pulled", b"m"))).code == 0
            for fields in ({"groupName": "Wide", "retryQueueNums": 3},
                           {"groupName": "NoRetry", "retryQueueNums": 0},
                           {"groupName": "Bcast", "consumeBroadcastEnable": False}):
                assert (await ask(peer, update_group(**fields))).code == 0
            for group, model in (("Wide", "CLUSTERING"), ("NoRetry", "CLUSTERING"),
                                 ("Bcast", "BROADCASTING")):
                assert (await ask(peer, heartbeat(group, model))).code == 0
            assert broker.topics.get("%RETRY%Wide").write_queue_nums == 3
            assert broker.topics.get("%RETRY%NoRetry") is None
            assert broker.topics.get("%RETRY%Bcast").write_queue_nums == 1
            answer = await ask(peer, pull("Pulled", 0, 0, sysflag=0, group="Bcast"))
            assert answer.code == ResponseCode.NO_PERMISSION
            assert "broadcast" in answer.remark
            # A pull that carries its own subscription is not checked, as in RocketMQ.
            answer = await ask(peer, pull("Pulled", 0, 0, group="Bcast"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        finally:
            await peer.close()

    run_async(main())


@pytest.mark.parametrize(("retry_max_times", "requested", "expected"), [
    (1, None, ["%RETRY%Fails", "%DLQ%Fails"]),
    (None, None, ["%RETRY%Fails", "%RETRY%Fails"]),
    # The broker takes retryMaxTimes as it is: 0 and -1 both mean "no retry".
    (0, None, ["%DLQ%Fails", "%DLQ%Fails"]),
    (-1, None, ["%DLQ%Fails", "%DLQ%Fails"]),
    # A send-back that carries maxReconsumeTimes overrides the group's value.
    (1, 5, ["%RETRY%Fails", "%RETRY%Fails"]),
    (None, 1, ["%RETRY%Fails", "%DLQ%Fails"]),
])
def test_retry_max_times_sends_to_the_dlq(cluster, retry_max_times, requested, expected):
    """Two send-backs of one message: where each goes depends on the group's retryMaxTimes,
    unless the request says maxReconsumeTimes."""

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker(messageDelayLevel="100ms 100ms 100ms 100ms 100ms")
        peer = await RawPeer.open(broker.address)
        try:
            fields = {"groupName": "Fails"}
            if retry_max_times is not None:
                fields["retryMaxTimes"] = retry_max_times
            assert (await ask(peer, update_group(**fields))).code == 0
            answer = await ask(peer, send_v2("Pulled", b"bad"))
            assert answer.code == 0
            offset = decode_offset_msg_id(answer.ext_fields["msgId"])[2]
            topics = []
            for _ in range(2):
                end = broker.store.commitlog.max_offset
                header = {"offset": offset, "group": "Fails", "delayLevel": 0,
                          "originTopic": "Pulled"}
                if requested is not None:
                    header["maxReconsumeTimes"] = requested
                back = RemotingCommand.request(RC.CONSUMER_SEND_MSG_BACK, header)
                assert (await ask(peer, back)).code == 0
                (stored,) = decode_records(broker.store.record_bytes(end))
                topics.append(stored.properties["REAL_TOPIC"] if stored.topic == SCHEDULE_TOPIC
                              else stored.topic)
                offset = end
            return topics
        finally:
            await peer.close()

    assert run_async(main()) == expected


@pytest.mark.parametrize(("retry_max_times", "expected"), [(1, "%DLQ%Direct"),
                                                          (2, "%RETRY%Direct")])
def test_retry_max_times_in_a_send_to_the_retry_topic(cluster, retry_max_times, expected):
    """A message sent straight to a group's retry topic, with reconsumeTimes 1 and no
    maxReconsumeTimes, goes to the DLQ once the group's retryMaxTimes is reached."""

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            answer = await ask(peer, update_group(groupName="Direct",
                                                  retryMaxTimes=retry_max_times))
            assert answer.code == 0
            assert (await ask(peer, heartbeat("Direct"))).code == 0  # makes %RETRY%Direct
            end = broker.store.commitlog.max_offset
            answer = await ask(peer, send_v2("%RETRY%Direct", b"again", j=1))
            assert answer.code == 0, answer.remark
            (stored,) = decode_records(broker.store.record_bytes(end))
            return stored.topic
        finally:
            await peer.close()

    assert run_async(main()) == expected


@pytest.mark.parametrize("notify", [True, False])
def test_notify_consumer_ids_changed_enable(cluster, notify):
    """Members of a group hear of a member that joins or unregisters only when the group's
    notifyConsumerIdsChangedEnable is true."""

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        first, second = await RawPeer.open(broker.address), await RawPeer.open(broker.address)
        try:
            answer = await ask(first, update_group(groupName="Members",
                                                   notifyConsumerIdsChangedEnable=notify))
            assert answer.code == 0
            assert (await ask(first, heartbeat("Members", client_id="c1"))).code == 0
            assert (await ask(second, heartbeat("Members", client_id="c2"))).code == 0
            leave = RemotingCommand.request(RC.UNREGISTER_CLIENT, {
                "clientID": "c2", "consumerGroup": "Members"})
            assert (await ask(second, leave)).code == 0
            # Anything the broker sent first has arrived before this answer.
            await ask(first, RemotingCommand.request(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
            return [cmd.ext_fields["consumerGroup"] for cmd in first.requests
                    if cmd.code == RC.NOTIFY_CONSUMER_IDS_CHANGED]
        finally:
            await first.close()
            await second.close()

    told = run_async(main())
    # c1 hears of itself, of c2 joining, and of c2 leaving.
    assert told == (["Members"] * 3 if notify else [])


def test_delete_with_remove_offset(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            assert (await ask(peer, update_group(groupName="Gone"))).code == 0
            commit = RemotingCommand.request(RC.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "Gone", "topic": "T", "queueId": 0, "commitOffset": 5})
            assert (await ask(peer, commit)).code == 0
            assert broker.offsets.query("Gone", "T", 0) == 5
            answer = await ask(peer, RemotingCommand.request(
                RC.DELETE_SUBSCRIPTIONGROUP, {"groupName": "Gone", "removeOffset": "true"}))
            assert answer.code == 0
            assert "Gone" not in broker.subscription_groups.groups
            assert broker.offsets.query("Gone", "T", 0) is None
            assert "Gone" not in orjson.loads(table_file(broker))["subscriptionGroupTable"]
        finally:
            await peer.close()

    run_async(main())
