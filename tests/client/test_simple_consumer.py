"""rocketq's SimpleConsumer (RocketMQ 5's model, over the remoting POP requests) against real
brokers: receive and ack, redelivery after the invisible time, changing it, members of a group
that never share a message while it is out, progress shared with a 4.x push consumer, tag
filters, and arguments refused where they are given.

Invisible times of 1 s and long polls of 1-2 s keep each test within seconds."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import rocketq.aio
from rocketq import (
    ArgumentTypeError,
    BrokerError,
    ClientError,
    ConsumeResult,
    InvalidArgumentError,
    Message,
    MessageSelector,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
)
from rocketq.client.receipts import POP_CK

from ..conftest import run_async, wait_for


def send(namesrv: str, topic: str, bodies: list[bytes], tags: str | None = None) -> list[str]:
    """Send ``bodies`` to ``topic``; their message ids."""
    with Producer("simple-pg", namesrv=namesrv) as producer:
        return [producer.send(Message(topic, body, tags=tags)).msg_id for body in bodies]


def receive_all(consumer: SimpleConsumer, count: int, timeout: float = 10.0
                ) -> list[ReceivedMessage]:
    """Receive until ``count`` messages came (or ``timeout`` passed)."""
    got: list[ReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got.extend(consumer.receive())
    return got


def test_receive_and_ack(servers):
    servers.create_topic("Simple", 2)
    sent = send(servers.namesrv, "Simple", [b"m%d" % i for i in range(5)])
    with SimpleConsumer("simple-g", namesrv=servers.namesrv, topics=["Simple"],
                        invisible_duration=1, await_duration=2) as consumer:
        # The group shows in the broker's consumer table as a POP consumer.
        group = servers.brokers[0].clients.consumers["simple-g"]
        assert group.consume_type == "CONSUME_POP"
        assert group.message_model == "CLUSTERING"
        assert set(group.subscriptions) == {"Simple"}
        assert consumer._async.instance.client_id in group.channels
        got = receive_all(consumer, 5)
        assert sorted(m.msg_id for m in got) == sorted(sent)
        for message in got:
            assert message.topic == "Simple" and message.broker_name == "broker-a"
            assert message.delivery_attempt == 1 and message.reconsume_times == 0
            fields = message.receipt_handle.split(" ")
            assert message.properties[POP_CK] == message.receipt_handle
            assert fields[4:] == ["0", "broker-a", str(message.queue_id),
                                  str(message.queue_offset)]
            assert fields[2] == "1000"  # the invisible time, ms
            consumer.ack(message)
        # Acked: none comes back once their invisible time (1 s) is over.
        assert consumer.receive() == []
    assert "simple-g" not in servers.brokers[0].clients.consumers  # left at shutdown


def test_a_message_not_acked_comes_back_with_the_next_attempt(servers):
    servers.create_topic("Again", 1)
    (msg_id,) = send(servers.namesrv, "Again", [b"again"])
    with SimpleConsumer("again-g", namesrv=servers.namesrv, topics={"Again": "*"},
                        invisible_duration=30, await_duration=2) as consumer:
        (first,) = consumer.receive(invisible_duration=1)
        assert (first.msg_id, first.delivery_attempt) == (msg_id, 1)
        began = time.monotonic()
        (second,) = consumer.receive()  # not acked: back after its 1 s
        assert 0.5 < time.monotonic() - began < 3
        assert (second.msg_id, second.body, second.topic) == (msg_id, b"again", "Again")
        assert second.delivery_attempt == 2 and second.reconsume_times == 1
        assert second.receipt_handle != first.receipt_handle
        consumer.ack(second)
        assert consumer.receive(invisible_duration=1) == []


def test_an_ack_with_an_expired_handle_is_refused(servers):
    servers.create_topic("Late", 1)
    send(servers.namesrv, "Late", [b"late"])
    with SimpleConsumer("late-g", namesrv=servers.namesrv, topics=["Late"],
                        invisible_duration=1, await_duration=3) as consumer:
        (first,) = consumer.receive()
        (second,) = consumer.receive()  # delivered again: the first handle expired
        consumer.ack(second)
        with pytest.raises(BrokerError, match="expired"):
            consumer.ack(first)


def test_change_invisible_duration(servers):
    servers.create_topic("Longer", 1)
    (msg_id,) = send(servers.namesrv, "Longer", [b"slow work"])
    with SimpleConsumer("longer-g", namesrv=servers.namesrv, topics=["Longer"],
                        invisible_duration=1, await_duration=2) as consumer:
        (message,) = consumer.receive()
        old = message.receipt_handle
        consumer.change_invisible_duration(message, 30)
        fields = message.receipt_handle.split(" ")
        assert message.receipt_handle != old
        assert fields[0] == fields[7] == str(message.queue_offset)  # its own checkpoint
        assert fields[2] == "30000"
        assert message.properties[POP_CK] == message.receipt_handle
        # Its first 1 s would be over now: still invisible.
        assert consumer.receive() == []
        # 0 s: handed back at once, as the next attempt.
        consumer.change_invisible_duration(message, 0)
        (again,) = consumer.receive()
        assert (again.msg_id, again.delivery_attempt) == (msg_id, 2)
        # The handle of the first delivery is spent.
        with pytest.raises(BrokerError, match="expired"):
            consumer.change_invisible_duration(message, 30)
        consumer.ack(again)
        assert consumer.receive() == []


def test_two_members_of_a_group_never_get_one_message_while_it_is_invisible(cluster):
    async def go() -> None:
        from rocketq.broker.topics import TopicConfig

        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        broker.topics.update(TopicConfig("Shared", 4, 4))
        await broker.register_all()
        async with rocketq.aio.Producer("shared-pg", namesrv=cluster.namesrv) as producer:
            sent = {(await producer.send(Message("Shared", b"%d" % i))).msg_id
                    for i in range(20)}
        got: list[list[ReceivedMessage]] = [[], []]

        async def member(i: int, consumer: rocketq.aio.SimpleConsumer) -> None:
            deadline = time.monotonic() + 10
            while sum(map(len, got)) < len(sent) and time.monotonic() < deadline:
                got[i].extend(await consumer.receive(max_messages=3))

        a = rocketq.aio.SimpleConsumer("shared-g", cluster.namesrv, topics=["Shared"],
                                       invisible_duration=30, await_duration=1)
        b = rocketq.aio.SimpleConsumer("shared-g", cluster.namesrv, topics=["Shared"],
                                       invisible_duration=30, await_duration=1)
        async with a, b:
            await asyncio.gather(member(0, a), member(1, b))
            ids = [{m.msg_id for m in messages} for messages in got]
            assert all(len(s) == len(m) for s, m in zip(ids, got, strict=True))
            assert not ids[0] & ids[1]
            assert ids[0] | ids[1] == sent
            assert got[0] and got[1]  # both had a share
            for consumer, messages in ((a, got[0]), (b, got[1])):
                for message in messages:
                    await consumer.ack(message)
            assert await a.receive() == []
        await cluster.stop()

    run_async(go())


def test_a_simple_and_a_push_consumer_of_a_group_share_its_progress(servers):
    """Messages one consumed (acked, or consumed and committed) the other never gets."""
    servers.create_topic("Progress", 2)
    namesrv = servers.namesrv
    first = send(namesrv, "Progress", [b"pop-%d" % i for i in range(4)])
    with SimpleConsumer("progress-g", namesrv=namesrv, topics=["Progress"],
                        invisible_duration=5, await_duration=1) as consumer:
        got = receive_all(consumer, 4)
        assert sorted(m.msg_id for m in got) == sorted(first)
        for message in got:
            consumer.ack(message)
    second = send(namesrv, "Progress", [b"push-%d" % i for i in range(3)])
    pushed: list[str] = []
    lock = threading.Lock()

    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        with lock:
            pushed.extend(m.msg_id for m in messages)
        return ConsumeResult.SUCCESS

    with PushConsumer("progress-g", namesrv=namesrv, from_where="first",
                      suspend_timeout=1.0) as push:
        push.subscribe("Progress")
        push.register(listener)
        assert wait_for(lambda: len(pushed) >= 3, 15)
        # Anything more would have come by now. The wait also outlasts a long poll (1 s),
        # so that the pulls the broker holds at the shutdown carry the offsets consumed:
        # the broker commits a held pull's commitOffset again when it answers it (RocketMQ
        # commits it only when the pull arrives), so a pull held since before the messages
        # were consumed would set the group back when it ends.
        time.sleep(1.5)
    assert sorted(pushed) == sorted(second)  # not the four the SimpleConsumer acked
    assert wait_for(lambda: not servers.brokers[0].pull.waiting, 5)
    third = send(namesrv, "Progress", [b"pop-again-%d" % i for i in range(2)])
    with SimpleConsumer("progress-g", namesrv=namesrv, topics=["Progress"],
                        invisible_duration=5, await_duration=1) as consumer:
        got = receive_all(consumer, 2)
        assert sorted(m.msg_id for m in got) == sorted(third)  # not what the push consumed
        for message in got:
            consumer.ack(message)
        assert consumer.receive() == []


def test_tags_filter(servers):
    servers.create_topic("Tagged", 2)
    namesrv = servers.namesrv
    for tag in ("a", "b", "c"):
        send(namesrv, "Tagged", [f"{tag}-{i}".encode() for i in range(2)], tags=tag)
    send(namesrv, "Tagged", [b"untagged"])
    with SimpleConsumer("tags-ac", namesrv=namesrv, invisible_duration=5,
                        await_duration=1) as consumer:
        consumer.subscribe("Tagged", "a || c")
        got = receive_all(consumer, 4)
        assert sorted(m.body for m in got) == [b"a-0", b"a-1", b"c-0", b"c-1"]
        assert consumer.receive() == []
    with SimpleConsumer("tags-b", namesrv=namesrv,
                        topics={"Tagged": MessageSelector.by_tag("b")}, invisible_duration=5,
                        await_duration=1) as consumer:
        got = receive_all(consumer, 2)
        assert sorted((m.body, m.tags) for m in got) == [(b"b-0", "b"), (b"b-1", "b")]
        assert consumer.receive() == []


def test_subscribed_topics_take_turns(servers):
    for topic in ("TurnA", "TurnB"):
        servers.create_topic(topic, 1)
        send(servers.namesrv, topic, [topic.encode()])
    with SimpleConsumer("turns-g", namesrv=servers.namesrv, topics=["TurnA", "TurnB"],
                        invisible_duration=5, await_duration=1) as consumer:
        began = time.monotonic()
        got = [m for _ in range(2) for m in consumer.receive()]
        assert sorted(m.body for m in got) == [b"TurnA", b"TurnB"]
        assert time.monotonic() - began < 1  # neither receive waited on an empty topic
        for message in got:
            consumer.ack(message)


def test_a_topic_without_a_route_is_a_client_error(servers):
    with SimpleConsumer("nowhere-g", namesrv=servers.namesrv, topics=["Nowhere"],
                        await_duration=0) as consumer:
        with pytest.raises(ClientError, match="No route info.*Nowhere"):
            consumer.receive()


def test_bad_arguments_are_refused_where_they_are_given():
    namesrv = "127.0.0.1:1"
    with pytest.raises(InvalidArgumentError, match="group"):
        SimpleConsumer("no spaces", namesrv=namesrv)
    with pytest.raises(ArgumentTypeError, match="group"):
        SimpleConsumer(7, namesrv=namesrv)
    with pytest.raises(InvalidArgumentError, match="namesrv"):
        SimpleConsumer("g", namesrv="localhost")
    with pytest.raises(InvalidArgumentError, match="invisible_duration"):
        SimpleConsumer("g", namesrv=namesrv, invisible_duration=0.5)
    with pytest.raises(ArgumentTypeError, match="invisible_duration"):
        SimpleConsumer("g", namesrv=namesrv, invisible_duration="30")
    with pytest.raises(InvalidArgumentError, match="await_duration"):
        SimpleConsumer("g", namesrv=namesrv, await_duration=-1)
    with pytest.raises(InvalidArgumentError, match="topic"):
        SimpleConsumer("g", namesrv=namesrv, topics={"no spaces": "*"})
    with pytest.raises(ArgumentTypeError, match="topic"):
        SimpleConsumer("g", namesrv=namesrv, topics=[7])
    with pytest.raises(ArgumentTypeError, match="expression"):
        SimpleConsumer("g", namesrv=namesrv, topics={"T": 7})
    consumer = SimpleConsumer("g", namesrv=namesrv)
    with pytest.raises(ClientError, match="subscribe"):
        consumer.start()
    with pytest.raises(ArgumentTypeError, match="expression"):
        consumer.subscribe("T", None)
    for bad in (0, 33):
        with pytest.raises(InvalidArgumentError, match="max_messages"):
            consumer.receive(max_messages=bad)
    with pytest.raises(InvalidArgumentError, match="invisible_duration"):
        consumer.receive(invisible_duration=13 * 3600)
    with pytest.raises(ClientError, match="not started"):
        consumer.receive()
    with pytest.raises(ArgumentTypeError, match="message"):
        consumer.ack(Message("T", b"x"))
    pulled = ReceivedMessage("T", b"", 0, 0, 0, "b", {}, "", "", 0, 0, ("", 0), ("", 0), 0)
    with pytest.raises(InvalidArgumentError, match="receipt handle"):
        consumer.ack(pulled)
    pulled.receipt_handle = "0 0 1000 0 0 b 0 0"
    with pytest.raises(InvalidArgumentError, match="seconds"):
        consumer.change_invisible_duration(pulled, -1)
    consumer.shutdown()

    async def asyncio_side() -> None:
        with pytest.raises(InvalidArgumentError, match="invisible_duration"):
            rocketq.aio.SimpleConsumer("g", namesrv, invisible_duration=13 * 3600)
        aio = rocketq.aio.SimpleConsumer("g", namesrv)
        with pytest.raises(InvalidArgumentError, match="max_messages"):
            await aio.receive(max_messages=64)

    asyncio.run(asyncio_side())
