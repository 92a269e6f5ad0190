"""The broker's admin calls that involve a group's consumers, driven by the frames mqadmin
4.9.8 sent: resetOffsetByTime (222, and the 220 pushed to members) and consumerProgress -s
(307, forwarded to the member named by clientId)."""

from __future__ import annotations

import asyncio
import json
import time

import orjson

from rocketq.protocol import fastjson
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand
from rocketq.protocol.message import decode_record
from rocketq.remoting import RemotingClient

from ..compat.java498_frames import Frame, frames
from ..conftest import run_async
from ..raw_peer import RawPeer
from .test_broker import dispatched, send_v2


def rewritten(frame: Frame, **ext: str) -> bytes:
    """The captured frame's bytes with some extFields replaced."""
    header = frame.header_json
    header["extFields"].update(ext)
    return Frame(frame.step, frame.peer, json.dumps(header, separators=(",", ":")).encode(),
                 frame.body).encode()


def reset_frame(**ext: str) -> tuple[int, bytes]:
    """mqadmin's resetOffsetByTime -s 1795410000000 frame (CCG_TWO, CT_2), rewritten."""
    frame = frames("mqadmin", RC.INVOKE_BROKER_TO_RESET_OFFSET)[-1]
    assert frame.ext == {"topic": "CT_2", "isForce": "true", "group": "CCG_TWO",
                         "timestamp": "1795410000000"} and frame.body == b""
    return frame.header_json["opaque"], rewritten(frame, **ext)


def offsets_of(body: bytes) -> dict[int, int]:
    """queue id -> offset of a ResetOffsetBody (fastjson, MessageQueue objects as keys)."""
    table = fastjson.loads(body)["offsetTable"]
    assert isinstance(table, fastjson.ObjectKeyMap)
    return {mq["queueId"]: offset for mq, offset in table.items}


async def admin_call(addr: str, opaque: int, data: bytes) -> RemotingCommand:
    peer = await RawPeer.open(addr)
    try:
        peer.write(data)
        return await peer.answer(opaque)
    finally:
        await peer.close()


async def create_topic(c: RemotingClient, addr: str, topic: str, queues: int) -> None:
    r = await c.invoke(addr, RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6}))
    assert r.code == 0, r.remark


async def committed(c: RemotingClient, addr: str, group: str, topic: str, qid: int) -> int:
    r = await c.invoke(addr, RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": topic, "queueId": qid}))
    assert r.code == 0, r.remark
    return int(r.ext_fields["offset"])


async def commit(c: RemotingClient, addr: str, group: str, topic: str, qid: int,
                 offset: int) -> None:
    r = await c.invoke(addr, RemotingCommand.request(RC.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": topic, "queueId": qid, "commitOffset": offset}))
    assert r.code == 0


def heartbeat(group: str, topic: str, client_id: str, language: str = "JAVA"
              ) -> RemotingCommand:
    body = orjson.dumps({"clientID": client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "expressionType": "TAG",
                                 "subVersion": 1, "tagsSet": [], "codeSet": [],
                                 "classFilterMode": False}]}]})
    return RemotingCommand(RC.HEART_BEAT, None, body, language=language, version=409)


class Member:
    """A raw consumer connection: sends heartbeats, records the requests the broker makes of
    it and answers them with ``answer`` (or never, when ``answer`` is None)."""

    def __init__(self, answer=None) -> None:
        self.requests: list[RemotingCommand] = []
        self.arrived = asyncio.Event()
        self.answer = answer
        self.client = RemotingClient(self.handle)

    def handle(self, conn, cmd):
        self.requests.append(cmd)
        self.arrived.set()
        if cmd.code == RC.NOTIFY_CONSUMER_IDS_CHANGED:
            return None
        if self.answer is None:
            return asyncio.get_running_loop().create_future()  # never answered
        return self.answer(cmd)

    def calls(self, code: int) -> list[RemotingCommand]:
        return [cmd for cmd in self.requests if cmd.code == code]

    async def request(self, code: int, timeout: float = 5) -> RemotingCommand:
        """The first request with ``code`` the broker sent, waiting for it if need be."""
        async with asyncio.timeout(timeout):
            while not self.calls(code):
                self.arrived.clear()
                await self.arrived.wait()
        return self.calls(code)[0]


