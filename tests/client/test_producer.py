"""The producer against a real broker: every send form, validation, compression, retries."""

from __future__ import annotations

import threading
import zlib

import pytest

from rocketq import (
    ClientError,
    Message,
    MessageQueue,
    MessageValidationError,
    Producer,
    PullConsumer,
    SendStatus,
    select_by_hash,
)
from rocketq.protocol.message import decode_offset_msg_id

from ..conftest import wait_for


def read_queue(st, topic, queue_id, broker=None):
    broker = broker or st.brokers[0]
    assert broker.store.wait_dispatched()
    with broker.store.get_messages(topic, queue_id, 0, 1000) as found:
        return found.decode(decompress=False)


def test_send_forms_and_results(servers):
    servers.create_topic("Orders", 4)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        r = producer.send(Message("Orders", b"hello", tags="paid", keys=["order-17", "k2"],
                                  properties={"region": "eu"}))
        assert r.status is SendStatus.SEND_OK
        assert len(r.msg_id) == 32 and r.transaction_id == r.msg_id
        host, port, offset = decode_offset_msg_id(r.offset_msg_id)
        assert (host, port) == ("127.0.0.1", servers.brokers[0].config.listenPort)
        assert r.queue.topic == "Orders" and r.queue.broker_name == "broker-a"
        assert r.queue_offset == 0
        stored = read_queue(servers, "Orders", r.queue.queue_id)[0]
        assert stored.body == b"hello" and stored.tags == "paid"
        assert stored.keys == ["order-17", "k2"] and stored.properties["region"] == "eu"
        assert stored.properties["UNIQ_KEY"] == r.msg_id and stored.commitlog_offset == offset

        done = threading.Event()
        seen = []
        future = producer.send_async(Message("Orders", b"async"),
                                     lambda f: (seen.append(f.result()), done.set()))
        assert future.result(5).status is SendStatus.SEND_OK
        assert done.wait(5) and seen[0] is future.result()

        producer.send_oneway(Message("Orders", b"oneway"))
        mq = MessageQueue("Orders", "broker-a", 2)
        chosen = producer.send(Message("Orders", b"chosen"), queue=mq)
        assert chosen.queue == mq

        # Ordered messages: one order id always lands in one queue.
        picked = {producer.send(Message("Orders", b"o"), selector=select_by_hash,
                                arg="order-42").queue for _ in range(5)}
        assert len(picked) == 1

        batch = producer.send_batch([Message("Orders", b"b%d" % i, tags="t") for i in range(3)],
                                    queue=MessageQueue("Orders", "broker-a", 3))
        assert len(batch.msg_id.split(",")) == 3 and batch.queue.queue_id == 3
        assert [m.body for m in read_queue(servers, "Orders", 3)] == [b"b0", b"b1", b"b2"]
        ids = {r.msg_id, chosen.msg_id, future.result().msg_id}
        assert len(ids) == 3  # unique ids
        assert wait_for(lambda: any(m.body == b"oneway" for q in range(4)
                                    for m in read_queue(servers, "Orders", q)))


def test_validation_errors_send_nothing(servers):
    with Producer("pg", namesrv=servers.namesrv, max_message_size=1000) as producer:
        for bad, match in [(Message("bad topic", b"x"), "illegal"),
                           (Message("t" * 128, b"x"), "127"),
                           (Message("T", b""), "empty"),
                           (Message("T", b"x" * 1001), "1000"),
                           (Message("TBW102", b"x"), "reserved")]:
            with pytest.raises(MessageValidationError, match=match):
                producer.send(bad)
        with pytest.raises(MessageValidationError):
            producer.send_batch([Message("A", b"x"), Message("B", b"y")])
        with pytest.raises(ValueError, match="separator"):
            Message("T", b"x", properties={"k": "bad\x01value"})
    assert servers.brokers[0].stats.put_total == 0


