"""The admin client's offsets, searches by time, dead letters and message track, against a
real broker on 127.0.0.1."""

from __future__ import annotations

import threading
import time

import pytest

from rocketq import (
    Admin,
    ClientError,
    ConsumeResult,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)

from ..conftest import wait_for


def _committed(broker, group: str, topic: str, queues: int) -> dict[int, int | None]:
    return {q: broker.offsets.query(group, topic, q) for q in range(queues)}


def test_reset_by_time_and_skip_to_the_end_move_the_offsets(servers):
    broker = servers.brokers[0]
    servers.create_topic("Reset", 2)
    with Producer("reset-producer", namesrv=servers.namesrv) as producer:
        for i in range(4):
            producer.send(Message("Reset", b"old %d" % i))
        time.sleep(0.05)
        cut = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(6):
            producer.send(Message("Reset", b"new %d" % i))
    assert broker.store.wait_dispatched()
    consumer = PullConsumer("reset-group", namesrv=servers.namesrv, from_where="first",
                            auto_commit=False)
    consumer.subscribe("Reset")
    consumer.start()
    try:
        got = []
        assert wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 10)
        consumer.commit()
    finally:
        consumer.shutdown()
    ends = _committed(broker, "reset-group", "Reset", 2)
    assert sum(ends.values()) == 10

    with Admin(servers.namesrv) as admin:
        # Back to before the first message: every queue from 0.
        moved = admin.reset_offset("reset-group", "Reset", 0)
        assert moved == {MessageQueue("Reset", "broker-a", q): 0 for q in range(2)}
        assert _committed(broker, "reset-group", "Reset", 2) == {0: 0, 1: 0}
        # To the cut: each queue at its first "new" message, the old ones skipped.
        moved = admin.reset_offset("reset-group", "Reset", cut)
        old_per_queue = {q: sum(1 for m in got if m.queue_id == q and m.body.startswith(b"old"))
                         for q in range(2)}
        assert {mq.queue_id: o for mq, o in moved.items()} == old_per_queue
        assert _committed(broker, "reset-group", "Reset", 2) == old_per_queue
        # Skipping what piled up: at the end of every queue.
        moved = admin.skip_accumulated("reset-group", "Reset")
        assert {mq.queue_id: o for mq, o in moved.items()} == ends
        assert _committed(broker, "reset-group", "Reset", 2) == ends
        # Not forced, a reset to the start leaves offsets before it... and moves these back.
        assert admin.reset_offset("reset-group", "Reset", 0, force=False) == {
            MessageQueue("Reset", "broker-a", q): 0 for q in range(2)}
        with pytest.raises(ClientError, match="not exist"):
            admin.reset_offset("nobody-group", "Reset", 0)
        with pytest.raises(ClientError, match="no route"):
            admin.skip_accumulated("reset-group", "NoSuchTopic")


def test_messages_by_time_are_exactly_those_stored_in_the_range(servers):
    servers.create_topic("Timed", 3)
    sent: dict[str, list[bytes]] = {"before": [], "inside": [], "after": []}
    marks = []
    with Producer("timed-producer", namesrv=servers.namesrv) as producer:
        for phase in ("before", "inside", "after"):
            time.sleep(0.02)
            marks.append(int(time.time() * 1000))
            time.sleep(0.02)
            for i in range(5):
                body = f"{phase} {i}".encode()
                producer.send(Message("Timed", body))
                sent[phase].append(body)
        time.sleep(0.02)
        marks.append(int(time.time() * 1000))
    assert servers.brokers[0].store.wait_dispatched()
    begin, end = marks[1], marks[2]
    with Admin(servers.namesrv) as admin:
        found = admin.messages_by_time("Timed", begin, end)
        assert sorted(m.body for m in found) == sorted(sent["inside"])
        assert all(begin <= m.store_timestamp <= end for m in found)
        assert [m.store_timestamp for m in found] == sorted(m.store_timestamp for m in found)
        # At most max_num: the oldest of them.
        oldest = admin.messages_by_time("Timed", begin, end, max_num=2)
        assert [m.body for m in oldest] == [m.body for m in found[:2]]
        everything = admin.messages_by_time("Timed", marks[0], marks[3])
        assert len(everything) == 15
        assert admin.messages_by_time("Timed", marks[3] + 1000, marks[3] + 2000) == []
        with pytest.raises(ClientError, match="No route"):
            admin.messages_by_time("NoSuchTopic", begin, end)


