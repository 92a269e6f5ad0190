"""A Spark driver on a standalone cluster, for tests/spark/test_cluster.py: runs one scenario
against a rocketq cluster and prints one JSON line of what it saw. The test checks the
topics itself, with rocketq's client; this only drives Spark.

    python cluster_driver.py SPARK_URL NAMESRV SCENARIO [ARGS...]

Scenarios:
    read TOPIC                 every row of TOPIC with the executor that read it
    write TOPIC_A TOPIC_B N    N rows from 6 partitions: at least once to TOPIC_A, exactly
                               once to TOPIC_B; each body says which executor sent it
    kill IN OUT MARKER CKPT    a stream IN -> OUT through the exactly-once sink, whose
                               executor is SIGKILLed mid-batch (after MARKER is written)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from rocketq.spark import RocketMQDataSource
from rocketq.spark.standalone import executor_pid

EXECUTORS = 2


def session(url: str) -> SparkSession:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master(url).appName("rocketq-cluster-test")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.executor.cores", "1")
             .config("spark.executor.memory", "768m")
             .config("spark.cores.max", str(EXECUTORS))
             .config("spark.task.maxFailures", "4")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketMQDataSource)
    deadline = time.monotonic() + 60
    # Both executors registered (the driver counts as one more), so tasks can spread.
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < EXECUTORS + 1:
        if time.monotonic() > deadline:
            raise TimeoutError("the executors did not register")
        time.sleep(0.2)
    return spark


@F.udf(T.StringType())
def executor_dir(_column: object) -> str:
    """Which executor runs this: its Python workers run in the executor's work directory
    (``<worker dir>/<app id>/<executor id>``)."""
    path = os.getcwd()
    return f"{os.path.basename(os.path.dirname(os.path.dirname(path)))}/" \
           f"{os.path.basename(path)}"


def read(spark: SparkSession, namesrv: str, topic: str) -> dict:
    df = (spark.read.format("rocketq").option("namesrv", namesrv).option("topic", topic)
          .load())
    rows = df.select("broker", "queue_id", "queue_offset", F.col("body").cast("string"),
                     executor_dir("queue_id").alias("executor")).collect()
    return {"partitions": df.rdd.getNumPartitions(), "rows": [list(r) for r in rows]}


def write(spark: SparkSession, namesrv: str, topic_a: str, topic_b: str, n: int) -> dict:
    rows = (spark.range(n, numPartitions=6)
            .select(F.concat(F.lit("w-"), F.col("id").cast("string"), F.lit("|"),
                             executor_dir("id")).alias("body")))
    rows.write.format("rocketq").option("namesrv", namesrv).option("topic", topic_a) \
        .mode("append").save()
    rows.write.format("rocketq").option("namesrv", namesrv).option("topic", topic_b) \
        .option("exactlyOnce", "true").option("sinkName", "cluster-write") \
        .option("batchId", "1").mode("append").save()
    return {"written": n}


def kill(spark: SparkSession, namesrv: str, source: str, out: str, marker: str,
         checkpoint: str) -> dict:
    def stall_once(batches):
        """Pass the rows through; the first attempt that gets here stalls after its first
        Arrow batch (so its sends are under way) and says where it runs."""
        from pyspark import TaskContext

        first = True
        for batch in batches:
            yield batch
            if first and TaskContext.get().attemptNumber() == 0:
                first = False
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    continue
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(30)  # the test SIGKILLs this executor well before

    killed: dict[str, int] = {}

    def killer() -> None:
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) or not open(marker).read():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        time.sleep(0.5)  # let the sink send some of what it has
        worker = int(open(marker).read())
        jvm = executor_pid(worker)
        if jvm is not None:
            os.kill(jvm, signal.SIGKILL)
            killed["executor_pid"] = jvm

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    stream = (spark.readStream.format("rocketq").option("namesrv", namesrv)
              .option("topic", source).option("startingOffsets", "first").load()
              .select(F.concat(F.lit("out-"), F.col("body").cast("string")).alias("body"))
              .mapInArrow(stall_once, "body string"))
    query = (stream.writeStream.format("rocketq").option("namesrv", namesrv)
             .option("topic", out).option("exactlyOnce", "true")
             .option("sinkName", "cluster-kill").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    thread.join(5)
    error = query.exception()
    return {"killed": killed, "error": str(error) if error else None,
            "active": query.isActive}


def main() -> None:
    url, namesrv, scenario, *args = sys.argv[1:]
    spark = session(url)
    try:
        if scenario == "read":
            result = read(spark, namesrv, *args)
        elif scenario == "write":
            result = write(spark, namesrv, args[0], args[1], int(args[2]))
        elif scenario == "kill":
            result = kill(spark, namesrv, *args)
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
