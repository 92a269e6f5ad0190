"""Push and pull consumers against real brokers: clustering with rebalance, broadcasting,
offsets across restarts, seeks, retries, several NameServers and brokers."""

from __future__ import annotations

import asyncio
import collections
import threading
import time

import pytest

from rocketq import (
    ConsumeResult,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from rocketq.aio import Producer as AsyncProducer
from rocketq.aio import PushConsumer as AsyncPushConsumer

from ..conftest import wait_for


class Collector:
    """A listener that records what it got, thread-safely."""

    def __init__(self, fail_first=0) -> None:
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []
        self.messages = []
        self.fail_first = fail_first

    def __call__(self, msgs):
        with self.lock:
            for m in msgs:
                if self.fail_first and m.reconsume_times < self.fail_first:
                    return ConsumeResult.RECONSUME_LATER
            self.messages.extend(msgs)
            self.bodies.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(self.bodies)


def owned(consumer, topic):
    return [q for q in consumer.assigned_queues() if q.topic == topic]


def push(servers, group, topic, collector, **kw):
    consumer = PushConsumer(group, namesrv=servers.namesrv, rebalance_interval=2, **kw)
    consumer.subscribe(topic, kw.pop("expression", "*") if "expression" in kw else "*")
    consumer.register(collector)
    return consumer


def send_many(servers, topic, n, prefix=b"m", **kw):
    with Producer("pg", namesrv=servers.namesrv) as producer:
        return [producer.send(Message(topic, prefix + b"%d" % i, **kw)) for i in range(n)]


def test_clustering_three_consumers_and_rebalance_when_one_leaves(servers):
    servers.create_topic("Orders", 8)
    collectors = [Collector() for _ in range(3)]
    consumers = [push(servers, "cg", "Orders", c, from_where="first", persist_interval=1)
                 for c in collectors]
    try:
        for c in consumers:
            c.start()
        def settled(members, sizes):
            views = [owned(c, "Orders") for c in members]
            queues = [q for v in views for q in v]
            # Every queue has exactly one owner, shared as the strategy says.
            return sorted(map(len, views)) == sizes and len(set(queues)) == 8

        assert wait_for(lambda: settled(consumers, [2, 3, 3]), 15)
        send_many(servers, "Orders", 200)
        first = {b"m%d" % i for i in range(200)}
        assert wait_for(lambda: {b for c in collectors for b in c.bodies} >= first, 20)
        assert all(c.count() > 0 for c in collectors)  # the work was shared
        # Offsets reach the broker with pulls and every persist_interval; a queue that changes
        # owner before its offset is there is read again (at-least-once). Once every offset is
        # there, a member leaving must cause no duplicates at all.
        broker = servers.brokers[0]
        assert wait_for(lambda: sum(broker.offsets.table("cg", "Orders").values()) == 200, 10)
        consumers[2].shutdown()
        assert wait_for(lambda: settled(consumers[:2], [4, 4]), 15)
        send_many(servers, "Orders", 200, prefix=b"n")
        expected = {b"m%d" % i for i in range(200)} | {b"n%d" % i for i in range(200)}
        assert wait_for(lambda: {b for c in collectors for b in c.bodies} >= expected, 20)
        everything = [b for c in collectors for b in c.bodies]
        assert set(everything) == expected  # nothing lost
        duplicates = len(everything) - len(set(everything))
        assert duplicates == 0
    finally:
        for c in consumers:
            c.shutdown()


def test_broadcasting_every_consumer_gets_every_message(servers, tmp_path):
    servers.create_topic("News", 4)
    collectors = [Collector(), Collector()]
    consumers = [push(servers, "bg", "News", c, model="broadcasting", from_where="first",
                      offset_store_dir=str(tmp_path / f"offsets{i}"))
                 for i, c in enumerate(collectors)]
    try:
        for c in consumers:
            c.start()
        assert wait_for(lambda: all(len(owned(c, "News")) == 4 for c in consumers))
        send_many(servers, "News", 50)
        assert wait_for(lambda: all(c.count() >= 50 for c in collectors), 15)
        assert all(sorted(c.bodies) == sorted(b"m%d" % i for i in range(50))
                   for c in collectors)
    finally:
        for c in consumers:
            c.shutdown()
    files = list(tmp_path.glob("offsets*/**/offsets.json"))
    assert len(files) == 2  # broadcasting offsets live in local files


def test_tag_filter_and_received_fields(servers):
    servers.create_topic("Tagged", 2)
    collector = Collector()
    consumer = PushConsumer("tg", namesrv=servers.namesrv, from_where="first")
    consumer.subscribe("Tagged", "paid || refunded")
    consumer.register(collector)
    try:
        consumer.start()
        with Producer("pg", namesrv=servers.namesrv) as producer:
            sent = {}
            for i, tag in enumerate(["paid", "new", "refunded", "paid", None]):
                r = producer.send(Message("Tagged", b"%d" % i, tags=tag, keys=[f"k{i}"],
                                          properties={"n": str(i)}))
                sent[r.msg_id] = r
        assert wait_for(lambda: collector.count() >= 3)
        time.sleep(0.3)
        assert sorted(collector.bodies) == [b"0", b"2", b"3"]
        m = collector.messages[0]
        r = sent[m.msg_id]
        assert m.topic == "Tagged" and m.broker_name == "broker-a"
        assert m.offset_msg_id == r.offset_msg_id and m.queue_id == r.queue.queue_id
        assert m.queue_offset == r.queue_offset and m.keys == [f"k{m.body.decode()}"]
        assert m.properties["n"] == m.body.decode() and m.reconsume_times == 0
        assert m.born_host[0] == "127.0.0.1" and m.store_timestamp >= m.born_timestamp - 5000
        assert m.commitlog_offset >= 0
    finally:
        consumer.shutdown()


def test_offsets_survive_consumer_and_broker_restart(servers):
    servers.create_topic("Durable", 2)
    send_many(servers, "Durable", 20)
    first = Collector()
    consumer = push(servers, "dg", "Durable", first, from_where="first")
    consumer.start()
    assert wait_for(lambda: first.count() >= 20)
    consumer.shutdown()  # commits its offsets
    broker = servers.brokers[0]
    servers.stop_broker(broker)
    servers.start_broker("broker-a")  # same store directory
    send_many(servers, "Durable", 10, prefix=b"after")
    second = Collector()
    consumer = push(servers, "dg", "Durable", second, from_where="first")
    try:
        consumer.start()
        assert wait_for(lambda: second.count() >= 10)
        time.sleep(0.5)
        assert sorted(second.bodies) == sorted(b"after%d" % i for i in range(10))
    finally:
        consumer.shutdown()


def test_from_last_skips_old_messages(servers):
    servers.create_topic("Young", 1)
    # Enough history that the queue is not "young" any more is not needed: a group with a
    # committed offset of its own starts there; a new group on "last" asks for the max offset.
    send_many(servers, "Young", 5)
    broker = servers.brokers[0]
    broker.offsets.commit("lg", "Young", 0, 5)
    collector = Collector()
    consumer = push(servers, "lg", "Young", collector, from_where="last")
    try:
        consumer.start()
        assert wait_for(lambda: len(owned(consumer, "Young")) >= 1)
        send_many(servers, "Young", 3, prefix=b"new")
        assert wait_for(lambda: collector.count() >= 3)
        time.sleep(0.3)
        assert sorted(collector.bodies) == [b"new0", b"new1", b"new2"]
    finally:
        consumer.shutdown()


def test_failed_messages_come_back(servers):
    servers.create_topic("Flaky", 1)
    collector = Collector(fail_first=1)
    consumer = push(servers, "fg", "Flaky", collector, from_where="first")
    try:
        consumer.start()
        send_many(servers, "Flaky", 3)
        assert wait_for(lambda: collector.count() >= 3, 20)
        assert sorted(collector.bodies) == [b"m0", b"m1", b"m2"]
        assert all(m.reconsume_times >= 1 for m in collector.messages)
        assert all(m.topic == "Flaky" for m in collector.messages)  # not %RETRY%fg
    finally:
        consumer.shutdown()




def test_pull_consumer_subscribe_seek_commit(servers):
    servers.create_topic("Pulled", 2)
    results = send_many(servers, "Pulled", 10)
    with PullConsumer("pc", namesrv=servers.namesrv, from_where="first",
                      auto_commit=False) as consumer:
        consumer.subscribe("Pulled")
        consumer.start()
        got = []
        assert wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 10)
        assert sorted(m.body for m in got) == sorted(b"m%d" % i for i in range(10))
        assert len(consumer.assignment()) == 2
        mq = results[0].queue
        consumer.seek(mq, 0)
        again = []
        assert wait_for(lambda: again.extend(consumer.poll(0.2)) or len(again) >= 1)
        assert all(m.queue == mq for m in again)
        consumer.commit()
        assert consumer.committed(mq) == max(m.queue_offset for m in again) + 1
        consumer.seek_to_end(mq)
        assert consumer.poll(0.3) == []


