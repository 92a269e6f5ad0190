"""Client auto-batching against a real broker: sends in flight together travel as batches, and
each message keeps its own result, its order within a queue, its retries and its errors."""

from __future__ import annotations

import asyncio

import pytest

from rocketq.aio import Message, MessageQueue, Producer
from rocketq.broker.topics import TopicConfig
from rocketq.client.errors import BrokerError, MessageValidationError
from rocketq.protocol import RequestCode, ResponseCode
from rocketq.protocol.message import decode_offset_msg_id

from ..conftest import run_async


async def with_topic(cluster, topic: str, queues: int = 4, **conf):
    if not cluster.namesrvs:
        await cluster.start_namesrv()
    broker = await cluster.start_broker(**conf)
    broker.topics.update(TopicConfig(topic, queues, queues))
    await broker.register_all()
    return broker


def stored(broker, topic: str, queue_id: int):
    assert broker.store.wait_dispatched()
    with broker.store.get_messages(topic, queue_id, 0, 10_000) as found:
        return found.decode(decompress=False)


def count_requests(producer) -> list[int]:
    """The send requests the producer makes, by code, in order (a spy on its remoting
    client)."""
    codes: list[int] = []
    remoting = producer.instance.remoting
    invoke = remoting.invoke

    async def counted(addr, cmd, *args, **kwargs):
        if cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            codes.append(cmd.code)
        return await invoke(addr, cmd, *args, **kwargs)

    remoting.invoke = counted
    return codes


def test_sends_in_flight_together_go_as_batches_with_a_result_each(cluster):
    async def main():
        try:
            broker = await with_topic(cluster, "AB")
            async with Producer("pg", namesrv=cluster.namesrv, auto_batch=True) as producer:
                await producer.send(Message("AB", b"warm"))  # routes known
                codes = count_requests(producer)
                messages = [Message("AB", b"m%03d" % i, tags="t", keys=[f"k{i}"])
                            for i in range(300)]
                results = await asyncio.gather(*(producer.send(m) for m in messages))
                # A lone send goes on its own, at once, as an ordinary send.
                alone = await producer.send(Message("AB", b"alone"))
            batches = codes.count(RequestCode.SEND_BATCH_MESSAGE)
            assert 1 <= batches and len(codes) < 30, codes
            assert codes[-1] == RequestCode.SEND_MESSAGE_V2
            assert len({r.msg_id for r in results}) == 300
            by_queue = {q: {m.queue_offset: m for m in stored(broker, "AB", q)}
                        for q in range(4)}
            for message, result in zip(messages, results, strict=True):
                record = by_queue[result.queue.queue_id][result.queue_offset]
                assert record.body == message.body and record.tags == "t"
                assert record.properties["UNIQ_KEY"] == result.msg_id
                assert decode_offset_msg_id(result.offset_msg_id)[2] == record.commitlog_offset
            assert stored(broker, "AB", alone.queue.queue_id)[alone.queue_offset].body \
                == b"alone"
        finally:
            await cluster.stop()
    run_async(main())


def test_a_named_queue_stores_messages_in_the_order_they_were_sent(cluster):
    async def main():
        try:
            broker = await with_topic(cluster, "Ordered", 2)
            mq = MessageQueue("Ordered", "broker-a", 1)
            async with Producer("pg", namesrv=cluster.namesrv, auto_batch=True,
                                batch_max_bytes=2048) as producer:
                codes = count_requests(producer)
                sends = [asyncio.ensure_future(producer.send(Message("Ordered", b"%04d" % i),
                                                             queue=mq))
                         for i in range(400)]
                results = await asyncio.gather(*sends)
            assert codes.count(RequestCode.SEND_BATCH_MESSAGE) > 1  # several batches
            assert [r.queue_offset for r in results] == list(range(400))
            assert [m.body for m in stored(broker, "Ordered", 1)] == \
                [b"%04d" % i for i in range(400)]
            assert stored(broker, "Ordered", 0) == []
        finally:
            await cluster.stop()
    run_async(main())


