"""The exactly-once sink with a real SparkSession: retried tasks and aborted batches add
nothing, and consumers never see a half."""

from __future__ import annotations

import threading

import pytest

from rocketq import Message, Producer, PullConsumer

from ..conftest import wait_for

F = pytest.importorskip("pyspark.sql.functions")
T = pytest.importorskip("pyspark.sql.types")

pytestmark = pytest.mark.slow


def read_all(namesrv, topic, seconds=5.0):
    """Every message of ``topic`` from offset 0, read by a fresh consumer group."""
    got = []
    with PullConsumer(f"check-{topic}-{threading.get_ident()}", namesrv=namesrv,
                      from_where="first") as consumer:
        consumer.subscribe(topic)
        consumer.start()
        wait_for(lambda: got.extend(consumer.poll(0.2)) or False, seconds)
    return sorted(m.body.decode() for m in got)


def half_count(servers):
    from rocketq.protocol import TRANS_HALF_TOPIC
    return sum(b.store.get_max_offset(TRANS_HALF_TOPIC, 0) for b in servers.brokers)


def test_batch_save_exactly_once_with_a_task_failing_its_first_attempt(spark, servers):
    servers.create_topic("EoBatch", 4)

    @F.udf(T.StringType(), useArrow=True)
    def flaky(i):
        from pyspark import TaskContext
        if TaskContext.get().attemptNumber() == 0 and i % 10000 == 9999:
            raise RuntimeError("first attempt fails")
        return f"row-{i}"

    before = half_count(servers)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        (spark.range(0, 20000, numPartitions=2).select(flaky("id").alias("body"))
         .write.format("rocketq").option("namesrv", servers.namesrv).option("topic", "EoBatch")
         .option("exactlyOnce", "true").mode("append").save())
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert read_all(servers.namesrv, "EoBatch") == sorted(f"row-{i}" for i in range(20000))
    # The first attempts prepared halves before failing: they were rolled back, not sent.
    assert half_count(servers) - before > 20000


def test_stream_exactly_once_when_a_task_fails_its_first_attempt(spark, servers, tmp_path):
    servers.create_topic("EoIn", 2)
    servers.create_topic("EoOut", 2)
    n = 12000
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for start in range(0, n, 250):
            producer.send_batch([Message("EoIn", b"%d" % i) for i in range(start, start + 250)])

    @F.udf(T.StringType())
    def flaky(body):
        from pyspark import TaskContext
        # The last rows: a first attempt fails after sending most of its rows.
        if TaskContext.get().attemptNumber() == 0 and int(body) >= n - 20:
            raise RuntimeError("first attempt fails")
        return "out-" + body.decode()

    before = half_count(servers)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        query = (spark.readStream.format("rocketq").option("namesrv", servers.namesrv)
                 .option("topic", "EoIn").option("startingOffsets", "earliest").load()
                 .select(flaky("body").alias("body"))
                 .writeStream.format("rocketq").option("namesrv", servers.namesrv)
                 .option("topic", "EoOut").option("exactlyOnce", "true")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(180)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert query.exception() is None
    assert read_all(servers.namesrv, "EoOut") == sorted(f"out-{i}" for i in range(n))
    assert half_count(servers) - before >= n


def test_a_consumer_never_sees_a_batch_that_is_aborted(spark, servers, tmp_path):
    servers.create_topic("AbIn", 2)
    servers.create_topic("AbOut", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(100):
            producer.send(Message("AbIn", b"good-%d" % i))

    @F.udf(T.StringType())
    def poisoned(body):
        if body.startswith(b"poison") and body.endswith(b"-39"):
            raise RuntimeError("this batch fails on every attempt")
        return body.decode().upper()

    seen: list[str] = []
    stop = threading.Event()

    def watch():
        with PullConsumer("ab-watch", namesrv=servers.namesrv, from_where="first") as consumer:
            consumer.subscribe("AbOut")
            consumer.start()
            while not stop.is_set():
                seen.extend(m.body.decode() for m in consumer.poll(0.2))

    watcher = threading.Thread(target=watch)
    watcher.start()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    try:
        query = (spark.readStream.format("rocketq").option("namesrv", servers.namesrv)
                 .option("topic", "AbIn").option("startingOffsets", "earliest").load()
                 .select(poisoned("body").alias("body"))
                 .writeStream.format("rocketq").option("namesrv", servers.namesrv)
                 .option("topic", "AbOut").option("exactlyOnce", "true")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="200 milliseconds").start())
        assert wait_for(lambda: len(seen) >= 100, 90)  # the good batch is committed
        halves = half_count(servers)
        with Producer("pg", namesrv=servers.namesrv) as producer:
            for i in range(40):
                producer.send(Message("AbIn", b"poison-%d" % i))
        with pytest.raises(Exception, match="every attempt"):
            query.awaitTermination(120)
        assert half_count(servers) > halves  # the poisoned batch had prepared halves
        wait_for(lambda: False, 2)  # and a consumer keeps reading a while after the abort
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        stop.set()
        watcher.join(10)
    assert sorted(seen) == sorted(f"GOOD-{i}" for i in range(100))
    # The brokers rolled the aborted batch back.
    assert all(servers.call(b.sinks.open_halves(*key)) == {}
               for b in servers.brokers for key in list(b.sinks.halves))