def test_pull_consumer_assign_mode(servers):
    servers.create_topic("Assigned", 4)
    send_many(servers, "Assigned", 20)
    with PullConsumer("ac", namesrv=servers.namesrv, from_where="first") as consumer:
        queues = consumer.fetch_queues("Assigned")
        assert len(queues) == 4
        consumer.assign(queues[:2])
        consumer.start()
        got = []
        wait_for(lambda: got.extend(consumer.poll(0.2)) or False, 1.5)
        assert got and {m.queue for m in got} <= set(queues[:2])
        per_queue = collections.Counter(m.queue_id for m in got)
        assert sum(per_queue.values()) == 10  # round-robin sends: 5 per queue


def test_two_namesrvs_two_brokers_many_clients(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        st.start_namesrv()
        st.start_broker("broker-a")
        st.start_broker("broker-b")
        st.create_topic("Wide", 2)
        for ns in st.namesrvs:  # every broker registered with every NameServer
            route = ns.routes.route("Wide")
            assert sorted(q["brokerName"] for q in route["queueDatas"]) == ["broker-a",
                                                                             "broker-b"]
        collectors = [Collector(), Collector()]
        consumers = [push(st, "wg", "Wide", c, from_where="first") for c in collectors]
        for c in consumers:
            c.start()
        producers = [Producer(f"pg{i}", namesrv=st.namesrv).start() for i in range(3)]
        try:
            def produce(p, n):
                for i in range(n):
                    p.send(Message("Wide", f"{p.group}-{i}".encode()))

            threads = [threading.Thread(target=produce, args=(p, 40)) for p in producers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            def unique():
                return {b for c in collectors for b in c.bodies}

            # Duplicates may occur while the two consumers settle; nothing may be missing.
            assert wait_for(lambda: len(unique()) >= 120, 20)
            assert unique() == {f"pg{p}-{i}".encode() for p in range(3) for i in range(40)}
            brokers = {m.broker_name for c in collectors for m in c.messages}
            assert brokers == {"broker-a", "broker-b"}
        finally:
            for p in producers:
                p.shutdown()
            for c in consumers:
                c.shutdown()
    finally:
        st.stop()


def test_asyncio_api(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    st.start_namesrv()
    st.start_broker()
    st.create_topic("Aio", 2)

    async def main():
        got = []
        done = asyncio.Event()

        async def listener(msgs):  # a coroutine listener runs on the loop
            got.extend(m.body for m in msgs)
            if len(got) >= 10:
                done.set()
            return ConsumeResult.SUCCESS

        consumer = AsyncPushConsumer("aiog", namesrv=st.namesrv, from_where="first")
        consumer.subscribe("Aio")
        consumer.register(listener)
        await consumer.start()
        async with AsyncProducer("pg", namesrv=st.namesrv) as producer:
            results = await asyncio.gather(*(producer.send(Message("Aio", b"%d" % i))
                                             for i in range(10)))
            assert len({r.msg_id for r in results}) == 10
        await asyncio.wait_for(done.wait(), 10)
        await consumer.shutdown()
        return got

    try:
        got = asyncio.run(main())
        assert sorted(got) == sorted(b"%d" % i for i in range(10))
    finally:
        st.stop()


@pytest.mark.parametrize("bad", [dict(model="cluster"), dict(from_where="middle"),
                                 dict(consume_thread_min=5, consume_thread_max=2)])
def test_consumer_options_are_checked(bad):
    with pytest.raises(ValueError):
        PushConsumer("g", namesrv="127.0.0.1:1", **bad)


def test_message_queue_is_orderable_and_printable():
    a, b = MessageQueue("T", "a", 1), MessageQueue("T", "a", 2)
    assert sorted([b, a]) == [a, b] and str(a) == "T@a:1"


def test_flow_control_caps_messages_held_per_queue(servers):
    servers.create_topic("Slow", 1)
    send_many(servers, "Slow", 200)
    release = threading.Event()
    held = []

    def slow(msgs):
        release.wait(10)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("slowg", namesrv=servers.namesrv, from_where="first",
                            pull_threshold_for_queue=40, pull_batch_size=16,
                            consume_thread_min=2, consume_thread_max=2)
    consumer.subscribe("Slow")
    consumer.register(slow)
    try:
        consumer.start()
        pq_of = consumer._async.process_queues
        assert wait_for(lambda: any(q.topic == "Slow" for q in pq_of))
        time.sleep(1.0)
        held = [pq.count for q, pq in pq_of.items() if q.topic == "Slow"]
        # The pulls stopped once the queue held its threshold (plus one batch in flight).
        assert held and 0 < held[0] <= 40 + 16
    finally:
        release.set()
        consumer.shutdown()


def test_a_topic_created_after_the_consumer_starts_is_consumed_within_seconds(servers):
    # The consumer finds no route at start; its next rebalance is 20 s away, but a missing
    # route is looked for again after a second (and the group's retry topic, registered by
    # the broker just after the first heartbeat, is the same case).
    collector = Collector()
    consumer = PushConsumer("late-g", namesrv=servers.namesrv, from_where="first")
    consumer.subscribe("LateTopic")
    consumer.register(collector)
    try:
        consumer.start()
        time.sleep(0.5)
        servers.create_topic("LateTopic", 2)
        send_many(servers, "LateTopic", 4)
        assert wait_for(lambda: collector.count() >= 4, 8)
        assert sorted(collector.bodies) == [b"m0", b"m1", b"m2", b"m3"]
    finally:
        consumer.shutdown()
