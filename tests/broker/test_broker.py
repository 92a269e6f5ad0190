"""Broker requests over real sockets, with a raw remoting client (no rocketq client logic)."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from rocketq.protocol import fastjson
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.command import FrameDecoder, RemotingCommand, encode
from rocketq.protocol.message import (
    decode_records,
    encode_batch,
    encode_properties,
)
from rocketq.remoting import RemotingClient

from ..conftest import run_async


def send_v2(topic, body, queue_id=0, props=None, **extra):
    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0,
           "g": int(time.time() * 1000), "h": 0,
           "i": encode_properties(props or {"WAIT": "true"}), "j": 0, "k": False, "m": False}
    ext.update(extra)
    return RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, body)


async def dispatched(broker):
    """Wait until the broker's store has dispatched everything it holds."""
    assert await asyncio.to_thread(broker.store.wait_dispatched)


def pull(topic, queue_id, offset, sysflag=0x4, sub="*", group="cg", suspend=0, **extra):
    return RemotingCommand.request(RC.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
        "maxMsgNums": 32, "sysFlag": sysflag, "commitOffset": 0,
        "suspendTimeoutMillis": suspend, "subscription": sub, "subVersion": 0, **extra})


def test_send_pull_and_offsets(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Orders", "readQueueNums": 2,
                                             "writeQueueNums": 2, "perm": 6}))
            assert r.code == 0
            sent = []
            for i in range(5):
                r = await c.invoke(broker.address, send_v2(
                    "Orders", b"m%d" % i, 1, {"TAGS": "paid" if i % 2 else "new",
                                              "KEYS": f"order-{i}", "UNIQ_KEY": f"U{i}"}))
                assert r.code == 0, r.remark
                assert all(isinstance(v, str) for v in r.ext_fields.values())
                assert r.ext_fields["queueId"] == "1"
                assert r.ext_fields["queueOffset"] == str(i)
                assert r.ext_fields["transactionId"] == f"U{i}"
                assert r.ext_fields["MSG_REGION"] == "DefaultRegion"
                sent.append(r.ext_fields["msgId"])
            await dispatched(broker)
            r = await c.invoke(broker.address, pull("Orders", 1, 0))
            assert r.code == 0 and r.ext_fields["nextBeginOffset"] == "5"
            assert r.ext_fields["minOffset"] == "0" and r.ext_fields["maxOffset"] == "5"
            records = decode_records(r.body)
            assert [m.body for m in records] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
            assert records[0].properties["CLUSTER"] == "DefaultCluster"
            assert records[0].offset_msg_id == sent[0]
            # Tag filter on the broker by hash.
            r = await c.invoke(broker.address, pull("Orders", 1, 0, sub="paid"))
            assert [m.body for m in decode_records(r.body)] == [b"m1", b"m3"]
            # Pull status codes.
            assert (await c.invoke(broker.address, pull("Orders", 1, 5))).code == 19
            r = await c.invoke(broker.address, pull("Orders", 1, 50))
            assert r.code == 21 and r.ext_fields["nextBeginOffset"] == "5"
            r = await c.invoke(broker.address, pull("Orders", 0, 3))
            assert r.code == 21 and r.ext_fields["nextBeginOffset"] == "0"
            assert (await c.invoke(broker.address, pull("Orders", 9, 0))).code == 1
            assert (await c.invoke(broker.address, pull("Nope", 0, 0))).code == 17
            # Offsets.
            q = {"consumerGroup": "cg", "topic": "Orders", "queueId": 1}
            r = await c.invoke(broker.address, RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, q))
            assert r.code == 0 and r.ext_fields["offset"] == "0"  # young queue: from 0
            await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 3}))
            r = await c.invoke(broker.address, RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, q))
            assert r.ext_fields["offset"] == "3"
            # Committing through a pull (sysFlag 0x1).
            await c.invoke(broker.address, pull("Orders", 1, 4, sysflag=0x5, commitOffset=4))
            r = await c.invoke(broker.address, RemotingCommand.request(RC.QUERY_CONSUMER_OFFSET, q))
            assert r.ext_fields["offset"] == "4"
            oq = {"topic": "Orders", "queueId": 1}
            r = await c.invoke(broker.address, RemotingCommand.request(RC.GET_MAX_OFFSET, oq))
            assert r.ext_fields["offset"] == "5"
            r = await c.invoke(broker.address, RemotingCommand.request(RC.GET_MIN_OFFSET, oq))
            assert r.ext_fields["offset"] == "0"
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.SEARCH_OFFSET_BY_TIMESTAMP, {**oq, "timestamp": 0}))
            assert r.ext_fields["offset"] == "0"
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.SEARCH_OFFSET_BY_TIMESTAMP,
                {**oq, "timestamp": int(time.time() * 1000) + 10**6}))
            assert r.ext_fields["offset"] == "5"
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.GET_EARLIEST_MSG_STORETIME, oq))
            assert abs(int(r.ext_fields["timestamp"]) - time.time() * 1000) < 60_000
            # Queries.
            from rocketq.protocol.message import decode_offset_msg_id
            _, _, phys = decode_offset_msg_id(sent[2])
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.VIEW_MESSAGE_BY_ID, {"offset": phys}))
            assert decode_records(r.body)[0].body == b"m2"
            r = await c.invoke(broker.address, RemotingCommand.request(RC.QUERY_MESSAGE, {
                "topic": "Orders", "key": "order-3", "maxNum": 10, "beginTimestamp": 0,
                "endTimestamp": int(time.time() * 1000) + 1000}))
            assert r.code == 0 and [m.body for m in decode_records(r.body)] == [b"m3"]
            assert "indexLastUpdatePhyoffset" in r.ext_fields
            r = await c.invoke(broker.address, RemotingCommand.request(RC.QUERY_MESSAGE, {
                "topic": "Orders", "key": "none", "maxNum": 10, "beginTimestamp": 0,
                "endTimestamp": 2**40}))
            assert r.code == 22
            # Stats with fastjson object keys.
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.GET_TOPIC_STATS_INFO, {"topic": "Orders"}))
            table = fastjson.loads(r.body)["offsetTable"]
            assert [(k["queueId"], v["maxOffset"]) for k, v in table.items] == [(0, 0), (1, 5)]
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.GET_CONSUME_STATS, {"consumerGroup": "cg", "topic": "Orders"}))
            stats = fastjson.loads(r.body)["offsetTable"]
            assert [(k["queueId"], v["consumerOffset"], v["brokerOffset"])
                    for k, v in stats.items] == [(0, 0, 0), (1, 4, 5)]
            r = await c.invoke(broker.address, RemotingCommand.request(RC.GET_BROKER_RUNTIME_INFO))
            assert orjson.loads(r.body)["table"]["msgPutTotalTodayNow"] == "5"
            assert (await c.invoke(broker.address, RemotingCommand.request(12345))).code == 3
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_send_errors_and_batches(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker(maxMessageSize=1024, autoCreateTopicEnable="false")
        c = RemotingClient()
        try:
            r = await c.invoke(broker.address, send_v2("Unknown", b"x"))
            assert r.code == 17 and "Unknown" in r.remark
            r = await c.invoke(broker.address, send_v2("bad topic", b"x"))
            assert r.code == 29
            await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "readQueueNums": 2,
                                             "writeQueueNums": 2}))
            r = await c.invoke(broker.address, send_v2("T", b"x" * 2000))
            assert r.code == 13 and "maxMessageSize" in r.remark
            r = await c.invoke(broker.address, send_v2("T", b"x", 7))
            assert r.code == 29
            r = await c.invoke(broker.address, send_v2("T", b"x", props={"big": "v" * 40000}))
            assert r.code == 13
            # SEND_BATCH_MESSAGE: one record per element, consecutive offsets.
            body = encode_batch([(0, b"b%d" % i, encode_properties({"UNIQ_KEY": f"B{i}"}))
                                 for i in range(3)])
            cmd = send_v2("T", body, 0, m=True)
            cmd.code = RC.SEND_BATCH_MESSAGE
            r = await c.invoke(broker.address, cmd)
            assert r.code == 0 and r.ext_fields["queueOffset"] == "0"
            assert len(r.ext_fields["msgId"].split(",")) == 3
            # The C++ form: a batch on code 10 with long names and batch=1.
            cmd = RemotingCommand.request(RC.SEND_MESSAGE, {
                "producerGroup": "pg", "topic": "T", "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0, "bornTimestamp": 1,
                "flag": 0, "properties": "WAIT\x01true\x02", "batch": "1"},
                encode_batch([(0, b"c%d" % i, "") for i in range(2)]))
            r = await c.invoke(broker.address, cmd)
            assert r.code == 0 and r.ext_fields["queueOffset"] == "3"
            cmd.body = b"\x00\x00\x00\x05garbage"
            r = await c.invoke(broker.address, cmd)
            assert r.code == 13
            await dispatched(broker)
            r = await c.invoke(broker.address, pull("T", 0, 0))
            assert [m.body for m in decode_records(r.body)] == [b"b0", b"b1", b"b2", b"c0", b"c1"]
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_sends_of_one_burst_are_stored_together_and_answered_each(cluster, flush):
    """Sends that arrive together are appended in one go (with SYNC_FLUSH, answered after
    one shared flush); one the store refuses (its body is too large) gets its own error while
    the others are stored, each answered with its own offset, in the order they came."""
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker(maxMessageSize=1024, flushDiskType=flush)
        a, b = RemotingClient(), RemotingClient()
        try:
            await a.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Burst", "readQueueNums": 1,
                                             "writeQueueNums": 1}))
            bodies = [b"a0", b"a1", b"x" * 2000, b"a3", b"b0", b"b1"]
            calls = [(a if i < 4 else b).invoke(broker.address, send_v2("Burst", body))
                     for i, body in enumerate(bodies)]
            answers = await asyncio.gather(*calls)
            assert [r.code for r in answers] == [0, 0, 13, 0, 0, 0]
            assert "maxMessageSize" in answers[2].remark
            stored = [r.ext_fields["queueOffset"] for r in answers if r.code == 0]
            assert sorted(stored) == ["0", "1", "2", "3", "4"]
            await dispatched(broker)
            r = await a.invoke(broker.address, pull("Burst", 0, 0))
            by_offset = {m.queue_offset: m.body for m in decode_records(r.body)}
            assert by_offset == {int(r.ext_fields["queueOffset"]): body
                                 for r, body in zip(answers, bodies, strict=True) if r.code == 0}
        finally:
            await a.close()
            await b.close()
            await cluster.stop()

    run_async(main())


