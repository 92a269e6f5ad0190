"""The frames a Java 4.9.8 client sent, replayed byte for byte against a broker.

Java 4.9.1 to 4.9.8 end a message's property string without the ``\\x02`` separator; the C++
client and Java 5.x end it with one. Whatever the shape, every path that adds properties
(single, batch, half and commit, delay, timer, send-back, reply, DLQ) must keep each property
intact and add ``CLUSTER`` as a property of its own.
"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand, encode
from rocketq.protocol.message import (
    decode_offset_msg_id,
    decode_properties,
    decode_records,
    record_layout,
    split_batch,
)
from rocketq.protocol.topic import SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, dlq_topic

from ..conftest import run_async
from ..raw_peer import RawPeer
from .cpp_frames import FRAMES as CPP_FRAMES
from .java498_frames import Frame, frames

CLUSTER = b"CLUSTER\x01DefaultCluster\x02"


def opaque_of(frame: Frame) -> int:
    return frame.header_json["opaque"]


def rewritten(frame: Frame, **ext: str) -> bytes:
    """The frame with some extFields changed (offsets that only the live broker knows)."""
    header = frame.header_json
    header["extFields"] = {**header.get("extFields", {}), **ext}
    raw = orjson.dumps(header)
    return Frame(frame.step, frame.peer, raw, frame.body).encode()


def stored_properties(broker, offset_msg_id: str) -> bytes:
    """The property bytes of the record a send answer points to, as the CommitLog holds them."""
    _, _, offset = decode_offset_msg_id(offset_msg_id)
    data = broker.store.record_bytes(offset)
    assert data is not None
    fields, _, _, props_at = record_layout(memoryview(data))
    return bytes(data[props_at:fields[0]])


def assert_sound(raw: bytes) -> dict[str, str]:
    """No property lost a separator: no empty segment, no value holding a name."""
    assert raw.endswith(b"\x02") and b"\x02\x02" not in raw, raw
    props = decode_properties(raw)
    assert all("\x01" not in v for v in props.values()), props
    assert raw.count(b"CLUSTER\x01") == 1, raw
    assert props["CLUSTER"] == "DefaultCluster"
    return props


async def pull_all(peer: RawPeer, topic: str, queues: int, group: str = "cg") -> list:
    records = []
    for queue_id in range(queues):
        cmd = RemotingCommand.request(RC.PULL_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": 0,
            "maxMsgNums": 32, "sysFlag": 0x4, "commitOffset": 0, "suspendTimeoutMillis": 0,
            "subscription": "*", "subVersion": 0})
        peer.write(encode(cmd))
        answer = await peer.answer(cmd.opaque)
        if answer.code == ResponseCode.SUCCESS:
            records.append(answer.body)
    return records


async def java_broker(cluster, **conf):
    await cluster.start_namesrv()
    broker = await cluster.start_broker(**conf)
    return broker, await RawPeer.open(broker.address)


def test_java_sends_keep_every_property(cluster):
    """Single, oneway, selector, compressed and batch sends of the Java client, read back by
    pull and as Spark columns: every property as sent, TAGS exact, CLUSTER present."""
    from rocketq.spark.columns import RecordColumns

    sends = [f for f in frames("producer") if f.code in (RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE)
             and "DELAY" not in f.ext["i"]]
    assert len(sends) == 6 and not any(f.ext["i"].endswith("\x02") for f in sends)

    async def main():
        broker, peer = await java_broker(cluster)
        try:
            peer.write(*(f.encode() for f in sends))
            for f in sends:
                if f.header_json["flag"] & 2:  # oneway: no answer
                    continue
                answer = await peer.answer(opaque_of(f))
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            await asyncio.to_thread(broker.store.wait_dispatched)
            bodies = await pull_all(peer, "CT_P", 4)
        finally:
            await peer.close()
        return bodies

    bodies = run_async(main())
    records = {r.properties["UNIQ_KEY"]: r for body in bodies for r in decode_records(body)}
    expected: dict[str, dict[str, str]] = {}
    raw_sent: list[bytes] = []
    for f in sends:
        if f.code == RC.SEND_BATCH_MESSAGE:
            for _, _, _, props_at, props_len in split_batch(f.body):
                raw = f.body[props_at:props_at + props_len]
                raw_sent.append(raw)
                props = decode_properties(raw)
                expected[props["UNIQ_KEY"]] = props
        else:
            raw_sent.append(f.ext["i"].encode())
            props = decode_properties(f.ext["i"])
            expected[props["UNIQ_KEY"]] = props
    assert set(records) == set(expected) and len(expected) == 8
    for uniq, props in expected.items():
        assert records[uniq].properties == {**props, "CLUSTER": "DefaultCluster"}
        assert records[uniq].tags == props.get("TAGS")
    stored = b"".join(bodies)
    for raw in raw_sent:  # the separator is added before CLUSTER, once
        assert raw + b"\x02" + CLUSTER in stored
    assert records[next(u for u, p in expected.items() if p.get("TAGS") == "TagA")].keys == [
        "KEY1", "KEY2"]

    columns = RecordColumns("CT_P", "broker-a")
    for body in bodies:
        columns.add(body)
    table = columns.batch().to_pydict()
    by_uniq = {dict(p)["UNIQ_KEY"]: (t, dict(p)) for t, p in zip(table["tags"],
                                                                 table["properties"],
                                                                 strict=True)}
    for uniq, props in expected.items():
        tags, column_props = by_uniq[uniq]
        assert tags == props.get("TAGS")
        assert column_props == {**props, "CLUSTER": "DefaultCluster"}


def test_java_request_gets_its_reply(cluster):
    """A Java request (CORRELATION_ID last, no final separator) reaches the replier with
    CORRELATION_ID and CLUSTER intact, and the Java replier's reply reaches the requester."""
    rr = frames("request-reply")
    requester_hb = next(f for f in rr if f.code == RC.HEART_BEAT
                        and b"192.0.2.2@requester" in f.body)
    request = next(f for f in rr if f.code == RC.SEND_MESSAGE_V2)
    reply = next(f for f in rr if f.code == RC.SEND_REPLY_MESSAGE_V2)
    correlation = decode_properties(request.ext["i"])["CORRELATION_ID"]

    async def main():
        broker, requester = await java_broker(cluster)
        replier = await RawPeer.open(broker.address)
        try:
            requester.write(requester_hb.encode(), request.encode())
            assert (await requester.answer(opaque_of(requester_hb))).code == 0
            sent = await requester.answer(opaque_of(request))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            await asyncio.to_thread(broker.store.wait_dispatched)
            (body,) = await pull_all(replier, "CT_R", 4)
            (got,) = decode_records(body)
            # What MessageUtil.createReplyMessage reads: without CLUSTER it throws.
            assert got.properties["CORRELATION_ID"] == correlation
            assert got.properties["CLUSTER"] == "DefaultCluster"
            assert got.properties["REPLY_TO_CLIENT"] == "192.0.2.2@requester"

            replier.write(reply.encode())
            push = await requester.request()
            assert push.code == RC.PUSH_REPLY_MESSAGE_TO_CLIENT
            props = decode_properties(push.field("properties") or "")
            assert props["CORRELATION_ID"] == correlation
            assert props["CLUSTER"] == "DefaultCluster"
            assert push.body == b"reply to question 1"
            requester.write(encode(push.response(ResponseCode.SUCCESS)))
            answer = await replier.answer(opaque_of(reply))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        finally:
            await requester.close()
            await replier.close()

    run_async(main())


