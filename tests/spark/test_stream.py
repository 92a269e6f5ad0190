"""Structured Streaming from rocketq: micro-batches, checkpoint restart, exactly once."""

from __future__ import annotations

import pytest

from rocketq import Message, Producer

pytestmark = pytest.mark.slow


def run_available_now(spark, namesrv, checkpoint):
    """One availableNow run; returns (rows, number of micro-batches)."""
    rows, batches = [], []

    def collect(df, batch_id):
        batches.append(batch_id)
        rows.extend(df.collect())

    query = (spark.readStream.format("rocketq").option("namesrv", namesrv)
             .option("topic", "Stream").option("startingOffsets", "earliest")
             .option("maxMessagesPerTrigger", "7").load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    return rows, batches


def test_stream_in_micro_batches_and_restart_on_the_checkpoint(spark, servers, tmp_path):
    servers.create_topic("Stream", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        first = {producer.send(Message("Stream", b"a%d" % i)).msg_id for i in range(20)}
    checkpoint = tmp_path / "checkpoint"
    rows, batches = run_available_now(spark, servers.namesrv, checkpoint)
    assert sorted(r.msg_id for r in rows) == sorted(first)  # everything, once
    assert len(batches) >= 3  # 20 messages at 7 per trigger
    with Producer("pg", namesrv=servers.namesrv) as producer:
        second = {producer.send(Message("Stream", b"b%d" % i)).msg_id for i in range(15)}
    rows, _ = run_available_now(spark, servers.namesrv, checkpoint)
    assert sorted(r.msg_id for r in rows) == sorted(second)  # restart: no loss, no repeat
