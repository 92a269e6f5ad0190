"""POP through the gRPC endpoint: FIFO groups, the DLQ after the attempts run out, delayed
and transactional messages, and bad requests answered with their codes."""

from __future__ import annotations

import asyncio
import time

from rocketq.broker.subscription_groups import SubscriptionGroupConfig
from rocketq.grpc.convert import duration
from rocketq.grpc.proto import definition_pb2 as pb
from rocketq.grpc.proto import service_pb2 as spb

from ..conftest import run_async
from .conftest import message, producer_settings, resource
from .test_service import receive, receive_request


def set_group(broker, group: str, **kw) -> None:
    broker.subscription_groups.update(SubscriptionGroupConfig(group, **kw))


async def ack(client, group, topic, m) -> pb.Status:
    r = await client.call("AckMessage", spb.AckMessageRequest(
        group=resource(group), topic=resource(topic), entries=[spb.AckMessageEntry(
            message_id=m.system_properties.message_id,
            receipt_handle=m.system_properties.receipt_handle)]))
    return r.entries[0].status if r.entries else r.status


def test_fifo_group_gets_a_queue_in_order_one_batch_at_a_time(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("F", 2, message_type="FIFO")
        set_group(b.broker, "FG", consume_message_orderly=True)
        c1, c2 = b.client(), b.client()
        route = await c1.call("QueryRoute", spb.QueryRouteRequest(topic=resource("F")))
        assert list(route.message_queues[0].accept_message_types) == [pb.FIFO]
        groups = {"g1": [], "g2": []}
        sends = []
        for i in range(10):
            g = "g1" if i % 2 else "g2"
            sends.append(message("F", f"{g}-{i}".encode(), group=g, kind=pb.FIFO))
        for m in sends:  # one by one, as the client sends them, so the order is theirs
            r = await c1.call("SendMessage", spb.SendMessageRequest(messages=[m]))
            assert r.status.code == pb.OK, r
        # Two consumers: whoever holds a queue's batch, the other gets nothing of that
        # queue until it is acked; every message group's order is kept.
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            for c in (c1, c2):
                status, ms = await receive(c, "FG", "F", batch=3, poll_ms=0)
                for m in ms:
                    got.append(m.body.decode())
                    assert m.system_properties.message_group in ("g1", "g2")
                for m in ms:
                    assert (await ack(c, "FG", "F", m)).code == pb.OK
        for body in got:
            groups[body.split("-")[0]].append(int(body.split("-")[1]))
        assert sorted(got) == sorted(m.body.decode() for m in sends)
        assert groups["g1"] == sorted(groups["g1"]) and groups["g2"] == sorted(groups["g2"])
        await b.stop()
    run_async(go())


def test_fifo_batch_not_acked_blocks_then_comes_back_with_next_attempt(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("F", 1, message_type="FIFO")
        set_group(b.broker, "FG", consume_message_orderly=True)
        c = b.client()
        for i in range(3):
            await c.call("SendMessage", spb.SendMessageRequest(messages=[
                message("F", str(i).encode(), group="g", kind=pb.FIFO)]))
        status, first = await receive(c, "FG", "F", batch=1, invisible_ms=10_000)
        assert [m.body for m in first] == [b"0"]
        # The queue is blocked while "0" is out.
        status, none = await receive(c, "FG", "F", batch=1, poll_ms=0)
        assert status.code == pb.MESSAGE_NOT_FOUND
        changed = await c.call("ChangeInvisibleDuration", spb.ChangeInvisibleDurationRequest(
            group=resource("FG"), topic=resource("F"),
            receipt_handle=first[0].system_properties.receipt_handle,
            invisible_duration=duration(500)))
        assert changed.status.code == pb.OK
        await asyncio.sleep(1.0)
        status, again = await receive(c, "FG", "F", batch=1, poll_ms=3000)
        assert [m.body for m in again] == [b"0"]
        assert again[0].system_properties.delivery_attempt == 2
        assert (await ack(c, "FG", "F", again[0])).code == pb.OK
        status, nxt = await receive(c, "FG", "F", batch=5, poll_ms=3000)
        assert [m.body for m in nxt] == [b"1", b"2"]
        assert all(m.system_properties.delivery_attempt == 1 for m in nxt)
        await b.stop()
    run_async(go())


def test_dead_letter_queue_after_max_attempts(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("T", 1)
        set_group(b.broker, "DG", retry_max_times=1)  # max_attempts 2
        c = b.client()
        sent = await c.call("SendMessage", spb.SendMessageRequest(messages=[
            message("T", b"poison")]))
        message_id = sent.entries[0].message_id
        attempts = []
        for _ in range(2):
            status, ms = await receive(c, "DG", "T", batch=1, poll_ms=4000)
            assert len(ms) == 1 and ms[0].system_properties.message_id == message_id
            attempts.append(ms[0].system_properties.delivery_attempt)
            await c.call("ChangeInvisibleDuration", spb.ChangeInvisibleDurationRequest(
                group=resource("DG"), topic=resource("T"),
                receipt_handle=ms[0].system_properties.receipt_handle,
                invisible_duration=duration(200)))
            await asyncio.sleep(0.5)
        assert attempts == [1, 2]
        status, ms = await receive(c, "DG", "T", batch=1, poll_ms=1500)
        assert not ms
        # It is in the group's dead-letter topic, with where it came from.
        store = b.broker.store
        assert store.get_max_offset("%DLQ%DG", 0) == 1
        result = store.get_messages("%DLQ%DG", 0, 0, 1)
        record = result.decode()[0]
        result.release()
        assert record.body == b"poison"
        assert record.properties["DLQ_ORIGIN_TOPIC"] == "T"
        assert record.properties["UNIQ_KEY"] == message_id
        await b.stop()
    run_async(go())


def test_delayed_message_arrives_on_time(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("D", 1, message_type="DELAY")
        c = b.client()
        due = int(time.time() * 1000) + 2000
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
            message("D", b"later", deliver_at_ms=due, kind=pb.DELAY)]))
        assert r.status.code == pb.OK, r
        status, ms = await receive(c, "DG", "D", poll_ms=5000)
        arrived = time.time() * 1000
        assert len(ms) == 1 and ms[0].body == b"later"
        assert abs(arrived - due) < 1000, arrived - due
        await b.stop()
    run_async(go())


def test_transaction_commit_rollback_and_check(grpc_broker):
    async def go():
        b = await grpc_broker.start(transactionTimeOut=500, transactionCheckInterval=300)
        await b.create_topic("X", 1, message_type="TRANSACTION")
        p = b.client()
        await p.settings(producer_settings("X"))
        ids = {}
        for name in ("commit", "rollback", "check"):
            r = await p.call("SendMessage", spb.SendMessageRequest(messages=[
                message("X", name.encode(), kind=pb.TRANSACTION)]))
            assert r.status.code == pb.OK, r
            ids[name] = r.entries[0]
        for name, resolution in (("commit", pb.COMMIT), ("rollback", pb.ROLLBACK)):
            e = ids[name]
            end = await p.call("EndTransaction", spb.EndTransactionRequest(
                topic=resource("X"), message_id=e.message_id, transaction_id=e.transaction_id,
                resolution=resolution, source=pb.SOURCE_CLIENT))
            assert end.status.code == pb.OK, end
        # The third is left open: the broker asks the producer on its telemetry stream.
        command = await asyncio.wait_for(p.queue.get(), 10)
        check = command.recover_orphaned_transaction_command
        assert check.transaction_id == ids["check"].transaction_id
        assert check.message.body == b"check"
        end = await p.call("EndTransaction", spb.EndTransactionRequest(
            topic=resource("X"), message_id=check.message.system_properties.message_id,
            transaction_id=check.transaction_id, resolution=pb.COMMIT,
            source=pb.SOURCE_SERVER_CHECK))
        assert end.status.code == pb.OK
        c = b.client()
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            status, ms = await receive(c, "XG", "X", poll_ms=2000)
            got.extend(m.body for m in ms)
        assert sorted(got) == [b"check", b"commit"]
        await b.stop()
    run_async(go())


def test_bad_requests_get_their_codes_and_the_server_goes_on(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("T", 1)
        c = b.client()
        r = await c.call("QueryRoute", spb.QueryRouteRequest(topic=resource("Nope")))
        assert r.status.code == pb.TOPIC_NOT_FOUND and "Nope" in r.status.message
        r = await c.call("QueryRoute", spb.QueryRouteRequest(topic=resource("bad topic!")))
        assert r.status.code == pb.ILLEGAL_TOPIC
        r = await c.call("QueryRoute", spb.QueryRouteRequest(topic=resource("T")),
                         **{"x-mq-client-id": ""})
        assert r.status.code == pb.CLIENT_ID_REQUIRED
        # Sends: no id, a topic of another type, an empty body, a system property.
        bad = message("T", b"x")
        bad.system_properties.message_id = ""
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[bad]))
        assert r.entries[0].status.code == pb.ILLEGAL_MESSAGE_ID
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
            message("T", b"x", group="g", kind=pb.FIFO)]))
        assert r.entries[0].status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[message("T", b"")]))
        assert r.entries[0].status.code == pb.MESSAGE_BODY_EMPTY
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
            message("T", b"x", props={"UNIQ_KEY": "mine"})]))
        assert r.entries[0].status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
            message("T", b"x", tag="a|b")]))
        assert r.entries[0].status.code == pb.ILLEGAL_MESSAGE_TAG
        # Receives: an invisible time out of range, an unknown topic, a bad SQL filter.
        status, _ = await receive(c, "G", "T", invisible_ms=1000)
        assert status.code == pb.ILLEGAL_INVISIBLE_TIME
        status, _ = await receive(c, "G", "T", invisible_ms=13 * 3600 * 1000)
        assert status.code == pb.ILLEGAL_INVISIBLE_TIME
        status, _ = await receive(c, "G", "Nope")
        assert status.code == pb.TOPIC_NOT_FOUND
        request = receive_request("G", "T")
        request.filter_expression.type = pb.SQL
        request.filter_expression.expression = "a >>> 1"
        frames = await c.stream("ReceiveMessage", request)
        assert frames[0].status.code == pb.ILLEGAL_FILTER_EXPRESSION
        # Acks: a forged handle, garbage, another group's handle, an expired one.
        await c.call("SendMessage", spb.SendMessageRequest(messages=[message("T", b"m")]))
        status, ms = await receive(c, "G", "T")
        handle = ms[0].system_properties.receipt_handle
        parts = handle.split(" ")
        forged = " ".join([parts[0], str(int(parts[1]) + 7), *parts[2:]])
        for h, code in ((forged, pb.INVALID_RECEIPT_HANDLE),
                        ("not a handle", pb.INVALID_RECEIPT_HANDLE)):
            r = await c.call("AckMessage", spb.AckMessageRequest(
                group=resource("G"), topic=resource("T"),
                entries=[spb.AckMessageEntry(message_id="m", receipt_handle=h)]))
            assert r.entries[0].status.code == code, (h, r)
        r = await c.call("AckMessage", spb.AckMessageRequest(
            group=resource("OtherGroup"), topic=resource("T"),
            entries=[spb.AckMessageEntry(message_id="m", receipt_handle=handle)]))
        assert r.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        assert "OtherGroup" in r.entries[0].status.message
        expired = " ".join([parts[0], "1000", *parts[2:]])
        r = await c.call("AckMessage", spb.AckMessageRequest(
            group=resource("G"), topic=resource("T"),
            entries=[spb.AckMessageEntry(message_id="m", receipt_handle=expired)]))
        assert r.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE
        assert "expired" in r.entries[0].status.message
        # The right handle still works: nothing above changed the message's state.
        assert (await ack(c, "G", "T", ms[0])).code == pb.OK
        # A hostile request body: the call fails alone, the server serves the next one.
        import grpc
        raw = c.channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
        try:
            await raw(b"\xff\xff\xff\xff\x0f garbage", metadata=c.metadata(), timeout=5)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
        truncated = spb.SendMessageRequest(messages=[message("T", b"y" * 100)])
        raw_bytes = truncated.SerializeToString()[:-30]
        try:
            await raw(raw_bytes, metadata=c.metadata(), timeout=5)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
        r = await c.call("QueryRoute", spb.QueryRouteRequest(topic=resource("T")))
        assert r.status.code == pb.OK
        await b.stop()
    run_async(go())


