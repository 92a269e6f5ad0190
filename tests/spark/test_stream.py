"""Structured Streaming from rocketq: micro-batches, checkpoint restart, exactly once."""

from __future__ import annotations

import os
import threading
import time

import pytest

from rocketq import Message, Producer, PullConsumer

from ..conftest import wait_for

F = pytest.importorskip("pyspark.sql.functions")

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


def test_stream_while_producing_into_the_rocketq_sink_with_group_offsets(spark, servers,
                                                                        tmp_path):
    servers.create_topic("Live", 2)
    servers.create_topic("LiveOut", 2)
    expected = {f"LIVE-{i}" for i in range(60)}

    def produce():
        with Producer("pg", namesrv=servers.namesrv) as producer:
            for i in range(60):
                producer.send(Message("Live", b"live-%d" % i, keys=[f"k{i}"]))
                time.sleep(0.05)

    source = (spark.readStream.format("rocketq").option("namesrv", servers.namesrv)
              .option("topic", "Live").option("startingOffsets", "earliest")
              .option("consumerGroup", "spark-live").load())
    query = (source.select(F.upper(F.col("body").cast("string")).alias("body"),
                           F.lit("upper").alias("tags"), "keys")
             .writeStream.format("rocketq").option("namesrv", servers.namesrv)
             .option("topic", "LiveOut")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="300 milliseconds").start())
    producer = threading.Thread(target=produce)
    got = {}
    try:
        wait_for(lambda: query.recentProgress, 60)  # the first (empty) batch ran
        producer.start()
        with PullConsumer("reader", namesrv=servers.namesrv, from_where="first") as consumer:
            consumer.subscribe("LiveOut")
            consumer.start()

            def all_arrived():
                for m in consumer.poll(0.3):
                    got.setdefault(m.body.decode(), []).append(m)
                return set(got) >= expected
            wait_for(all_arrived, 90)
        producer.join()
        # The stream kept up in several micro-batches while messages kept coming.
        wait_for(lambda: sum(p["numInputRows"] > 0 for p in query.recentProgress) >= 2, 10)
    finally:
        query.stop()
    assert set(got) == expected and all(len(v) == 1 for v in got.values())
    sample = got["LIVE-7"][0]
    assert sample.tags == "upper" and sample.keys == ["k7"]
    # Offsets Spark finished with are recorded for the group (they lag the last batch).
    offsets = servers.brokers[0].offsets
    recorded = [offsets.query("spark-live", "Live", q) or 0 for q in range(2)]
    assert 0 < sum(recorded) <= 60


def test_offsets_below_the_min_fail_or_skip(spark, servers, tmp_path):
    servers.stop_broker(servers.brokers[0])
    broker = servers.start_broker("broker-small", mappedFileSizeCommitLog=64 << 10,
                                  mappedFileSizeConsumeQueue=20 * 10)
    servers.create_topic("Lossy", 1)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(200):
            producer.send(Message("Lossy", b"%d:" % i + b"x" * 1000))
    old = time.time() - 100 * 3600  # past fileReservedTime (72 h)
    for f in broker.store.commitlog.files.files:
        os.utime(f.path, (old, old))
    broker.store.clean_expired_files(manual=True)
    low = broker.store.get_min_offset("Lossy", 0)
    assert 0 < low < 200
    from_zero = '{"Lossy": {"broker-small:0": 0}}'

    def batch(**options):
        reader = (spark.read.format("rocketq").option("namesrv", servers.namesrv)
                  .option("topic", "Lossy").option("startingOffsets", from_zero))
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    with pytest.raises(Exception, match="failOnDataLoss"):
        batch().collect()
    rows = batch(failOnDataLoss="false").collect()
    assert sorted(r.queue_offset for r in rows) == list(range(low, 200))

    def stream(fail, checkpoint):
        rows = []
        query = (spark.readStream.format("rocketq").option("namesrv", servers.namesrv)
                 .option("topic", "Lossy").option("startingOffsets", from_zero)
                 .option("failOnDataLoss", fail).load()
                 .writeStream.foreachBatch(lambda df, _id: rows.extend(df.collect()))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        error = None
        try:
            query.awaitTermination(120)
        except Exception as exc:  # the query failed: awaitTermination raises its error
            error = exc
        finally:
            query.stop()
        return rows, error

    rows, error = stream("true", tmp_path / "c1")
    assert error is not None and "failOnDataLoss" in str(error) and not rows
    rows, error = stream("false", tmp_path / "c2")
    assert error is None
    assert sorted(r.queue_offset for r in rows) == list(range(low, 200))


def test_readme_spark_example_runs(spark, servers, tmp_path):
    from ..test_readme import python_blocks

    block = next(b for b in python_blocks()
                 if '.option("subscription", "paid || refunded")' in b)
    for topic in ("Orders", "Results", "Shouted"):
        servers.create_topic(topic, 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for tag in ("paid", "refunded", "created"):
            producer.send(Message("Orders", f"order {tag}".encode(), tags=tag))
    code = (block.replace('"127.0.0.1:9876"', repr(servers.namesrv))
            .replace('"/data/checkpoints/shout"', repr(str(tmp_path / "shout"))))
    namespace = {"spark": spark}
    exec(compile(code, "README.md", "exec"), namespace)
    try:
        assert sorted(r.body for r in namespace["df"].collect()) == [b"order paid",
                                                                     b"order refunded"]
        (query,) = spark.streams.active
        wait_for(lambda: query.recentProgress, 60)  # started at the latest offsets
        with Producer("pg", namesrv=servers.namesrv) as producer:
            producer.send(Message("Orders", b"late order"))
        got = []
        with PullConsumer("readme-check", namesrv=servers.namesrv,
                          from_where="first") as consumer:
            consumer.subscribe("Results")
            consumer.subscribe("Shouted")
            consumer.start()
            wait_for(lambda: got.extend(consumer.poll(0.3)) or len(got) >= 3, 60)
            got.extend(consumer.poll(0.5))
        assert sorted((m.topic, m.body) for m in got) == [
            ("Results", b"order paid"), ("Results", b"order refunded"),
            ("Shouted", b"LATE ORDER")]
    finally:
        for query in spark.streams.active:
            query.stop()
