"""A broker's and a NameServer's metrics against real traffic: real servers on 127.0.0.1, an
exporter on the same event loop, scraped over HTTP and parsed as Prometheus parses it."""

from __future__ import annotations

import asyncio
import time

import orjson

from rocketq.aio import Message, Producer, PullConsumer, SimpleConsumer
from rocketq.metrics import Exporter
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.protocol.message import decode_records
from rocketq.remoting import RemotingClient

from ..broker.test_broker import dispatched, pull, send_v2
from ..conftest import run_async
from .scrape import scrape, total, value

TOPIC = "MetricsOrders"


async def started(cluster, **conf):
    """A NameServer, a broker and an exporter of both on a free port."""
    await cluster.start_namesrv()
    broker = await cluster.start_broker(**conf)
    exporter = Exporter("127.0.0.1", 0)
    exporter.add_broker(broker)
    exporter.add_namesrv(cluster.namesrvs[0])
    await exporter.start()
    return broker, exporter


async def get(url: str) -> dict[str, list]:
    return await asyncio.to_thread(scrape, url)


async def create_topic(client: RemotingClient, broker, topic: str, queues: int = 1,
                       **extra: str) -> None:
    r = await client.invoke(broker.address, RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": queues,
                                              "writeQueueNums": queues, "perm": 6, **extra}))
    assert r.code == ResponseCode.SUCCESS, r.remark
    await broker.register_all()


async def until_scraped(url: str, check, timeout: float = 15.0) -> dict[str, list]:
    """Scrape until ``check(samples)`` holds; the last scrape's samples."""
    deadline = time.monotonic() + timeout
    while True:
        samples = await get(url)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError("the metrics never showed it")
        await asyncio.sleep(0.2)