def test_java_half_commit_delay_timer_sendback_and_dlq(cluster):
    """The paths that rewrite properties keep a Java property string whole."""
    tx = frames("transaction")
    half, commit = tx[1], tx[2]
    assert half.code == RC.SEND_MESSAGE_V2 and commit.ext["commitOrRollback"] == "8"
    delayed = next(f for f in frames("producer") if "DELAY" in f.ext.get("i", ""))
    plain = frames("producer", RC.SEND_MESSAGE_V2)[0]
    sent_half = decode_properties(half.ext["i"])
    sent_delayed = decode_properties(delayed.ext["i"])
    sent_plain = decode_properties(plain.ext["i"])

    async def main():
        broker, peer = await java_broker(cluster, messageDelayLevel="100ms 200ms 300ms")
        try:
            # Half message, then its commit (offsets are the live broker's).
            peer.write(half.encode())
            answer = await peer.answer(opaque_of(half))
            assert answer.code == 0, answer.remark
            raw = stored_properties(broker, answer.ext_fields["msgId"])
            stored = assert_sound(raw)
            assert broker.store.look_message_by_offset(
                decode_offset_msg_id(answer.ext_fields["msgId"])[2]).topic == TRANS_HALF_TOPIC
            assert all(stored[k] == v for k, v in sent_half.items())
            _, _, offset = decode_offset_msg_id(answer.ext_fields["msgId"])
            assert commit.header_json["flag"] & 2  # Java ends a transaction oneway
            peer.write(rewritten(commit, commitLogOffset=str(offset),
                                 tranStateTableOffset=answer.ext_fields["queueOffset"]))

            # Delay level 2 (200 ms here), then delivered to its topic.
            peer.write(delayed.encode())
            answer = await peer.answer(opaque_of(delayed))
            assert answer.code == 0, answer.remark
            in_schedule = assert_sound(stored_properties(broker, answer.ext_fields["msgId"]))
            assert in_schedule["REAL_TOPIC"] == "CT_P" and in_schedule["TAGS"] == "TagD"

            # A timer message in the Java 4.9 shape (no final separator).
            timed = plain.ext["i"].replace("TAGS\x01TagA", "TAGS\x01TagT") + (
                "\x02TIMER_DELAY_MS\x01300")
            timer_frame = rewritten(plain, i=timed)
            peer.write(timer_frame)
            answer = await peer.answer(opaque_of(plain))
            assert answer.code == 0, answer.remark
            in_timer = assert_sound(stored_properties(broker, answer.ext_fields["msgId"]))
            assert in_timer["TIMER_DELAY_MS"] == "300" and in_timer["TAGS"] == "TagT"
            assert broker.store.look_message_by_offset(decode_offset_msg_id(
                answer.ext_fields["msgId"])[2]).topic == TIMER_TOPIC

            # Straight to a retry topic, retried too often: the DLQ.
            heartbeat = RemotingCommand.request(RC.HEART_BEAT, body=orjson.dumps({
                "clientID": "192.0.2.9@dlq", "producerDataSet": [], "consumerDataSet": [{
                    "groupName": "CG_J", "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": [{"topic": "CT_P", "subString": "*",
                                             "subVersion": 1}]}]}))
            peer.write(encode(heartbeat))
            assert (await peer.answer(heartbeat.opaque)).code == 0
            peer.write(rewritten(plain, b="%RETRY%CG_J", e="0", j="16", l="16"))
            answer = await peer.answer(opaque_of(plain))
            assert answer.code == 0, answer.remark
            _, _, dlq_offset = decode_offset_msg_id(answer.ext_fields["msgId"])
            assert broker.store.look_message_by_offset(dlq_offset).topic == dlq_topic("CG_J")
            in_dlq = assert_sound(stored_properties(broker, answer.ext_fields["msgId"]))
            assert all(in_dlq[k] == v for k, v in sent_plain.items())

            # Everything due is delivered; then a consumer sends the plain one back.
            peer.write(plain.encode())
            answer = await peer.answer(opaque_of(plain))
            assert answer.code == 0
            _, _, plain_offset = decode_offset_msg_id(answer.ext_fields["msgId"])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                await asyncio.to_thread(broker.store.wait_dispatched)
                got = [r for topic in ("CT_P", "CT_T") for body in await pull_all(peer, topic, 4)
                       for r in decode_records(body)]
                tags = sorted(r.tags for r in got)
                if tags == ["TagA", "TagCommit", "TagD", "TagT"]:
                    break
                await asyncio.sleep(0.05)
            assert tags == ["TagA", "TagCommit", "TagD", "TagT"]
            by_tag = {r.tags: r for r in got}
            for tag, sent in (("TagCommit", sent_half), ("TagD", sent_delayed)):
                props = by_tag[tag].properties
                assert props["CLUSTER"] == "DefaultCluster"
                assert all(props[k] == v for k, v in sent.items()
                           if k not in ("TRAN_MSG", "DELAY")), (tag, props)
            back = RemotingCommand.request(RC.CONSUMER_SEND_MSG_BACK, {
                "offset": plain_offset, "group": "CG_J", "delayLevel": 0,
                "originMsgId": sent_plain["UNIQ_KEY"], "originTopic": "CT_P",
                "maxReconsumeTimes": 16})
            before = broker.store.commitlog.max_offset
            peer.write(encode(back))
            assert (await peer.answer(back.opaque)).code == 0
            data = broker.store.record_bytes(before)
            (retry,) = decode_records(data)
            assert retry.topic == SCHEDULE_TOPIC
            raw = stored_properties(broker, retry.offset_msg_id)
            props = assert_sound(raw)
            assert props["RETRY_TOPIC"] == "CT_P"
            assert all(props[k] == v for k, v in sent_plain.items())
        finally:
            await peer.close()

    run_async(main())


