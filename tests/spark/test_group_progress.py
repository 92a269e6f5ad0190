"""A streaming query's ``consumerGroup`` as RocketMQ's admin tools see it: the group's retry
topic is routed (mqadmin consumerProgress looks the group's brokers up by it), and mqadmin's
own GET_CONSUME_STATS request, as captured, answers the offsets Spark finished with."""

from __future__ import annotations

import pytest

from rocketq import Message, Producer
from rocketq.protocol import fastjson
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand
from rocketq.remoting import RemotingClient, run

from ..compat.java498_frames import frames
from ..conftest import fetch_route, wait_for

pytestmark = pytest.mark.slow


def test_consumer_progress_of_a_streaming_query(spark, servers, tmp_path):
    servers.create_topic("Prog", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(40):
            producer.send(Message("Prog", b"p%d" % i))
    query = (spark.readStream.format("rocketq").option("namesrv", servers.namesrv)
             .option("topic", "Prog").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "10").option("consumerGroup", "spark-prog").load()
             .writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_for(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 40, 90)
    finally:
        query.stop()
    broker = servers.brokers[0]
    # Spark commits a batch's offsets when it plans the next one: they trail the last batch.
    recorded = [broker.offsets.query("spark-prog", "Prog", q) for q in range(2)]
    assert 20 <= sum(recorded) < 40
    # mqadmin consumerProgress: the retry topic's route names the group's brokers ...
    assert wait_for(lambda: fetch_route(servers.namesrv, "%RETRY%spark-prog") is not None, 10)
    # ... and each answers its GET_CONSUME_STATS (mqadmin 4.9.8's, for this group).
    (captured,) = frames("mqadmin", RC.GET_CONSUME_STATS)
    ask = RemotingCommand.request(captured.code, {**captured.ext, "consumerGroup": "spark-prog"})

    async def stats():
        client = RemotingClient()
        try:
            return await client.invoke(broker.address, ask)
        finally:
            await client.close()

    answer = run(stats())
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    table = {(mq["topic"], mq["queueId"]): w
             for mq, w in fastjson.loads(answer.body)["offsetTable"].items}
    assert {k: (w["brokerOffset"], w["consumerOffset"]) for k, w in table.items()} == {
        ("Prog", 0): (20, recorded[0]), ("Prog", 1): (20, recorded[1])}