def test_fifo_state_after_a_revival_survives_a_restart(grpc_broker):
    """A FIFO batch acked out of order, its first message revived: after a restart the
    queue resumes at that message with its attempt, and the acked ones never come back."""
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("FR", 1, message_type="FIFO")
        set_group(b.broker, "FRG", consume_message_orderly=True)
        c = b.client()
        for i in range(3):
            await c.call("SendMessage", spb.SendMessageRequest(messages=[
                message("FR", b"m%d" % i, group="g", kind=pb.FIFO)]))
        status, batch = await receive(c, "FRG", "FR", batch=3)
        assert [m.body for m in batch] == [b"m0", b"m1", b"m2"]
        for m in batch[1:]:
            assert (await ack(c, "FRG", "FR", m)).code == pb.OK
        await c.call("ChangeInvisibleDuration", spb.ChangeInvisibleDurationRequest(
            group=resource("FRG"), topic=resource("FR"),
            receipt_handle=batch[0].system_properties.receipt_handle,
            invisible_duration=duration(0)))
        # Revived: the queue opens again at m0, attempt 2 (a "fifo" record).
        await asyncio.sleep(0.5)
        state = b.broker.pop.fifo[("FRG", "FR", 0)]
        assert not state.busy and state.attempt == 2
        await b.server.stop()
        await b.broker.stop()
        b.cluster.brokers.remove(b.broker)
        b.broker = await b.cluster.start_broker()  # the same store
        from rocketq.grpc import GrpcServer
        b.server = GrpcServer(b.broker, "127.0.0.1", 0)
        await b.server.start()
        c = b.client()
        status, again = await receive(c, "FRG", "FR", batch=3, poll_ms=2000)
        assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"m0", 2)]
        assert (await ack(c, "FRG", "FR", again[0])).code == pb.OK
        await c.call("SendMessage", spb.SendMessageRequest(messages=[
            message("FR", b"m3", group="g", kind=pb.FIFO)]))
        status, after = await receive(c, "FRG", "FR", batch=3, poll_ms=2000)
        assert [(m.body, m.system_properties.delivery_attempt) for m in after] == [(b"m3", 1)]
        await b.stop()
    run_async(go())