def test_reset_offline_group_commits_and_persists(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        addr = broker.address
        c = RemotingClient()
        try:
            await create_topic(c, addr, "CT_2", 2)
            for i in range(3):
                assert (await c.invoke(addr, send_v2("CT_2", b"early%d" % i, 0))).code == 0
            assert (await c.invoke(addr, send_v2("CT_2", b"early-q1", 1))).code == 0
            await dispatched(broker)
            await asyncio.sleep(0.02)
            middle = int(time.time() * 1000)
            await asyncio.sleep(0.02)
            for i in range(2):
                assert (await c.invoke(addr, send_v2("CT_2", b"late%d" % i, 0))).code == 0
            assert (await c.invoke(addr, send_v2("CT_2", b"late-q1", 1))).code == 0
            await dispatched(broker)
            # The group consumed everything and went away.
            await commit(c, addr, "CCG_TWO", "CT_2", 0, 5)
            await commit(c, addr, "CCG_TWO", "CT_2", 1, 2)

            opaque, data = reset_frame(timestamp=str(middle))
            r = await admin_call(addr, opaque, data)
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert offsets_of(r.body) == {0: 3, 1: 1}
            assert [await committed(c, addr, "CCG_TWO", "CT_2", q) for q in (0, 1)] == [3, 1]
            with open(broker.offsets.path, "rb") as fh:
                saved = orjson.loads(fh.read())
            assert saved["offsetTable"]["CT_2@CCG_TWO"] == {"0": 3, "1": 1}

            # Not forced: "now" (the queues' ends) is later than the committed offsets.
            opaque, data = reset_frame(timestamp="-1", isForce="false")
            r = await admin_call(addr, opaque, data)
            assert r.code == 0 and offsets_of(r.body) == {0: 3, 1: 1}
            # Forced: to the ends.
            opaque, data = reset_frame(timestamp="-1")
            r = await admin_call(addr, opaque, data)
            assert r.code == 0 and offsets_of(r.body) == {0: 5, 1: 2}
            # Not forced, earlier: moving back is allowed.
            opaque, data = reset_frame(timestamp="0", isForce="false")
            r = await admin_call(addr, opaque, data)
            assert r.code == 0 and offsets_of(r.body) == {0: 0, 1: 0}
            assert [await committed(c, addr, "CCG_TWO", "CT_2", q) for q in (0, 1)] == [0, 0]
        finally:
            await c.close()
            await cluster.stop()
    run_async(main())


def test_reset_refusals_name_what_is_wrong(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        addr = broker.address
        c = RemotingClient()
        try:
            await create_topic(c, addr, "CT_2", 2)
            r = await admin_call(addr, *reset_frame(topic="NoSuchTopic"))
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert "no topic in this broker" in r.remark and "NoSuchTopic" in r.remark
            # No offsets in the topic and nobody online: a mistyped group is not invented.
            r = await admin_call(addr, *reset_frame())
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert "CCG_TWO" in r.remark and "not exist" in r.remark
            assert broker.offsets.table("CCG_TWO", "CT_2") == {}
            for ext, field in (({"timestamp": "soon"}, "timestamp"),
                               ({"timestamp": "99999999999999999999"}, "timestamp"),
                               ({"timestamp": "1e3"}, "timestamp"),
                               ({"isForce": "maybe"}, "isForce"),
                               ({"group": ""}, "group"),
                               ({"topic": ""}, "topic")):
                r = await admin_call(addr, *reset_frame(**ext))
                assert r.code == ResponseCode.INVALID_PARAMETER, ext
                assert repr(field) in r.remark, (ext, r.remark)
        finally:
            await c.close()
            await cluster.stop()
    run_async(main())


def test_reset_online_group_pushes_220_to_every_member(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        addr = broker.address
        c = RemotingClient()
        java, cpp = Member(), Member()
        try:
            await create_topic(c, addr, "CT_C", 2)
            for i in range(4):
                assert (await c.invoke(addr, send_v2("CT_C", b"m%d" % i, i % 2))).code == 0
            await dispatched(broker)
            await java.client.invoke(addr, heartbeat("CCG_HOLD", "CT_C", "192.0.2.2@hold"))
            await cpp.client.invoke(addr, heartbeat("CCG_HOLD", "CT_C", "192.0.2.3@cpp",
                                                    language="CPP"))
            await commit(c, addr, "CCG_HOLD", "CT_C", 0, 0)

            frame = frames("mqadmin", RC.INVOKE_BROKER_TO_RESET_OFFSET)[0]
            assert frame.ext["group"] == "CCG_HOLD" and frame.ext["timestamp"] == "-1"
            r = await admin_call(addr, frame.header_json["opaque"], frame.encode())
            assert r.code == 0, r.remark
            assert offsets_of(r.body) == {0: 2, 1: 2}  # queue 1 had no offset: it takes one
            assert [await committed(c, addr, "CCG_HOLD", "CT_C", q) for q in (0, 1)] == [2, 2]

            push = await java.request(RC.RESET_CONSUMER_CLIENT_OFFSET)
            assert push.is_oneway
            assert push.ext_fields == {"topic": "CT_C", "group": "CCG_HOLD",
                                       "timestamp": "-1", "isForce": "true"}
            table = fastjson.loads(push.body)["offsetTable"]
            assert sorted((mq["brokerName"], mq["topic"], mq["queueId"], offset)
                          for mq, offset in table.items) == [
                ("broker-a", "CT_C", 0, 2), ("broker-a", "CT_C", 1, 2)]

            # The C++ client reads ResetOffsetBodyForC: a list with the offset inside.
            push = await cpp.request(RC.RESET_CONSUMER_CLIENT_OFFSET)
            assert push.is_oneway
            assert orjson.loads(push.body) == {"offsetTable": [
                {"brokerName": "broker-a", "offset": 2, "queueId": 0, "topic": "CT_C"},
                {"brokerName": "broker-a", "offset": 2, "queueId": 1, "topic": "CT_C"}]}
        finally:
            for client in (c, java.client, cpp.client):
                await client.close()
            await cluster.stop()
    run_async(main())


def running_info_frame(**ext: str) -> tuple[int, bytes]:
    frame = frames("mqadmin", RC.GET_CONSUMER_RUNNING_INFO)[0]
    assert frame.ext["clientId"] == "192.0.2.2@hold" and frame.ext["jstackEnable"] == "false"
    return frame.header_json["opaque"], rewritten(frame, **ext)


def test_running_info_is_forwarded_to_the_named_member(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        addr = broker.address
        c = RemotingClient()

        def answer(cmd):
            return cmd.response(ResponseCode.SUCCESS, {"seen": cmd.ext_fields["clientId"]},
                                b'{"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"}}',
                                remark="from the member")

        member, other, silent = Member(answer), Member(answer), Member()
        try:
            await create_topic(c, addr, "CT_C", 1)
            await member.client.invoke(addr, heartbeat("CCG_HOLD", "CT_C", "192.0.2.2@hold"))
            await other.client.invoke(addr, heartbeat("CCG_HOLD", "CT_C", "192.0.2.9@other"))
            await silent.client.invoke(addr, heartbeat("CCG_HOLD", "CT_C", "192.0.2.4@quiet"))

            r = await admin_call(addr, *running_info_frame())
            assert r.code == ResponseCode.SUCCESS and r.remark == "from the member"
            assert r.body == b'{"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"}}'
            assert r.ext_fields["seen"] == "192.0.2.2@hold"
            forwarded = member.calls(RC.GET_CONSUMER_RUNNING_INFO)[0]
            assert not forwarded.is_oneway
            assert forwarded.ext_fields["consumerGroup"] == "CCG_HOLD"
            assert forwarded.ext_fields["jstackEnable"] == "false"
            assert not other.calls(RC.GET_CONSUMER_RUNNING_INFO)  # only the one named

            r = await admin_call(addr, *running_info_frame(clientId="192.0.2.7@gone"))
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert r.remark == "The Consumer <CCG_HOLD> <192.0.2.7@gone> not online"

            # A member that never answers: the broker gives up after its timeout, and serves
            # other requests meanwhile.
            calls = broker._handlers[RC.GET_CONSUMER_RUNNING_INFO].__self__
            calls.call_timeout = 1.0
            waiting = asyncio.ensure_future(
                admin_call(addr, *running_info_frame(clientId="192.0.2.4@quiet")))
            await silent.request(RC.GET_CONSUMER_RUNNING_INFO)
            begin = time.monotonic()
            r = await c.invoke(addr, RemotingCommand.request(
                RC.GET_MAX_OFFSET, {"topic": "CT_C", "queueId": 0}))
            assert r.code == 0 and time.monotonic() - begin < 0.5
            assert not waiting.done()
            r = await waiting
            assert r.code == ResponseCode.CONSUME_MSG_TIMEOUT
            assert "192.0.2.4@quiet" in r.remark and "Timeout" in r.remark
        finally:
            for client in (c, member.client, other.client, silent.client):
                await client.close()
            await cluster.stop()
    run_async(main())


def test_consume_message_directly_carries_the_stored_message(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        addr = broker.address
        c = RemotingClient()
        member = Member(lambda cmd: cmd.response(ResponseCode.SUCCESS, body=b'{"order":false}'))
        try:
            await create_topic(c, addr, "CT_C", 1)
            sent = await c.invoke(addr, send_v2("CT_C", b"direct", 0))
            await member.client.invoke(addr, heartbeat("CCG_HOLD", "CT_C", "192.0.2.2@hold"))
            ext = {"consumerGroup": "CCG_HOLD", "clientId": "192.0.2.2@hold",
                   "msgId": sent.ext_fields["msgId"]}
            r = await c.invoke(addr, RemotingCommand.request(RC.CONSUME_MESSAGE_DIRECTLY, ext))
            assert r.code == 0 and r.body == b'{"order":false}'
            forwarded = member.calls(RC.CONSUME_MESSAGE_DIRECTLY)[0]
            assert forwarded.ext_fields == {**ext, "brokerName": "broker-a"}
            record = decode_record(forwarded.body)
            assert record.body == b"direct" and record.offset_msg_id == ext["msgId"]

            r = await c.invoke(addr, RemotingCommand.request(
                RC.CONSUME_MESSAGE_DIRECTLY, {**ext, "msgId": "not-an-id"}))
            assert r.code == ResponseCode.INVALID_PARAMETER and "msgId" in r.remark
        finally:
            await c.close()
            await member.client.close()
            await cluster.stop()
    run_async(main())