def test_a_dead_letter_resent_is_consumed_by_its_group_alone(servers):
    ns = servers.namesrv
    servers.create_topic("Work", 1)
    failing = threading.Event()
    failing.set()
    got: list = []
    other: list = []

    def worker(messages):
        got.extend(messages)
        return ConsumeResult.RECONSUME_LATER if failing.is_set() else ConsumeResult.SUCCESS

    with Admin(ns) as admin:
        assert admin.dlq_messages("workers") == []  # no dead-letter queue yet
        with PushConsumer("workers", namesrv=ns, from_where="first",
                          max_reconsume_times=0) as consumer, \
                PushConsumer("auditors", namesrv=ns, from_where="first") as auditor:
            consumer.subscribe("Work")
            consumer.register(worker)
            consumer.start()
            auditor.subscribe("Work")
            auditor.register(lambda messages: other.extend(messages))
            auditor.start()
            with Producer("work-producer", namesrv=ns) as producer:
                producer.send(Message("Work", b"poison", tags="job", keys=["order-9"],
                                      properties={"attempt": "first"}))
            # No retries allowed: the first failure sends it to the dead-letter queue.
            assert wait_for(lambda: admin.dlq_messages("workers"), 15)
            [dead] = admin.dlq_messages("workers")
            assert (dead.topic, dead.body, dead.tags, dead.keys) == (
                "%DLQ%workers", b"poison", "job", ["order-9"])
            assert wait_for(lambda: len(other) == 1)
            failing.clear()
            seen = len(got)

            result = admin.resend_dlq("workers", dead.msg_id)
            assert result.status.name == "SEND_OK"
            assert result.queue.topic == "%RETRY%workers"
            assert wait_for(lambda: len(got) > seen, 15)
            again = got[-1]
            # The group gets it back under the original topic, with what it carried.
            assert (again.topic, again.body, again.tags, again.keys) == (
                "Work", b"poison", "job", ["order-9"])
            assert again.properties["attempt"] == "first" and again.msg_id == dead.msg_id
            assert again.reconsume_times == 0
            time.sleep(0.5)
            assert len(other) == 1  # the other group consumed it once, and only once
            # Consumed this time: nothing new in the dead-letter queue.
            assert len(admin.dlq_messages("workers")) == 1
        with pytest.raises(ClientError):
            admin.resend_dlq("workers", "0" * 32)


def test_the_trace_follows_each_group(servers):
    ns = servers.namesrv
    servers.create_topic("Traced", 1)
    with Producer("trace-producer", namesrv=ns) as producer:
        sent = producer.send(Message("Traced", b"follow me", tags="red"))
    with Admin(ns) as admin:
        assert admin.message_trace("Traced", sent.msg_id) == []  # nobody consumes it yet

        puller = PullConsumer("trace-pullers", namesrv=ns, from_where="first",
                              auto_commit=False)
        puller.subscribe("Traced")
        puller.start()
        filtered: list = []
        blue = PushConsumer("trace-blue", namesrv=ns, from_where="first")
        blue.subscribe("Traced", "blue")
        blue.register(lambda messages: filtered.extend(messages))
        blue.start()
        try:
            def status() -> dict[str, str]:
                return {d.group: d.status for d in admin.message_trace("Traced", sent.msg_id)}

            assert wait_for(lambda: status().get("trace-pullers") == "NOT_CONSUMED_YET", 10)
            got: list = []
            assert wait_for(lambda: got.extend(puller.poll(0.2)) or got)
            assert status()["trace-pullers"] == "NOT_CONSUMED_YET"  # read, not committed
            puller.commit()
            assert wait_for(lambda: status()["trace-pullers"] == "CONSUMED")
            [pullers] = [d for d in admin.message_trace("Traced", sent.msg_id)
                         if d.group == "trace-pullers"]
            assert (pullers.consumer_offset, pullers.members) == (1, 1)
            # The blue group passed it without consuming it: its tag does not match.
            assert wait_for(lambda: status().get("trace-blue") == "CONSUMED_BUT_FILTERED", 15)
            assert filtered == []
        finally:
            puller.shutdown()
            blue.shutdown()
        # Offsets kept, nobody connected.
        assert wait_for(lambda: status() == {"trace-pullers": "NOT_ONLINE",
                                             "trace-blue": "NOT_ONLINE"})
        with pytest.raises(ClientError):
            admin.message_trace("Traced", "0" * 32)
