"""A send while the topic's broker group has no master (its master stopped; in controller mode,
a failover in progress): the producer says so, not "No route info of this topic", and waits
for a master within the send timeout rather than failing at once."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from rocketq import Admin, ClientError, Message, NoMasterError, Producer, SendStatus
from rocketq.protocol.command import encode
from rocketq.remoting import ConnectFailedError

from ..conftest import fetch_route, wait_for
from ..namesrv.test_namesrv import register_cmd


def master_and_slave(st):
    """broker-a as a master and its slave (brokerId 1), with the topic Failover."""
    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    st.start_broker("broker-a-slave", brokerName="broker-a", brokerId=1, brokerRole="SLAVE",
                    haMasterAddress=master.ha_server.address, haSendHeartbeatInterval=200)
    st.create_topic("Failover", 2)
    return master


def masterless(st) -> bool:
    """Whether the NameServer's route of Failover has broker-a without a master."""
    route = fetch_route(st.namesrv, "Failover")
    return route is not None and route.masterless() == ["broker-a"]


def test_a_send_without_a_master_says_so_after_waiting_for_one(st, caplog):
    master = master_and_slave(st)
    with Producer("pg", namesrv=st.namesrv, send_timeout=1.5) as producer:
        assert producer.send(Message("Failover", b"before")).status is SendStatus.SEND_OK
        st.stop_broker(master)
        assert wait_for(lambda: masterless(st), 10)
        began = time.monotonic()
        with caplog.at_level(logging.INFO, logger="rocketq.client"):
            with pytest.raises(NoMasterError) as raised:
                producer.send(Message("Failover", b"during"))
        waited = time.monotonic() - began
    message = str(raised.value)
    assert "broker group 'broker-a' of topic Failover has no master right now (a failover may " \
           "be in progress)" in message, message
    assert "No route info" not in message and "retried" in message
    assert raised.value.brokers == ["broker-a"] and isinstance(raised.value, ClientError)
    assert 1.0 <= waited < 6, waited  # it waited for a master, within the send timeout
    assert any("has no master right now" in r.getMessage() and "will be retried" in
               r.getMessage() for r in caplog.records)


def test_a_send_waiting_for_a_master_goes_through_when_one_is_back(st):
    master = master_and_slave(st)
    port = master.config.listenPort
    with Producer("pg", namesrv=st.namesrv, send_timeout=20) as producer:
        producer.send(Message("Failover", b"before"))
        st.stop_broker(master)
        assert wait_for(lambda: masterless(st), 10)
        results: list[object] = []
        sender = threading.Thread(target=lambda: results.append(
            producer.send(Message("Failover", b"during"))), daemon=True)
        sender.start()
        time.sleep(1.0)
        assert not results  # still waiting for a master
        st.start_broker("broker-a", listenPort=port, haSendHeartbeatInterval=200)
        sender.join(15)
        assert not sender.is_alive()
        assert results and results[0].status is SendStatus.SEND_OK
        assert results[0].queue.broker_name == "broker-a"


def test_every_topic_of_a_masterless_group_waits_for_a_master(st):
    """Once one topic's send has found the group without a master, a send to another topic
    of that group waits for a master too (within its timeout) instead of failing at once."""
    master = master_and_slave(st)
    st.create_topic("Other", 2)
    with Producer("pg", namesrv=st.namesrv, send_timeout=1.5) as producer:
        for topic in ("Failover", "Other"):
            assert producer.send(Message(topic, b"before")).status is SendStatus.SEND_OK
        st.stop_broker(master)
        assert wait_for(lambda: masterless(st), 10)
        with pytest.raises(NoMasterError):
            producer.send(Message("Failover", b"during"))
        began = time.monotonic()
        with pytest.raises(NoMasterError) as raised:
            producer.send(Message("Other", b"during"))
        waited = time.monotonic() - began
    assert 1.0 <= waited < 6, waited
    assert "retried until its timeout" in str(raised.value)


def test_a_send_whose_master_refuses_connections_waits_then_says_no_master(st):
    """The route still names a master whose process is gone (a NameServer not told yet, as
    right after a SIGKILL): the send does not fail at once with ConnectFailedError after
    spending its retries on the dead address; it asks for the route again and again within
    its timeout, then raises NoMasterError."""
    master = master_and_slave(st)
    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    host, port = st.namesrv.rsplit(":", 1)
    # Its registration's connection stays open: the NameServer keeps the entry.
    with socket.create_connection((host, int(port)), timeout=5) as registration, \
            Producer("pg", namesrv=st.namesrv, send_timeout=1.5) as producer:
        assert producer.send(Message("Failover", b"before")).status is SendStatus.SEND_OK
        st.stop_broker(master)
        assert wait_for(lambda: masterless(st), 10)
        registration.sendall(encode(register_cmd(
            "broker-a", dead, {"Failover": {"topicName": "Failover", "readQueueNums": 2,
                                            "writeQueueNums": 2, "perm": 6}})))
        assert wait_for(lambda: fetch_route(st.namesrv, "Failover").broker_addrs[
            "broker-a"].get(0) == dead, 10)
        began = time.monotonic()
        with pytest.raises(NoMasterError) as raised:
            producer.send(Message("Failover", b"during"))
        waited = time.monotonic() - began
    assert 1.0 <= waited < 6, waited  # it waited for a new master, within its timeout
    assert raised.value.brokers == ["broker-a"]
    message = str(raised.value)
    assert dead in message and "refused the connection" in message, message
    assert isinstance(raised.value.__cause__, ConnectFailedError)


def test_a_send_that_may_have_landed_is_looked_up_before_it_is_sent_again(st):
    """A send whose connection broke after its request went (its master killed) is looked up
    by its unique id at the group's master before it is sent again: one that was stored
    is answered from there (RocketMQ would store it twice); one that was not is sent."""
    st.start_broker("broker-a")
    st.create_topic("Landed", 2)
    with Producer("pg", namesrv=st.namesrv) as producer, Admin(st.namesrv) as admin:
        inner = producer._async
        stored = Message("Landed", b"stored")
        first = producer.send(stored)
        assert wait_for(lambda: admin.query_messages("Landed", first.msg_id, unique=True), 10)

        def again(message):
            body, sysflag, props = inner._prepare(message)
            return producer._loop.run(inner._send_prepared(
                message, body, sysflag, props, None, None, None, 3.0, 2, False,
                maybe_sent=True))

        found = again(stored)
        assert (found.msg_id, found.offset_msg_id, found.queue, found.queue_offset) == (
            first.msg_id, first.offset_msg_id, first.queue, first.queue_offset)
        fresh = Message("Landed", b"never stored")
        sent = again(fresh)
        assert sent.status is SendStatus.SEND_OK and sent.msg_id == fresh.properties["UNIQ_KEY"]
        assert wait_for(lambda: admin.query_messages("Landed", sent.msg_id, unique=True), 10)
        assert sum(q.max_offset for q in admin.topic_status("Landed")) == 2  # each once
