"""Ordered messages: sharding-key order across orderly consumers joining and leaving, queue
locks on the broker, and SUSPEND_CURRENT_QUEUE_A_MOMENT retrying without skipping."""

from __future__ import annotations

import collections
import threading
import time

from rocketq import ConsumeResult, Message, Producer, PushConsumer, select_by_hash

from ..conftest import wait_for

KEYS = [f"order-{i}" for i in range(12)]


class OrderRecorder:
    def __init__(self, name, log, lock, busy):
        self.name = name
        self.log = log
        self.lock = lock
        self.busy = busy  # queue -> consumer currently inside the listener for it

    def __call__(self, msgs):
        for m in msgs:
            queue = (m.broker_name, m.queue_id)
            with self.lock:
                other = self.busy.get(queue)
                assert other is None, f"queue {queue} consumed by {other} and {self.name}"
                self.busy[queue] = self.name
            try:
                key, seq = m.body.decode().split(":")
                time.sleep(0.002)
                with self.lock:
                    self.log.append((key, int(seq), self.name))
            finally:
                with self.lock:
                    self.busy.pop(queue, None)
        return ConsumeResult.SUCCESS


def orderly(servers, name, log, lock, busy):
    c = PushConsumer("orderly-g", namesrv=servers.namesrv, orderly=True, from_where="first",
                     rebalance_interval=1)
    c.subscribe("Ordered")
    c.register(OrderRecorder(name, log, lock, busy))
    return c


def test_order_kept_per_key_while_consumers_join_and_leave(servers):
    servers.create_topic("Ordered", 8)
    log: list[tuple[str, int, str]] = []
    lock = threading.Lock()
    busy: dict = {}
    consumers = [orderly(servers, f"c{i}", log, lock, busy) for i in range(3)]
    per_key = 40
    try:
        consumers[0].start()
        consumers[1].start()
        with Producer("pg", namesrv=servers.namesrv) as producer:
            for seq in range(per_key):
                if seq == per_key // 3:
                    consumers[2].start()  # one joins
                if seq == 2 * per_key // 3:
                    consumers[0].shutdown()  # one leaves
                for key in KEYS:
                    producer.send(Message("Ordered", f"{key}:{seq}".encode()),
                                  selector=select_by_hash, arg=key)

        def done():
            with lock:
                return {(k, s) for k, s, _ in log} >= {(k, s) for k in KEYS
                                                          for s in range(per_key)}

        assert wait_for(done, 60)
        with lock:
            entries = list(log)
        firsts = collections.defaultdict(list)
        for key, seq, _ in entries:
            if seq not in firsts[key]:
                firsts[key].append(seq)
        for key in KEYS:
            # Each key's messages were first consumed in the order they were sent.
            assert firsts[key] == list(range(per_key)), key
        names = {name for _, _, name in entries}
        assert {"c1", "c2"} <= names
    finally:
        for c in consumers:
            c.shutdown()


def test_suspend_retries_the_same_message_without_skipping(servers):
    servers.create_topic("Strict", 1)
    seen = []
    attempts = collections.Counter()

    def listener(msgs):
        m = msgs[0]
        attempts[m.body] += 1
        seen.append((m.body, m.reconsume_times))
        if m.body == b"1" and attempts[m.body] < 3:
            return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("strict-g", namesrv=servers.namesrv, orderly=True,
                            from_where="first", suspend_current_queue_time=0.1)
    consumer.subscribe("Strict")
    consumer.register(listener)
    try:
        consumer.start()
        with Producer("pg", namesrv=servers.namesrv) as producer:
            for i in range(4):
                producer.send(Message("Strict", b"%d" % i), selector=select_by_hash, arg=1)
        assert wait_for(lambda: len(seen) >= 6, 10)
        time.sleep(0.3)
        assert [b for b, _ in seen] == [b"0", b"1", b"1", b"1", b"2", b"3"]
        assert [t for b, t in seen if b == b"1"] == [0, 1, 2]
    finally:
        consumer.shutdown()


def test_broker_lock_belongs_to_one_client_at_a_time(servers):

    import orjson

    from rocketq.protocol.codes import RequestCode
    from rocketq.protocol.command import RemotingCommand
    from rocketq.remoting import RemotingClient

    broker = servers.brokers[0]
    mq = {"topic": "T", "brokerName": "broker-a", "queueId": 0}

    async def lock(client_id, code=RequestCode.LOCK_BATCH_MQ):
        c = RemotingClient()
        try:
            r = await c.invoke(broker.address, RemotingCommand.request(code, None, orjson.dumps(
                {"consumerGroup": "g", "clientId": client_id, "mqSet": [mq]})))
            return orjson.loads(r.body)["lockOKMQSet"] if r.body else r.code
        finally:
            await c.close()

    run = servers.call
    assert run(lock("a")) == [mq]
    assert run(lock("b")) == []          # held by a
    assert run(lock("a")) == [mq]        # a renews
    assert run(lock("b", RequestCode.UNLOCK_BATCH_MQ)) == 0  # b cannot unlock a's lock
    assert run(lock("b")) == []
    assert run(lock("a", RequestCode.UNLOCK_BATCH_MQ)) == 0
    assert run(lock("b")) == [mq]


def test_a_shutdown_mid_rebalance_unlocks_the_queue_it_had_locked(servers):
    """A consumer stopped while its rebalance has locked a queue but not yet taken it (here
    held in finding the offset to start from) releases that lock too: the next owner locks
    the queue at once instead of waiting out the broker's 60 s."""
    import asyncio

    import orjson

    from rocketq.protocol.codes import RequestCode
    from rocketq.protocol.command import RemotingCommand
    from rocketq.remoting import RemotingClient

    servers.create_topic("Held", 1)
    broker = servers.brokers[0]
    mq = {"topic": "Held", "brokerName": "broker-a", "queueId": 0}

    async def lock(client_id):
        c = RemotingClient()
        try:
            r = await c.invoke(broker.address, RemotingCommand.request(
                RequestCode.LOCK_BATCH_MQ, None, orjson.dumps(
                    {"consumerGroup": "held-g", "clientId": client_id, "mqSet": [mq]})))
            return orjson.loads(r.body)["lockOKMQSet"]
        finally:
            await c.close()

    consumer = PushConsumer("held-g", namesrv=servers.namesrv, orderly=True,
                            from_where="first", rebalance_interval=1)
    consumer.subscribe("Held")
    consumer.register(lambda msgs: ConsumeResult.SUCCESS)
    asked = threading.Event()

    async def never(mq):  # the rebalance waits here, the queue locked but not taken
        asked.set()
        await asyncio.Event().wait()

    consumer._async._start_offset = never
    try:
        consumer.start()
        assert asked.wait(10)
        assert servers.call(lock("someone-else")) == []  # the consumer holds it
        assert not consumer._async.owned
    finally:
        consumer.shutdown()
    assert servers.call(lock("someone-else")) == [mq]