def test_large_bodies_are_compressed_and_consumers_see_them_plain(servers):
    servers.create_topic("Big", 1)
    body = b"0123456789" * 1000
    with Producer("pg", namesrv=servers.namesrv) as producer:
        producer.send(Message("Big", body))
        producer.send(Message("Big", b"small"))
    stored = read_queue(servers, "Big", 0)
    assert stored[0].sysflag & 1 and zlib.decompress(stored[0].body) == body
    assert not stored[1].sysflag & 1
    with PullConsumer("cg", namesrv=servers.namesrv, from_where="first") as consumer:
        consumer.subscribe("Big")
        consumer.start()
        got = []
        wait_for(lambda: got.extend(consumer.poll(0.5)) or len(got) >= 2)
        assert [m.body for m in got] == [body, b"small"]


def test_auto_created_topic_and_unknown_topic_without_auto_create(servers):
    with Producer("pg", namesrv=servers.namesrv) as producer:
        r = producer.send(Message("Brand-New", b"x"))
        assert r.status is SendStatus.SEND_OK
        assert servers.brokers[0].topics.get("Brand-New").write_queue_nums == 4


def test_retries_on_another_broker_when_one_is_gone(servers):
    second = servers.start_broker("broker-b")
    servers.create_topic("Spread", 2)
    with Producer("pg", namesrv=servers.namesrv, latency_fault_tolerance=True) as producer:
        brokers = {producer.send(Message("Spread", b"x")).queue.broker_name for _ in range(8)}
        assert brokers == {"broker-a", "broker-b"}  # routes spread over both
        # Stop broker-b behind the producer's back: its cached route still lists it.
        servers.stop_broker(second)
        results = [producer.send(Message("Spread", b"y")) for _ in range(8)]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert {r.queue.broker_name for r in results} == {"broker-a"}


def test_no_route_at_all_is_a_clear_error(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        with Producer("pg", namesrv=st.namesrv) as producer:
            with pytest.raises(ClientError, match="No route info"):
                producer.send(Message("T", b"x"))
    finally:
        st.stop()


def test_sync_sends_go_from_the_callers_thread_once_the_route_is_known(servers):
    servers.create_topic("Direct", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        results = [producer.send(Message("Direct", b"m%d" % i, tags="t")) for i in range(20)]
        direct = producer._direct
        assert len(direct._sockets) == 1  # this thread's own connection to the broker
        for i, r in enumerate(results):
            assert r.status is SendStatus.SEND_OK
            stored = read_queue(servers, "Direct", r.queue.queue_id)[r.queue_offset]
            assert stored.body == b"m%d" % i and stored.properties["UNIQ_KEY"] == r.msg_id
            assert decode_offset_msg_id(r.offset_msg_id)[2] == stored.commitlog_offset
        # A broken connection: the send goes through the loop instead, and succeeds.
        direct.close()
        r = producer.send(Message("Direct", b"after"))
        assert read_queue(servers, "Direct", r.queue.queue_id)[r.queue_offset].body == b"after"
        assert producer.send(Message("Direct", b"again")).status is SendStatus.SEND_OK
        assert len(direct._sockets) == 1  # connected afresh
        # A refusal is the same error as on the loop's path.
        servers.brokers[0].store.config.maxMessageSize = 10
        servers.brokers[0].store.reload_config()
        with pytest.raises(ClientError, match="maxMessageSize"):
            producer.send(Message("Direct", b"x" * 100))


def test_each_topic_has_its_own_round_robin(servers):
    """Sends that alternate between topics still use every queue of each, in turn
    (RocketMQ keeps the next queue per topic)."""
    servers.create_topic("Four", 4)
    servers.create_topic("Two", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        four, two = [], []
        for i in range(12):
            four.append(producer.send(Message("Four", b"f%d" % i)).queue.queue_id)
            if i % 3 == 2:
                two.append(producer.send(Message("Two", b"t%d" % i)).queue.queue_id)
    assert sorted(four) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert sorted(two) == [0, 0, 1, 1]
