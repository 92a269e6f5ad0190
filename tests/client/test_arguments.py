"""Arguments are checked where they are given: a wrong one fails at once, with a TypeError or
ValueError that is also a ClientError and names the argument, not later as something else
(123 zero bytes sent, an AttributeError, a retry logged forever)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta

import pytest

import rocketq
import rocketq.aio
from rocketq import (
    Admin,
    ArgumentTypeError,
    ClientError,
    ConsumeResult,
    InvalidArgumentError,
    LocalTransactionState,
    Message,
    MessageValidationError,
    Producer,
    PullConsumer,
    PushConsumer,
    SendStatus,
    TransactionProducer,
)

from ..conftest import wait_for

#: Each client class, made with a group (where it has one) and ``namesrv``.
MAKERS = {
    "Producer": lambda group, namesrv: Producer(group, namesrv=namesrv),
    "TransactionProducer": lambda group, namesrv: TransactionProducer(group, object(),
                                                                      namesrv=namesrv),
    "PushConsumer": lambda group, namesrv: PushConsumer(group, namesrv=namesrv),
    "PullConsumer": lambda group, namesrv: PullConsumer(group, namesrv=namesrv),
    "aio.Producer": lambda group, namesrv: rocketq.aio.Producer(group, namesrv=namesrv),
    "aio.PushConsumer": lambda group, namesrv: rocketq.aio.PushConsumer(group,
                                                                        namesrv=namesrv),
    "aio.PullConsumer": lambda group, namesrv: rocketq.aio.PullConsumer(group,
                                                                        namesrv=namesrv),
}
WITH_ADMIN = {**MAKERS, "Admin": lambda group, namesrv: Admin(namesrv=namesrv),
              "aio.Admin": lambda group, namesrv: rocketq.aio.Admin(namesrv=namesrv)}


def make(kind: str, group: str, namesrv: object) -> object:
    """A client of ``kind``; the asyncio ones are made inside a running loop, as their users
    make them."""
    if kind.startswith("aio."):
        async def build() -> object:
            return WITH_ADMIN[kind](group, namesrv)
        return asyncio.run(build())
    return WITH_ADMIN[kind](group, namesrv)


def test_a_body_must_be_bytes_like():
    with pytest.raises(ArgumentTypeError, match="body must be bytes .*not int"):
        Message("Orders", 123)  # once 123 zero bytes
    assert Message("Orders", "text é").body == "text é".encode()
    with pytest.raises(ArgumentTypeError, match="body must be bytes .*not None"):
        Message("Orders", None)
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ClientError)
    assert Message("Orders", bytearray(b"ab")).body == b"ab"
    assert Message("Orders", memoryview(b"abc")[1:]).body == b"bc"


def test_a_topic_must_be_a_str():
    with pytest.raises(ArgumentTypeError, match="topic must be a str, not int"):
        Message(123, b"x")  # once "the topic is empty" at the send


@pytest.mark.parametrize("kind", sorted(WITH_ADMIN))
def test_namesrv_must_be_a_str(kind):
    with pytest.raises(ArgumentTypeError, match="namesrv must be .*host:port.*not None"):
        make(kind, "g", None)  # once an AttributeError


@pytest.mark.parametrize("kind", sorted(WITH_ADMIN))
def test_namesrv_must_be_host_port_when_the_client_is_made(kind):
    for bad in ("localhost", "localhost:", ":9876", "127.0.0.1:port", "127.0.0.1:70000",
                "127.0.0.1:9876;localhost", ""):
        with pytest.raises(InvalidArgumentError, match="namesrv"):
            make(kind, "g", bad)  # once an error at the first send only
    make(kind, "g", "127.0.0.1:9876;127.0.0.2:9876")


@pytest.mark.parametrize("kind", sorted(WITH_ADMIN))
def test_a_bad_namesrv_part_is_named(kind):
    for bad, named in [
            ("http://127.0.0.1:9876", "'http://127.0.0.1:9876' is a URL: a NameServer address "
                                      "has no scheme (http://) or path; write host:port "
                                      "('127.0.0.1:9876')"),
            ("127.0.0.1:9876;rocketmq://ns2:9876/", "'rocketmq://ns2:9876/' is a URL"),
            ("name server:9876", "'name server' is not a host name or IP address"),
            ("user@host:9876", "'user@host' is not a host name or IP address"),
            ("127.0.0.1:9876/", "the port '9876/' is not a number"),
            ("ns1", "'ns1' has no port: write host:port")]:
        with pytest.raises(InvalidArgumentError) as exc:
            make(kind, "g", bad)  # once accepted, and failing at the first request
        assert str(exc.value).startswith("namesrv: ") and named in str(exc.value), bad
    for good in ("ns-1.example.com:9876", "[::1]:9876", "::1:9876", "my_host:9876"):
        make(kind, "g", good)


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_group_names_follow_rocketmqs_rule(kind):
    for bad, match in [("bad group!", "may contain only"), ("", "empty"),
                       ("g" * 256, "256 characters.*255"), ("ns%group", "may contain only"),
                       ("gr\u00fcn", "may contain only")]:
        with pytest.raises(InvalidArgumentError, match=f"group: .*{match}"):
            make(kind, bad, "127.0.0.1:9876")
    with pytest.raises(ArgumentTypeError, match="group"):
        make(kind, None, "127.0.0.1:9876")
    make(kind, "Orders_consumers-1|blue", "127.0.0.1:9876")
    make(kind, "g" * 255, "127.0.0.1:9876")


def test_a_send_takes_a_message(servers):
    servers.create_topic("Orders", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        producer.send(Message("Orders", b"first"))  # the route is known: direct sends
        for call in (lambda: producer.send("hello"),
                     lambda: producer.send(b"hello"),
                     lambda: producer.send_oneway("hello"),
                     lambda: producer.send_async("hello").result(10),
                     lambda: producer.request("hello"),
                     lambda: producer.send_batch(["hello"]),
                     lambda: producer.send_batch("hello")):
            with pytest.raises(ArgumentTypeError,
                               match="takes a (sequence of )?Message, not (str|bytes)"):
                call()

    async def go():
        async with rocketq.aio.Producer("pg2", namesrv=servers.namesrv) as producer:
            with pytest.raises(ArgumentTypeError, match="a send takes a Message, not str"):
                await producer.send("hello")

    asyncio.run(asyncio.wait_for(go(), 30))
    with TransactionProducer("tg", object(), namesrv=servers.namesrv) as producer:
        with pytest.raises(ArgumentTypeError, match="takes a Message"):
            producer.send_message_in_transaction("hello")


def test_a_key_with_a_space_is_refused_and_a_str_is_one_key():
    for keys in (["order 17"], "order 17", ["ok", "not ok"]):
        with pytest.raises(MessageValidationError, match="'(order 17|not ok)' contains a space"):
            Message("Orders", b"x", keys=keys)  # once silently two keys
    with pytest.raises(MessageValidationError, match="empty"):
        Message("Orders", b"x", keys=["a", ""])
    with pytest.raises(ArgumentTypeError, match="keys"):
        Message("Orders", b"x", keys=[17])
    message = Message("Orders", b"x", keys="order-17")
    assert message.keys == ["order-17"]
    with pytest.raises(MessageValidationError, match="space"):
        message.keys = ["a b"]
    assert message.keys == ["order-17"]


def test_delay_level_must_be_from_1_to_18():
    for level in (99, 19, -1):
        with pytest.raises(MessageValidationError, match=f"from 1 to 18.*not {level}"):
            Message("Orders", b"x", delay_level=level)
    with pytest.raises(ArgumentTypeError, match="delay_level"):
        Message("Orders", b"x", delay_level="3")
    assert Message("Orders", b"x", delay_level=18).delay_level == 18
    message = Message("Orders", b"x")
    with pytest.raises(MessageValidationError, match="from 1 to 18"):
        message.delay_level = 99
    assert message.delay_level == 0


def test_delay_and_deliver_at_take_one_way_of_waiting():
    at = datetime.now() + timedelta(seconds=30)
    for kwargs in ({"delay_level": 2, "delay": 5}, {"delay": 5, "deliver_at": at},
                   {"delay_level": 1, "deliver_at": at}):
        with pytest.raises(MessageValidationError, match="give one of delay_level, delay"):
            Message("Orders", b"x", **kwargs)
    with pytest.raises(MessageValidationError, match="0 seconds or more"):
        Message("Orders", b"x", delay=-1)
    with pytest.raises(ArgumentTypeError, match="delay must be seconds"):
        Message("Orders", b"x", delay="5")
    with pytest.raises(MessageValidationError, match="looks like seconds"):
        Message("Orders", b"x", deliver_at=int(time.time()))
    with pytest.raises(ArgumentTypeError, match="deliver_at must be a datetime"):
        Message("Orders", b"x", deliver_at="tomorrow")
    assert Message("Orders", b"x", delay=1.5).properties["TIMER_DELAY_MS"] == "1500"
    assert Message("Orders", b"x", delay=timedelta(minutes=1)).properties[
        "TIMER_DELAY_MS"] == "60000"
    assert Message("Orders", b"x", deliver_at=at).properties["TIMER_DELIVER_MS"] == str(
        round(at.timestamp() * 1000))


def test_delay_and_deliver_at_deliver_later(servers):
    servers.create_topic("Later", 1)
    seen: list[tuple[float, bytes]] = []
    lock = threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend((time.time(), m.body) for m in msgs)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("later-cg", namesrv=servers.namesrv, from_where="first")
    consumer.subscribe("Later")
    consumer.register(listener)
    consumer.start()
    try:
        with Producer("pg", namesrv=servers.namesrv) as producer:
            began = time.time()
            producer.send(Message("Later", b"delay", delay=1.2))
            producer.send(Message("Later", b"timedelta", delay=timedelta(seconds=1.6)))
            producer.send(Message("Later", b"at", deliver_at=datetime.fromtimestamp(
                began + 2.0)))
            producer.send(Message("Later", b"ms", deliver_at=(began + 1.4) * 1000))
            producer.send(Message("Later", b"now"))
        due = {b"now": 0, b"delay": 1.2, b"ms": 1.4, b"timedelta": 1.6, b"at": 2.0}
        assert wait_for(lambda: len(seen) >= 5, 15)
        for at, body in seen:
            assert at >= began + due[body] - 0.05, body
            assert at <= began + due[body] + 2.0, body
    finally:
        consumer.shutdown()


class Commit:
    def execute_local_transaction(self, message, arg):
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, message):
        return LocalTransactionState.COMMIT


def test_timer_messages_are_refused_in_transactions_and_batches(servers):
    servers.create_topic("Orders", 1)
    with TransactionProducer("tg", Commit(), namesrv=servers.namesrv) as producer:
        for message in (Message("Orders", b"x", delay=1), Message("Orders", b"x", delay_level=1),
                        Message("Orders", b"x", deliver_at=datetime.now())):
            with pytest.raises(MessageValidationError, match="cannot be delayed"):
                producer.send_message_in_transaction(message)
        assert producer.send_message_in_transaction(
            Message("Orders", b"x")).status is SendStatus.SEND_OK
        with pytest.raises(MessageValidationError, match="delayed messages cannot be sent"):
            producer.send_batch([Message("Orders", b"a"), Message("Orders", b"b", delay=1)])
    assert servers.brokers[0].stats.put_total == 1


def test_keys_are_a_list_that_prints_as_rocketmqs_get_keys():
    """``message.keys`` indexes and compares as a list, and prints as RocketMQ's getKeys()
    returns the keys: joined by spaces, nothing when there are none."""
    one = Message("Orders", b"x", keys="order-17")
    assert one.keys == ["order-17"] and one.keys[0] == "order-17"
    assert str(one.keys) == f"{one.keys}" == "order-17"
    assert str(Message("Orders", b"x", keys=["a", "b"]).keys) == "a b"
    assert str(Message("Orders", b"x").keys) == "" and Message("Orders", b"x").keys == []
