"""Queries through the client: by offset id, unique id, key and time, offset by time."""

from __future__ import annotations

import time

import pytest

from rocketq import Admin, ClientError, Message, MessageQueue, Producer


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