def test_a_gzip_body_that_inflates_past_the_limit_is_refused(grpc_broker):
    import gzip

    async def go():
        b = await grpc_broker.start()
        await b.create_topic("Z", 1)
        c = b.client()
        bomb = message("Z", gzip.compress(b"\0" * (64 << 20)))
        bomb.system_properties.body_encoding = pb.GZIP
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[bomb]))
        assert r.entries[0].status.code == pb.MESSAGE_BODY_TOO_LARGE
        ok = message("Z", gzip.compress(b"small"))
        ok.system_properties.body_encoding = pb.GZIP
        r = await c.call("SendMessage", spb.SendMessageRequest(messages=[ok]))
        assert r.entries[0].status.code == pb.OK
        status, ms = await receive(c, "ZG", "Z")
        assert [m.body for m in ms] == [b"small"]
        await b.stop()
    run_async(go())


def test_auto_renew_keeps_a_push_consumers_messages_while_it_lives(grpc_broker, monkeypatch):
    from rocketq.broker.pop import revive as pop_revive
    from rocketq.grpc import receiving

    monkeypatch.setattr(receiving, "AUTO_RENEW_INVISIBLE_MS", 2000)
    monkeypatch.setattr(pop_revive, "RENEW_AHEAD_MS", 1500)
    monkeypatch.setattr(pop_revive, "RENEW_BY_MS", 2000)

    async def go():
        b = await grpc_broker.start()
        await b.create_topic("AR", 1)
        pusher, other = b.client(), b.client()
        await pusher.settings(consumer_settings_push("ARG", "AR"))
        for body in (b"slow", b"orphan"):
            await pusher.call("SendMessage", spb.SendMessageRequest(messages=[
                message("AR", body)]))
        request = receive_request("ARG", "AR", batch=1)
        request.auto_renew = True
        frames = await pusher.stream("ReceiveMessage", request)
        slow = [f.message for f in frames if f.WhichOneof("content") == "message"][0]
        # 5 s with an invisible time of 2 s: renewed, so nobody else gets it.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            status, ms = await receive(other, "ARG", "AR", batch=1, poll_ms=500,
                                       invisible_ms=10_000)
            assert slow.body not in [m.body for m in ms]
            for m in ms:  # the other message, taken by the other member: leave it out
                assert m.body == b"orphan"
        # The handle it got is still good.
        assert (await ack(pusher, "ARG", "AR", slow)).code == pb.OK
        # A push consumer that goes: its messages come back once their time ends.
        await pusher.call("SendMessage", spb.SendMessageRequest(messages=[
            message("AR", b"left")]))
        frames = await pusher.stream("ReceiveMessage", request)
        left = [f.message for f in frames if f.WhichOneof("content") == "message"]
        assert [m.body for m in left] == [b"left"]
        await pusher.call("NotifyClientTermination", spb.NotifyClientTerminationRequest())
        got = []
        deadline = time.monotonic() + 8
        while b"left" not in got and time.monotonic() < deadline:
            status, ms = await receive(other, "ARG", "AR", batch=4, poll_ms=500,
                                       invisible_ms=10_000)
            got.extend(m.body for m in ms)
        assert b"left" in got
        await b.stop()
    run_async(go())