def test_sends_pulls_lag_and_the_exporter_names(cluster):
    sent, consumed = 10, 4
    group = "cg-metrics"

    async def main():
        broker, exporter = await started(cluster)
        client = RemotingClient()
        consumer = None
        try:
            await create_topic(client, broker, TOPIC)
            async with Producer("pg-metrics", namesrv=cluster.namesrv) as producer:
                for i in range(sent):
                    await producer.send(Message(TOPIC, b"m%d-" % i + b"x" * 100))
                await producer.send(Message(TOPIC, b"y" * 2000))  # a 4 KiB-bucket one
            await dispatched(broker)
            consumer = PullConsumer(group, namesrv=cluster.namesrv, from_where="first",
                                    pull_batch_size=consumed, max_poll_records=consumed,
                                    auto_commit=False)
            consumer.subscribe(TOPIC)
            await consumer.start()
            got: list = []
            deadline = time.monotonic() + 20
            while len(got) < consumed and time.monotonic() < deadline:
                got += await consumer.poll(1.0)
            assert len(got) == consumed
            await consumer.commit()
            behind = sent + 1 - consumed

            def caught(s):
                return value(s, "rocketmq_consumer_lag_messages", consumer_group=group,
                             topic=TOPIC) == behind
            s = await until_scraped(exporter.url, caught)
            # Messages, bytes and sizes in, by topic and message type.
            labels = {"topic": TOPIC, "message_type": "normal", "is_system": "false",
                      "cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
            assert value(s, "rocketmq_messages_in_total", **labels) == sent + 1
            stored = value(s, "rocketmq_throughput_in_total", **labels)
            assert stored > sent * 100 + 2000
            assert value(s, "rocketmq_message_size_count", **labels) == sent + 1
            assert value(s, "rocketmq_message_size_sum", **labels) == stored
            assert value(s, "rocketmq_message_size_bucket", le="1024.0", **labels) == sent
            assert value(s, "rocketmq_message_size_bucket", le="4096.0", **labels) == sent + 1
            assert value(s, "rocketmq_message_size_bucket", le="+Inf", **labels) == sent + 1
            # Out: at least what was consumed (the consumer pulls ahead).
            out = value(s, "rocketmq_messages_out_total", topic=TOPIC, consumer_group=group,
                        is_retry="false", is_system="false")
            assert consumed <= out <= sent + 1
            assert value(s, "rocketmq_throughput_out_total", topic=TOPIC,
                         consumer_group=group) > 0
            # The lag: in flight (pulled, not committed) plus ready (not pulled yet).
            lag = {"consumer_group": group, "topic": TOPIC}
            assert (value(s, "rocketmq_consumer_inflight_messages", **lag)
                    + value(s, "rocketmq_consumer_ready_messages", **lag)) == behind
            assert value(s, "rocketmq_consumer_inflight_messages", **lag) == out - consumed
            assert value(s, "rocketmq_consumer_lag_latency", **lag) >= 0
            # rocketmq-exporter's names and labels.
            assert value(s, "rocketmq_group_diff", group=group, topic=TOPIC,
                         msgModel="1") == behind
            assert value(s, "rocketmq_consumer_offset", cluster="DefaultCluster",
                         broker="broker-a", topic=TOPIC, group=group) == consumed
            assert value(s, "rocketmq_producer_offset", topic=TOPIC) == sent + 1
            assert value(s, "rocketmq_group_get_latency_by_storetime", topic=TOPIC,
                         group=group) >= 0
            assert value(s, "rocketmq_broker_tps", cluster="DefaultCluster",
                         broker="broker-a", brokerIP=broker.address) is not None
            # Tables, connections, requests, the NameServer.
            assert value(s, "rocketmq_topic_number", node_id="broker-a") >= 1
            assert value(s, "rocketmq_consumer_group_number", node_id="broker-a") >= 1
            assert total(s, "rocketmq_consumer_connections", consumer_group=group,
                         consume_mode="pull", protocol_type="remoting") == 1
            assert total(s, "rocketmq_rpc_latency_count", node_type="broker",
                         request_code="send_message_v2", response_code="success") >= sent + 1
            assert total(s, "rocketmq_rpc_latency_count", node_type="broker",
                         request_code="pull_message") >= 1
            assert total(s, "rocketmq_rpc_latency_count", node_type="nameserver",
                         request_code="get_routeinfo_by_topic") >= 1
            assert value(s, "rocketq_namesrv_brokers", cluster="DefaultCluster",
                         role="master") == 1
            assert value(s, "rocketq_namesrv_topics") >= 1
            assert value(s, "rocketmq_storage_dispatch_behind_bytes") == 0
            assert value(s, "rocketmq_storage_size") > 0
            # The minute's rates (the stats items tick every second).
            s = await until_scraped(exporter.url, lambda s: (value(
                s, "rocketmq_producer_tps", topic=TOPIC) or 0) > 0 and (value(
                s, "rocketmq_consumer_tps", topic=TOPIC, group=group) or 0) > 0)
            assert value(s, "rocketmq_producer_message_size", topic=TOPIC) > 0
            # The consumer is now caught up, its pull held: a new message answers it, and
            # that answer is timed as a long poll.
            async with Producer("pg-metrics", namesrv=cluster.namesrv) as producer:
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    await producer.send(Message(TOPIC, b"wake"))
                    s = await get(exporter.url)
                    if total(s, "rocketmq_rpc_latency_count", request_code="pull_message",
                             is_long_polling="true"):
                        break
                    await asyncio.sleep(0.5)
                else:
                    raise AssertionError("no long-polled pull was timed")
        finally:
            if consumer is not None:
                await consumer.shutdown()
            await client.close()
            await exporter.stop()
            await cluster.stop()
        # Without the exporter, nothing is timed.
        assert broker.server.observer is None
    run_async(main(), 90)


def test_a_message_sent_to_the_dead_letter_queue_is_counted(cluster):
    group = "cg-dlq"

    async def main():
        broker, exporter = await started(cluster)
        client = RemotingClient()
        try:
            await create_topic(client, broker, TOPIC)
            r = await client.invoke(broker.address, send_v2(TOPIC, b"poison"))
            assert r.code == ResponseCode.SUCCESS
            await dispatched(broker)
            r = await client.invoke(broker.address, pull(TOPIC, 0, 0, group=group))
            (record,) = decode_records(r.body)
            # The consumer failed it and may retry no more: the broker sends it to the DLQ.
            r = await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.CONSUMER_SEND_MSG_BACK, {
                    "group": group, "offset": record.commitlog_offset, "delayLevel": 0,
                    "originMsgId": record.msg_id, "originTopic": TOPIC,
                    "maxReconsumeTimes": 0}))
            assert r.code == ResponseCode.SUCCESS, r.remark
            s = await until_scraped(exporter.url, lambda s: value(
                s, "rocketmq_group_dlqdiff", group=group) == 1)
            assert value(s, "rocketmq_send_to_dlq_messages_total", topic=TOPIC,
                         consumer_group=group, is_system="false") == 1
            assert value(s, "rocketmq_group_dlqdiff", group=group,
                         topic=f"%DLQ%{group}") == 1
            assert value(s, "rocketmq_topic_dlq_offset", group=group) == 1
            # A dead letter is not a message a producer sent.
            assert value(s, "rocketmq_messages_in_total", topic=f"%DLQ%{group}") is None
        finally:
            await client.close()
            await exporter.stop()
            await cluster.stop()
    run_async(main())


