"""Queries through the client: by offset id, unique id (a RocketMQ 5 client's too), key and
time, offset by time; what does not exist is NotFoundError."""

from __future__ import annotations

import socket
import time

import pytest

from rocketq import (
    Admin,
    ClientError,
    InvalidArgumentError,
    Message,
    MessageQueue,
    NotFoundError,
    Producer,
)
from rocketq.protocol.message import create_offset_msg_id


def test_queries(servers):
    servers.create_topic("Find", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        first = producer.send(Message("Find", b"old", keys=["order-1"]))
        time.sleep(1.1)
        cut = int(time.time() * 1000)
        second = producer.send(Message("Find", b"new", keys=["order-1", "x"]))
    assert servers.brokers[0].store.wait_dispatched()
    with Admin(servers.namesrv) as admin:
        assert admin.view_message(first.offset_msg_id).body == b"old"
        assert admin.query_message_by_unique_key("Find", second.msg_id).body == b"new"
        assert [m.body for m in admin.query_messages("Find", "order-1")] == [b"new", b"old"]
        assert [m.body for m in admin.query_messages("Find", "order-1", begin=cut)] == [b"new"]
        assert admin.query_messages("Find", "nope") == []
        mq = MessageQueue("Find", "broker-a", second.queue.queue_id)
        assert admin.search_offset(mq, cut) == second.queue_offset
        with pytest.raises(ClientError):
            admin.view_message("not-an-id")


def test_rocketmq5_ids_are_found_as_unique_ids(servers):
    # A RocketMQ 5 client's id (MessageIdCodec): "01" and 32 hex digits, sent as UNIQ_KEY.
    five = "01" + "0A1B2C3D4E5F" + "1234" + "00C0FFEE" + "0000002A"
    assert len(five) == 34
    servers.create_topic("Five", 2)
    with Producer("pg5", namesrv=servers.namesrv) as producer:
        sent = producer.send(Message("Five", b"from 5.x", properties={"UNIQ_KEY": five}))
    assert sent.msg_id == five
    assert servers.brokers[0].store.wait_dispatched()
    with Admin(servers.namesrv) as admin:
        assert admin.message_by_id(five).body == b"from 5.x"
        assert admin.message_by_id(five, "Five").offset_msg_id == sent.offset_msg_id
        with pytest.raises(NotFoundError, match="no message of Five"):
            admin.message_by_id("01" + "F" * 32, "Five")
        with pytest.raises(NotFoundError):  # an IPv6 host's id, of 56 digits: no such one
            admin.message_by_id("AB" * 28, "Five")
        for bad in ("not-an-id", "0" * 33, "0" * 40, "G" * 32):
            with pytest.raises(InvalidArgumentError, match="not a message id"):
                admin.message_by_id(bad)


def test_an_offset_id_of_an_address_outside_the_cluster_is_never_connected_to(servers):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    stranger = create_offset_msg_id(socket.inet_aton("127.0.0.1"), port, 0)
    servers.create_topic("Near", 1)
    with Producer("pg-near", namesrv=servers.namesrv) as producer:
        near = producer.send(Message("Near", b"here"))
    try:
        with Admin(servers.namesrv) as admin:
            with pytest.raises(NotFoundError, match=f"no broker at 127.0.0.1:{port} in this "
                                                    "cluster"):
                admin.view_message(stranger)
            # As a message id, it is looked up as a unique id instead, and not found.
            with pytest.raises(NotFoundError, match="no message of Near"):
                admin.message_by_id(stranger, "Near")
            with pytest.raises(InvalidArgumentError):
                admin.view_message("01" + "0" * 32)  # a 5.x id is no offset id
            assert admin.view_message(near.offset_msg_id).body == b"here"
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody came
    finally:
        listener.close()


def test_what_does_not_exist_raises_not_found(servers):
    with Admin(servers.namesrv) as admin:
        for ask in (lambda: admin.topic("NoSuchTopic"), lambda: admin.group("nobody"),
                    lambda: admin.topic_status("NoSuchTopic"),
                    lambda: admin.topic_route("NoSuchTopic"),
                    lambda: admin.delete_topic("NoSuchTopic"),
                    lambda: admin.query_messages("NoSuchTopic", "k"),
                    lambda: admin.broker_addresses("NoSuchCluster"),
                    lambda: admin.resend_dlq("nobody", "0" * 32)):
            with pytest.raises(NotFoundError):
                ask()
    assert issubclass(NotFoundError, ClientError)