@pytest.mark.parametrize("order", ["c1 first", "c2 first"])
def test_two_java_members_with_different_sub_versions(cluster, order):
    """Two members of CCG_TWO heartbeat with subVersions 2 ms apart; in either order, neither
    member's pulls are refused SUBSCRIPTION_NOT_LATEST."""
    two = frames("two-consumers")
    c1_hb, c2_hb = two[33], two[28]
    assert c1_hb.peer == 48716 and c2_hb.peer == 34942
    pulls = [two[47], two[29], two[49], two[48], two[30]]
    versions = {f.peer: f.ext["subVersion"] for f in pulls if f.ext["topic"] == "CT_2"}
    assert versions[48716] != versions[34942]  # the capture really has two versions

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c1, c2 = await RawPeer.open(broker.address), await RawPeer.open(broker.address)
        peers = {48716: c1, 34942: c2}
        try:
            create = RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {
                "topic": "CT_2", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})
            c1.write(encode(create))
            assert (await c1.answer(create.opaque)).code == 0
            first, second = (c1_hb, c2_hb) if order == "c1 first" else (c2_hb, c1_hb)
            for hb in (first, second):
                peers[hb.peer].write(hb.encode())
                assert (await peers[hb.peer].answer(opaque_of(hb))).code == 0
            for pull in pulls:
                # Not held by long polling: the queues are empty.
                peers[pull.peer].write(rewritten(pull, suspendTimeoutMillis="0"))
                answer = await peers[pull.peer].answer(opaque_of(pull))
                assert answer.code not in (ResponseCode.SUBSCRIPTION_NOT_LATEST,
                                           ResponseCode.SUBSCRIPTION_NOT_EXIST), (
                    pull.ext, answer.remark)
                assert answer.code in (ResponseCode.PULL_NOT_FOUND,
                                       ResponseCode.PULL_OFFSET_MOVED), answer.remark
            group = broker.clients.consumers["CCG_TWO"]
            assert group.subscriptions["CT_2"].sub_version == max(
                int(v) for v in versions.values())
        finally:
            await c1.close()
            await c2.close()

    run_async(main())