def test_sends_and_batches_in_one_read_are_stored_in_arrival_order(cluster):
    """Single sends wait to be appended with the rest of their read; a batch behind them in
    the same read is stored after them, not ahead: one write carries s0, s1, a batch of two
    and s4, and the queue holds them in that order."""
    import socket

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Order", "readQueueNums": 1,
                                             "writeQueueNums": 1}))
            batch = send_v2("Order", encode_batch([(0, b"b2", ""), (0, b"b3", "")]), m=True)
            batch.code = RC.SEND_BATCH_MESSAGE
            cmds = [send_v2("Order", b"s0"), send_v2("Order", b"s1"), batch,
                    send_v2("Order", b"s4")]
            host, port = broker.address.split(":")

            def one_write():
                with socket.create_connection((host, int(port)), timeout=5) as sock:
                    sock.sendall(b"".join(encode(cmd) for cmd in cmds))
                    decoder, answers = FrameDecoder(), []
                    while len(answers) < len(cmds):
                        answers += decoder.feed(sock.recv(65536))
                    return answers

            answers = await asyncio.to_thread(one_write)
            assert all(a.code == 0 for a in answers)
            by_opaque = {a.opaque: a.ext_fields["queueOffset"] for a in answers}
            assert [by_opaque[cmd.opaque] for cmd in cmds] == ["0", "1", "2", "4"]
            await dispatched(broker)
            r = await c.invoke(broker.address, pull("Order", 0, 0))
            assert [m.body for m in decode_records(r.body)] == [b"s0", b"s1", b"b2", b"b3",
                                                                  b"s4"]
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_long_poll_answers_when_a_message_lands(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            await c.invoke(broker.address, send_v2("LP", b"first"))
            await dispatched(broker)
            t0 = time.monotonic()
            waiting = asyncio.ensure_future(c.invoke(
                broker.address, pull("LP", 0, 1, sysflag=0x6, suspend=10_000), timeout=15))
            other = await c.invoke(broker.address, pull("LP", 0, 0))  # not blocked
            assert other.code == 0
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await c.invoke(broker.address, send_v2("LP", b"second"))
            r = await waiting
            assert r.code == 0 and [m.body for m in decode_records(r.body)] == [b"second"]
            assert 0.3 <= time.monotonic() - t0 < 3
            # Nothing arrives: answered PULL_NOT_FOUND after the suspend time.
            t0 = time.monotonic()
            r = await c.invoke(broker.address, pull("LP", 0, 2, sysflag=0x6, suspend=400))
            assert r.code == 19 and 0.35 <= time.monotonic() - t0 < 3
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def heartbeat(client_id, group, topic="T", sub="*", model="CLUSTERING"):
    return RemotingCommand.request(RC.HEART_BEAT, None, orjson.dumps({
        "clientID": client_id, "producerDataSet": [{"groupName": "pg"}],
        "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                             "messageModel": model, "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                             "unitMode": False, "subscriptionDataSet": [
                                 {"topic": topic, "subString": sub, "tagsSet": [],
                                  "codeSet": [0], "subVersion": 1}]}]}))