def test_pop_hands_out_count_as_out_and_in_flight_until_acked(cluster):
    group = "cg-pop"

    async def main():
        broker, exporter = await started(cluster)
        client = RemotingClient()
        try:
            await create_topic(client, broker, TOPIC, 2)
            async with Producer("pg-metrics", namesrv=cluster.namesrv) as producer:
                for i in range(3):
                    await producer.send(Message(TOPIC, b"p%d" % i))
            await dispatched(broker)
            async with SimpleConsumer(group, cluster.namesrv, topics=TOPIC,
                                      await_duration=2) as consumer:
                got: list = []
                deadline = time.monotonic() + 20
                while len(got) < 3 and time.monotonic() < deadline:
                    got += await consumer.receive(16)
                assert len(got) == 3
                lag = {"consumer_group": group, "topic": TOPIC}
                s = await get(exporter.url)
                assert value(s, "rocketmq_messages_out_total", **lag) == 3
                assert value(s, "rocketmq_consumer_inflight_messages", **lag) == 3
                assert value(s, "rocketmq_consumer_lag_messages", **lag) == 3
                assert value(s, "rocketmq_consumer_ready_messages", **lag) == 0
                for message in got:
                    await consumer.ack(message)
                await until_scraped(exporter.url, lambda s: value(
                    s, "rocketmq_consumer_lag_messages", **lag) == 0 and value(
                    s, "rocketmq_consumer_inflight_messages", **lag) == 0)
                assert total(s, "rocketmq_consumer_connections", consumer_group=group,
                             consume_mode="pop") == 1
        finally:
            await client.close()
            await exporter.stop()
            await cluster.stop()
    run_async(main(), 90)


def test_sink_commits_are_counted(cluster):
    async def main():
        broker, exporter = await started(cluster)
        client = RemotingClient()
        try:
            r = await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.SINK_COMMIT, {"sink": "orders-sink", "batch": "7"},
                orjson.dumps({"txns": {}})))
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.SINK_COMMIT, {"sink": "orders-sink", "batch": "7"},
                orjson.dumps({"txns": {}})))
            assert r.ext_fields["decidedBefore"] == "true"
            r = await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.SINK_ABORT, {"sink": "orders-sink", "batch": "8"}))
            assert r.code == ResponseCode.SUCCESS
            s = await get(exporter.url)
            for result in ("committed", "decided_before", "aborted"):
                assert value(s, "rocketq_sink_commits_total", sink="orders-sink",
                             result=result) == 1, result
        finally:
            await client.close()
            await exporter.stop()
            await cluster.stop()
    run_async(main())