def consumer_settings_push(group: str, topic: str):
    from .conftest import consumer_settings
    settings = consumer_settings(group, topic)
    settings.client_type = pb.PUSH_CONSUMER
    return settings


def test_a_transaction_sent_before_a_restart_is_ended_after_it(grpc_broker):
    async def go():
        b = await grpc_broker.start()
        await b.create_topic("XR", 1, message_type="TRANSACTION")
        p = b.client()
        r = await p.call("SendMessage", spb.SendMessageRequest(messages=[
            message("XR", b"late-commit", kind=pb.TRANSACTION)]))
        entry = r.entries[0]
        await b.server.stop()
        await b.broker.stop()
        b.cluster.brokers.remove(b.broker)
        b.broker = await b.cluster.start_broker()  # the same store, no memory of the send
        from rocketq.grpc import GrpcServer
        b.server = GrpcServer(b.broker, "127.0.0.1", 0)
        await b.server.start()
        p = b.client()
        end = await p.call("EndTransaction", spb.EndTransactionRequest(
            topic=resource("XR"), message_id=entry.message_id,
            transaction_id=entry.transaction_id, resolution=pb.COMMIT,
            source=pb.SOURCE_CLIENT))
        assert end.status.code == pb.OK, end
        status, ms = await receive(p, "XRG", "XR", poll_ms=3000)
        assert [m.body for m in ms] == [b"late-commit"]
        await b.stop()
    run_async(go())