def test_cpp_sends_keep_their_separator(cluster):
    """The C++ client ends properties with the separator: CLUSTER follows directly, no empty
    segment, on single, compressed, oneway, batch, half and delayed sends."""
    sends = [f for f in CPP_FRAMES if f.code == RC.SEND_MESSAGE]
    assert all(f.ext["properties"].endswith("\x02") for f in sends)
    expected = []
    for f in sends:
        if f.ext["batch"] == "1":
            expected += [f.body[a:a + n] for _, _, _, a, n in split_batch(f.body)]
        else:
            expected.append(f.ext["properties"].encode())

    async def main():
        broker, peer = await java_broker(cluster)
        try:
            peer.write(*(f.encode() for f in sends))
            for f in sends:
                if not f.header_json["flag"] & 2:
                    answer = await peer.answer(opaque_of(f))
                    assert answer.code == 0, answer.remark
            # The oneway send has no answer: walk the CommitLog until all are there.
            deadline = time.monotonic() + 5
            while True:
                stored, offset = {}, 0
                while offset < broker.store.commitlog.max_offset:
                    data = broker.store.record_bytes(offset)
                    fields, _, _, props_at = record_layout(memoryview(data))
                    raw = bytes(data[props_at:fields[0]])
                    stored[decode_properties(raw)["UNIQ_KEY"]] = raw
                    offset += fields[0]
                if len(stored) == len(expected) or time.monotonic() > deadline:
                    return stored
                await asyncio.sleep(0.02)
        finally:
            await peer.close()

    stored = run_async(main())
    assert len(stored) == len(expected) == 7
    for sent in expected:
        raw = stored[decode_properties(sent)["UNIQ_KEY"]]
        props = assert_sound(raw)
        if "TRAN_MSG" in props or "DELAY" in props:  # rewritten for the half/schedule topic
            assert all(props[k] == v for k, v in decode_properties(sent).items())
        else:
            assert raw == sent + CLUSTER


def test_empty_property_strings(cluster):
    """An empty property string, single or in a batch, gets CLUSTER and nothing else."""
    from rocketq.protocol.message import encode_batch

    async def main():
        broker, peer = await java_broker(cluster)
        try:
            base = {"a": "pg", "b": "Empty", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                    "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0"}
            single = RemotingCommand.request(RC.SEND_MESSAGE_V2, base, b"one")
            batch = RemotingCommand.request(RC.SEND_BATCH_MESSAGE, base, encode_batch(
                [(0, b"two", b""), (0, b"three", b"KEYS\x01k3")]))
            peer.write(encode(single), encode(batch))
            ids = []
            for cmd in (single, batch):
                answer = await peer.answer(cmd.opaque)
                assert answer.code == 0, answer.remark
                ids += answer.ext_fields["msgId"].split(",")
            return [stored_properties(broker, i) for i in ids]
        finally:
            await peer.close()

    assert run_async(main()) == [CLUSTER, CLUSTER, b"KEYS\x01k3\x02" + CLUSTER]
