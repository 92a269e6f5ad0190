"""The exactly-once sink with a real SparkSession: retried tasks and aborted batches add
nothing, and consumers never see a half."""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from rocketq import Message, Producer, PullConsumer

from ..conftest import wait_for

F = pytest.importorskip("pyspark.sql.functions")
T = pytest.importorskip("pyspark.sql.types")

from rocketq.spark import broker_io  # noqa: E402

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


def test_a_batch_id_makes_a_replayed_write_add_nothing(spark, servers):
    servers.create_topic("EoReplay", 2)

    def write(batch_id, rows):
        (spark.range(0, rows, numPartitions=2).selectExpr("cast(id as string) as body")
         .write.format("rocketq").option("namesrv", servers.namesrv)
         .option("topic", "EoReplay").option("exactlyOnce", "true")
         .option("sinkName", "replayed").option("batchId", batch_id).mode("append").save())

    write("7", 50)
    write("7", 50)  # foreachBatch called again for batch 7 after a crash
    write("8", 10)
    assert read_all(servers.namesrv, "EoReplay") == sorted(
        [str(i) for i in range(50)] + [str(i) for i in range(10)])


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


# --------------------------------------------------------------------------- killed drivers
def _max_offsets(namesrv, topic):
    return sum(high for _low, high in broker_io.queue_offsets(namesrv, [topic]).values())


def _halves(addr):
    from rocketq.protocol import TRANS_HALF_TOPIC, RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient, run

    async def ask():
        client = RemotingClient()
        try:
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.GET_MAX_OFFSET, {"topic": TRANS_HALF_TOPIC, "queueId": 0}), 5)
            return int(r.ext_fields.get("offset", "0"))
        finally:
            await client.close()
    return run(ask())


def test_a_driver_killed_three_times_writes_every_row_once(tmp_path):
    """topic -> transform -> topic with the driver SIGKILLed while tasks write, between the
    brokers' commit and Spark's checkpoint commit, and at a random moment, then restarted on
    the same checkpoint: every input row's result is in the output topic exactly once."""
    from ..compat.clients import Standalone

    server = Standalone(tmp_path / "server")
    repo = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": str(repo)}
    checkpoint = str(tmp_path / "checkpoint")
    n = 1500
    procs: list[subprocess.Popen] = []

    def driver(mode, **extra):
        proc = subprocess.Popen(
            [sys.executable, str(pathlib.Path(__file__).with_name("kill_driver.py")),
             server.namesrv, checkpoint, mode], env={**env, **extra},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(proc)
        return proc

    def kill(proc):
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        proc.wait(30)

    try:
        with Producer("pg", namesrv=server.namesrv) as producer:
            for start in range(0, n, 250):
                producer.send_batch([Message("KIn", b"%d" % i)
                                     for i in range(start, start + 250)])
            producer.send(Message("KOut", b"warm-up"))  # the topic exists before the sink
        addr = next(iter(broker_io.queue_offsets(server.namesrv, ["KIn"])))[2]
        base = _max_offsets(server.namesrv, "KOut")

        # 1. While tasks write: halves are stored that no commit has made visible yet.
        proc = driver("run")
        halves = _halves(addr)
        assert wait_for(lambda: _halves(addr) > halves + 10, 120, 0.01)
        kill(proc)
        # 2. After the brokers committed a batch, before Spark recorded it done.
        pause = tmp_path / "paused"
        proc = driver("run", PAUSE_AFTER_COMMIT=str(pause))
        assert wait_for(pause.exists, 120)
        committed = _max_offsets(server.namesrv, "KOut") - base
        assert committed > 0
        kill(proc)
        # 3. At a random moment.
        proc = driver("run")
        assert wait_for(lambda: _max_offsets(server.namesrv, "KOut") - base > committed, 120)
        time.sleep(random.uniform(0, 2))
        kill(proc)
        # Restarted once more, the query drains the input and stops.
        proc = driver("drain")
        assert proc.wait(180) == 0
        out = [b for b in read_all(server.namesrv, "KOut", 10) if b != "warm-up"]
        assert out == sorted(f"out-{i}" for i in range(n))
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill(proc)
        server.stop()