def test_heartbeats_membership_and_notifications(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        notified: list[str] = []

        def on_request(conn, cmd):
            if cmd.code == RC.NOTIFY_CONSUMER_IDS_CHANGED:
                notified.append(cmd.ext_fields["consumerGroup"])

        a, b = RemotingClient(on_request), RemotingClient(on_request)
        try:
            await a.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "readQueueNums": 1,
                                             "writeQueueNums": 1}))
            assert (await a.invoke(broker.address, heartbeat("c1", "g", sub="x || y"))).code == 0
            assert (await b.invoke(broker.address, heartbeat("c2", "g", sub="x || y"))).code == 0
            r = await a.invoke(broker.address, RemotingCommand.request(
                RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"}))
            assert orjson.loads(r.body)["consumerIdList"] == ["c1", "c2"]
            await asyncio.sleep(0.1)
            assert notified.count("g") >= 2  # c1 told when c2 joined, and each on joining
            # The retry topic of the group exists now.
            assert broker.topics.get("%RETRY%g") is not None
            # Pull without a subscription in the request uses the heartbeat's.
            await a.invoke(broker.address, send_v2("T", b"m", props={"TAGS": "z"}))
            await a.invoke(broker.address, send_v2("T", b"m", props={"TAGS": "y"}))
            await dispatched(broker)
            r = await a.invoke(broker.address, pull("T", 0, 0, sysflag=0, group="g"))
            assert [m.tags for m in decode_records(r.body)] == ["y"]
            r = await a.invoke(broker.address, pull("T", 0, 0, sysflag=0, group="other"))
            assert r.code == 24
            r = await a.invoke(broker.address, RemotingCommand.request(
                RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g"}))
            body = orjson.loads(r.body)
            assert sorted(c["clientId"] for c in body["connectionSet"]) == ["c1", "c2"]
            assert body["subscriptionTable"]["T"]["subString"] == "x || y"
            assert body["subscriptionTable"]["T"]["tagsSet"] == ["x", "y"]
            before = len(notified)
            await b.close()  # c2 disconnects: c1 is told
            for _ in range(50):
                if len(notified) > before:
                    break
                await asyncio.sleep(0.02)
            assert len(notified) > before
            r = await a.invoke(broker.address, RemotingCommand.request(
                RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"}))
            assert orjson.loads(r.body)["consumerIdList"] == ["c1"]
            await a.invoke(broker.address, RemotingCommand.request(
                RC.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "g"}))
            r = await a.invoke(broker.address, RemotingCommand.request(
                RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g"}))
            assert r.code == 1
        finally:
            await a.close()
            await cluster.stop()

    run_async(main())


def test_topic_admin_and_persistence(cluster, tmp_path):
    async def main():
        ns = await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "bad/name"}))
            assert r.code == 29
            await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Keep", "readQueueNums": 3,
                                             "writeQueueNums": 3}))
            for _ in range(50):
                r = await c.invoke(ns.address, RemotingCommand.request(
                    RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Keep"}))
                if r.code == 0:
                    break
                await asyncio.sleep(0.02)
            assert orjson.loads(r.body)["queueDatas"][0]["writeQueueNums"] == 3
            await c.invoke(broker.address, send_v2("Keep", b"kept", 2))
            await dispatched(broker)
            await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Keep", "queueId": 2,
                                            "commitOffset": 1}))
            await broker.stop()
            cluster.brokers.remove(broker)
            broker = await cluster.start_broker()  # same directory
            r = await c.invoke(broker.address, pull("Keep", 2, 0))
            assert [m.body for m in decode_records(r.body)] == [b"kept"]
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Keep", "queueId": 2}))
            assert r.ext_fields["offset"] == "1"
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.DELETE_TOPIC_IN_BROKER, {"topic": "Keep"}))
            assert r.code == 0 and broker.topics.get("Keep") is None
            for _ in range(50):
                r = await c.invoke(ns.address, RemotingCommand.request(
                    RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Keep"}))
                if r.code == 17:
                    break
                await asyncio.sleep(0.02)
            assert r.code == 17
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_random_bytes_on_one_connection_do_not_disturb_another(cluster):
    """Hypothesis throws arbitrary bytes (and truncated or huge frames) at the broker port;
    a healthy client on its own connection keeps sending and pulling throughout."""
    import socket

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    async def start():
        await cluster.start_namesrv()
        return await cluster.start_broker()

    loop = asyncio.new_event_loop()
    broker = loop.run_until_complete(start())
    import threading

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    host, port = broker.address.split(":")

    def healthy_round_trip(i):
        async def go():
            c = RemotingClient()
            try:
                r = await c.invoke(broker.address, send_v2("Healthy", b"ok%d" % i))
                assert r.code == 0
            finally:
                await c.close()
        asyncio.run_coroutine_threadsafe(go(), loop).result(10)

    counter = iter(range(10_000))

    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.one_of(
        st.binary(max_size=200),
        st.builds(lambda n, rest: n.to_bytes(4, "big", signed=True) + rest,
                  st.integers(-2**31, 2**31 - 1), st.binary(max_size=64))))
    def attack(garbage):
        with socket.create_connection((host, int(port)), timeout=2) as sock:
            sock.sendall(garbage)
            sock.settimeout(0.05)
            try:
                sock.recv(4096)
            except (TimeoutError, ConnectionResetError):
                pass
        healthy_round_trip(next(counter))

    try:
        attack()
        assert broker.store.wait_dispatched()
        assert broker.store.get_max_offset("Healthy", 0) >= 60
    finally:
        asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_lite_pull_code_and_broker_unregistration(cluster):
    async def main():
        ns = await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            await c.invoke(broker.address, send_v2("Lite", b"x"))
            await dispatched(broker)
            cmd = pull("Lite", 0, 0, sysflag=0x16)
            cmd.code = RC.LITE_PULL_MESSAGE
            r = await c.invoke(broker.address, cmd)
            assert r.code == 0 and decode_records(r.body)[0].body == b"x"
            # UNREGISTER_BROKER takes the broker off the NameServer's routes.
            r = await c.invoke(ns.address, RemotingCommand.request(RC.UNREGISTER_BROKER, {
                "brokerName": "broker-a", "brokerAddr": broker.address,
                "clusterName": "DefaultCluster", "brokerId": 0}))
            assert r.code == 0
            r = await c.invoke(ns.address, RemotingCommand.request(
                RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Lite"}))
            assert r.code == 17
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())