def test_a_message_refused_inside_a_batch_fails_only_itself(cluster):
    async def main():
        try:
            # The broker stores bodies up to 1000 bytes; the client would send 4 MiB.
            broker = await with_topic(cluster, "Strict", 1, maxMessageSize=1000)
            async with Producer("pg", namesrv=cluster.namesrv, auto_batch=True) as producer:
                await producer.send(Message("Strict", b"warm"))
                codes = count_requests(producer)
                bodies = [b"ok%02d" % i for i in range(20)]
                bodies.insert(10, b"x" * 1500)
                outcomes = await asyncio.gather(
                    *(producer.send(Message("Strict", b)) for b in bodies),
                    return_exceptions=True)
            assert codes[0] == RequestCode.SEND_BATCH_MESSAGE  # refused as a whole, then
            assert codes[1:] == [RequestCode.SEND_MESSAGE_V2] * 21  # one by one
            refused = outcomes.pop(10)
            assert isinstance(refused, BrokerError)
            assert refused.code == ResponseCode.MESSAGE_ILLEGAL
            assert all(not isinstance(o, Exception) for o in outcomes), outcomes
            assert [m.body for m in stored(broker, "Strict", 0)] == \
                [b"warm", *[b for b in bodies if len(b) < 1000]]
            # A message the client itself refuses fails at once, and alone.
            with pytest.raises(MessageValidationError):
                await producer.send(Message("Strict", b""))
        finally:
            await cluster.stop()
    run_async(main())


def test_a_batch_whose_broker_is_gone_is_retried_on_another(cluster):
    async def main():
        try:
            await with_topic(cluster, "Spread", 2)
            second = await cluster.start_broker("broker-b")
            second.topics.update(TopicConfig("Spread", 2, 2))
            await second.register_all()
            async with Producer("pg", namesrv=cluster.namesrv, auto_batch=True,
                                latency_fault_tolerance=True) as producer:
                seen = {(await producer.send(Message("Spread", b"w"))).queue.broker_name
                        for _ in range(8)}
                assert seen == {"broker-a", "broker-b"}
                await second.stop()  # its route is still cached by the producer
                cluster.brokers.remove(second)
                for _ in range(3):
                    results = await asyncio.gather(
                        *(producer.send(Message("Spread", b"y")) for _ in range(50)))
                    assert {r.queue.broker_name for r in results} == {"broker-a"}
        finally:
            await cluster.stop()
    run_async(main())


def test_what_all_lanes_hold_stays_under_total_batch_max_bytes(cluster):
    async def main():
        try:
            broker = await with_topic(cluster, "Bounded", 4)
            async with Producer("pg", namesrv=cluster.namesrv, auto_batch=True,
                                batch_max_bytes=1024, total_batch_max_bytes=2048
                                ) as producer:
                accumulator = producer.accumulator
                peak = 0
                send_elements = producer._send_elements

                async def watched(*args, **kwargs):
                    nonlocal peak
                    peak = max(peak, accumulator.held)
                    return await send_elements(*args, **kwargs)

                producer._send_elements = watched
                results = await asyncio.gather(
                    *(producer.send(Message("Bounded", b"z" * 300)) for _ in range(60)))
            assert 0 < peak <= 2048
            assert len(results) == 60 and accumulator.held == 0
            assert sum(len(stored(broker, "Bounded", q)) for q in range(4)) == 60
        finally:
            await cluster.stop()
    run_async(main())


def test_sends_not_fit_for_a_batch_go_alone(cluster):
    async def main():
        try:
            await with_topic(cluster, "Mixed", 1)
            async with Producer("pg", namesrv=cluster.namesrv, auto_batch=True,
                                compress_over=1024) as producer:
                await producer.send(Message("Mixed", b"warm"))
                codes = count_requests(producer)
                await asyncio.gather(
                    producer.send(Message("Mixed", b"d", delay_level=1)),
                    producer.send(Message("Mixed", b"c" * 2000)),  # compressed
                    producer.send(Message("Mixed", b"t", properties={
                        "TIMER_DELAY_SEC": "5"})))
            assert codes == [RequestCode.SEND_MESSAGE_V2] * 3
        finally:
            await cluster.stop()
    run_async(main())


def test_shutdown_sends_what_was_gathered(cluster):
    async def main():
        try:
            broker = await with_topic(cluster, "Drain", 1)
            producer = Producer("pg", namesrv=cluster.namesrv, auto_batch=True,
                                batch_max_delay_ms=10_000)
            await producer.start()
            first = asyncio.ensure_future(producer.send(Message("Drain", b"a")))
            await asyncio.sleep(0)
            rest = [asyncio.ensure_future(producer.send(Message("Drain", b"b%d" % i)))
                    for i in range(10)]
            await asyncio.sleep(0)
            await producer.shutdown()
            assert (await first).queue_offset == 0
            assert [(await r).queue_offset for r in rest] == list(range(1, 11))
            assert len(stored(broker, "Drain", 0)) == 11
        finally:
            await cluster.stop()
    run_async(main())
