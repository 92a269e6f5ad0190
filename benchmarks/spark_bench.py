"""The Spark connector's speed: batch read rows/s next to rocketq's own pull client on the same
messages, the sink's rows/s at least once and exactly once, and streaming latency from send
to row visible in a micro-batch.

    .venv/bin/python benchmarks/spark_bench.py            # 1,000,000 messages of 128 bytes
    .venv/bin/python benchmarks/spark_bench.py --count 100000 --json
    .venv/bin/python benchmarks/spark_bench.py --sink-only --repeat 3 --json

    .venv/bin/python benchmarks/spark_bench.py --cluster --json   # and on a Spark cluster

Starts ``rocketq standalone`` (async flush) in a temporary directory and a local[*] Spark
session (``--master``). With ``--cluster``, the read and the sink are then measured again,
in the same run, on a Spark standalone cluster of two one-core workers started from
PySpark's distribution (``rocketq.spark.standalone``): the ``cluster_*`` keys. The batch
read materialises every column through Spark's ``noop`` sink; the best of
``--repeat`` runs counts (the first pays for Spark's warm-up). The client baseline is
``e2e_bench``'s pull consumer reading the same topic from the start. The sink writes
``--sink-rows`` rows of 128 bytes per run, at-least-once and exactly-once runs alternating
for ``--repeat`` rounds; the median counts, the spread is reported. ``--sink-only`` measures
the sink alone (no load, batch read, client pull or streaming latency): a quicker run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_bench import (  # noqa: E402
    bench_batch,
    bench_pull,
    create_topic,
    percentile,
    start_broker,
)

TOPIC = "SparkBench"


def spark_session(master: str = "local[*]"):
    """A session on ``master``; on a standalone cluster, one executor of one core per
    worker (the driver waits until both have registered)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if master.startswith("spark://"):
        builder = (builder.config("spark.executor.cores", "1")
                   .config("spark.executor.memory", "1g").config("spark.cores.max", "2")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.pyspark.python", sys.executable))
    spark = (builder.master(master).appName("rocketq-spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if master.startswith("spark://"):
        deadline = time.monotonic() + 90
        while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3:
            if time.monotonic() > deadline:
                raise TimeoutError("the cluster's executors did not register")
            time.sleep(0.2)
    return spark


def measure(spark, namesrv: str, args: argparse.Namespace, stored: int | None
            ) -> tuple[float | None, dict[bool, list[float]]]:
    """The connector's batch read (when ``stored`` is given) and the sink's rows/s, at
    least once and exactly once alternating, on one session."""
    connector = connector_read(spark, namesrv, stored, args.repeat) if stored else None
    sink_write(spark, namesrv, 10_000, False)  # warm-up of both paths
    sink_write(spark, namesrv, 10_000, True)
    sink: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(args.repeat):
        for exactly_once in ((False, True) if round_ % 2 == 0 else (True, False)):
            sink[exactly_once].append(sink_write(spark, namesrv, args.sink_rows, exactly_once))
    return connector, sink


def sink_figures(sink: dict[bool, list[float]], prefix: str = "") -> dict[str, object]:
    at_least, exactly = statistics.median(sink[False]), statistics.median(sink[True])
    return {f"{prefix}sink_rows_s": round(at_least),
            f"{prefix}sink_exactly_once_rows_s": round(exactly),
            f"{prefix}sink_exactly_once_vs_at_least_once": round(exactly / at_least, 2),
            f"{prefix}sink_rows_s_runs": [round(v) for v in sink[False]],
            f"{prefix}sink_exactly_once_rows_s_runs": [round(v) for v in sink[True]]}


def connector_read(spark, namesrv: str, expected: int, repeat: int) -> float:
    """Rows per second of a full batch read of the topic (best of ``repeat``)."""
    best = 0.0
    for _ in range(repeat):
        df = (spark.read.format("rocketq").option("namesrv", namesrv).option("topic", TOPIC)
              .load())
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        best = max(best, expected / (time.perf_counter() - t0))
    return best


def sink_write(spark, namesrv: str, rows: int, exactly_once: bool) -> float:
    """Rows per second of a batch ``save()`` of ``rows`` 128-byte rows (checked: every row
    is readable afterwards, once)."""
    from pyspark.sql import functions as F

    from rocketq.spark import broker_io

    topic = "SparkSinkExactlyOnce" if exactly_once else "SparkSink"

    def stored() -> int:
        return sum(high for _low, high in broker_io.queue_offsets(namesrv, [topic]).values())

    before = stored()
    df = spark.range(0, rows, numPartitions=2).select(
        F.concat(F.col("id").cast("string"), F.expr("repeat('x', 120)")).alias("body"))
    t0 = time.perf_counter()
    (df.write.format("rocketq").option("namesrv", namesrv).option("topic", topic)
     .option("exactlyOnce", str(exactly_once).lower()).mode("append").save())
    elapsed = time.perf_counter() - t0
    deadline = time.monotonic() + 30  # the broker indexes the last appends meanwhile
    while stored() - before < rows and time.monotonic() < deadline:
        time.sleep(0.05)
    if stored() - before != rows:
        raise RuntimeError(f"the sink ({topic}) stored {stored() - before} rows of {rows}")
    return rows / elapsed


def stream_latency(spark, namesrv: str, rate: float, seconds: float) -> list[float]:
    """Milliseconds from a message's birth to its row being collected in a micro-batch, for
    messages sent at ``rate`` per second for ``seconds``."""
    from rocketq import Message, Producer

    latencies: list[float] = []

    def record(df, _batch_id) -> None:
        rows = df.select("born_timestamp").collect()
        now = time.time()
        latencies.extend((now - r.born_timestamp.timestamp()) * 1000 for r in rows)

    with tempfile.TemporaryDirectory() as checkpoint:
        query = (spark.readStream.format("rocketq").option("namesrv", namesrv)
                 .option("topic", "SparkLatency").option("startingOffsets", "latest").load()
                 .writeStream.foreachBatch(record).option("checkpointLocation", checkpoint)
                 .trigger(processingTime="0 seconds").start())
        try:
            deadline = time.monotonic() + 60
            while not query.recentProgress and time.monotonic() < deadline:
                time.sleep(0.2)  # the first (empty) batch has run: offsets are set
            total = int(rate * seconds)
            with Producer("spark-bench-latency", namesrv=namesrv) as producer:
                began = time.monotonic()
                for n in range(total):
                    producer.send(Message("SparkLatency", b"x" * 128))
                    time.sleep(max(0.0, began + (n + 1) / rate - time.monotonic()))
            deadline = time.monotonic() + 30
            while len(latencies) < total and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            query.stop()
    return latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--sink-rows", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=200, help="streaming: messages per s")
    parser.add_argument("--seconds", type=float, default=15, help="streaming: how long")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--master", default="local[*]", help="the first session's master")
    parser.add_argument("--cluster", action="store_true",
                        help="then the same read and sink runs on a Spark standalone cluster "
                             "(keys cluster_*)")
    parser.add_argument("--sink-only", action="store_true",
                        help="measure the sink alone: no load, read or streaming latency")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as data_dir:
        proc, namesrv = start_broker(data_dir)
        try:
            asyncio.run(create_topic(namesrv, TOPIC, args.queues))
            asyncio.run(create_topic(namesrv, "SparkLatency", 2))
            for topic in ("SparkSink", "SparkSinkExactlyOnce"):
                asyncio.run(create_topic(namesrv, topic, args.queues))
            read: dict[str, float] = {}
            if not args.sink_only:
                t0 = time.perf_counter()
                asyncio.run(bench_batch(namesrv, TOPIC, args.count, 64, 8))
                read["load_s"] = time.perf_counter() - t0
            spark = spark_session(args.master)
            stored = None
            if not args.sink_only:
                from rocketq.spark import broker_io

                stored = sum(high - low for (_t, _b, _a, _q), (low, high)
                             in broker_io.queue_offsets(namesrv, [TOPIC]).items())
                read["stored"] = stored
                read["client"] = asyncio.run(bench_pull(namesrv, TOPIC, stored))
            read["connector"], sink = measure(spark, namesrv, args, stored)
            latencies = ([] if args.sink_only
                         else stream_latency(spark, namesrv, args.rate, args.seconds))
            spark.stop()
            if args.cluster:
                # The same measures on a standalone cluster: a master and two one-core
                # workers from PySpark's distribution, each executor its own JVM.
                from rocketq.spark.standalone import StandaloneCluster

                with StandaloneCluster(os.path.join(data_dir, "spark"), workers=2) as cluster:
                    spark = spark_session(cluster.url)
                    try:
                        read["cluster_connector"], cluster_sink = measure(
                            spark, namesrv, args, stored)
                    finally:
                        spark.stop()
        finally:
            proc.terminate()
            proc.wait(30)

    result: dict[str, object] = {}
    if not args.sink_only:
        stored, connector, client = int(read["stored"]), read["connector"], read["client"]
        result.update({
            "messages": stored,
            "load_msgs_s": round(stored / read["load_s"]),
            "connector_rows_s": round(connector),
            "client_pull_msgs_s": round(client),
            "connector_vs_client": round(connector / client, 2)})
    result["master"] = args.master
    result["sink_rows"] = args.sink_rows
    result.update(sink_figures(sink))
    if args.cluster:
        result["cluster"] = "standalone, 2 workers of 1 core"
        if read.get("cluster_connector"):
            result["cluster_connector_rows_s"] = round(read["cluster_connector"])
        result.update(sink_figures(cluster_sink, "cluster_"))
    if not args.sink_only:
        result.update({
            "stream_latency_ms_p50": round(percentile(latencies, 0.5), 1),
            "stream_latency_ms_p99": round(percentile(latencies, 0.99), 1),
            "stream_messages": len(latencies)})
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{'measure':<34} {'value':>12}")
        if not args.sink_only:
            print(f"{'messages (128 B) in the topic':<34} {result['messages']:>12,}")
            print(f"{'load (batches of 64), msgs/s':<34} {result['load_msgs_s']:>12,}")
            print(f"{'connector batch read, rows/s':<34} {result['connector_rows_s']:>12,}")
            print(f"{'client pull, msgs/s':<34} {result['client_pull_msgs_s']:>12,}")
            print(f"{'connector / client':<34} {result['connector_vs_client']:>12}")
        for key, label in (("sink_rows_s", "sink at least once, rows/s"),
                           ("sink_exactly_once_rows_s", "sink exactly once, rows/s")):
            runs = result[f"{key}_runs"]
            print(f"{label:<34} {result[key]:>12,}  (runs {min(runs):,}-{max(runs):,})")
        print(f"{'exactly once / at least once':<34} "
              f"{result['sink_exactly_once_vs_at_least_once']:>12}")
        if args.cluster:
            print(f"on the standalone cluster ({result['cluster']}):")
            if "cluster_connector_rows_s" in result:
                print(f"{'  connector batch read, rows/s':<34} "
                      f"{result['cluster_connector_rows_s']:>12,}")
            for key, label in (("cluster_sink_rows_s", "  sink at least once, rows/s"),
                               ("cluster_sink_exactly_once_rows_s",
                                "  sink exactly once, rows/s")):
                runs = result[f"{key}_runs"]
                print(f"{label:<34} {result[key]:>12,}  (runs {min(runs):,}-{max(runs):,})")
            print(f"{'  exactly once / at least once':<34} "
                  f"{result['cluster_sink_exactly_once_vs_at_least_once']:>12}")
        if not args.sink_only:
            print(f"{'stream latency p50, ms':<34} {result['stream_latency_ms_p50']:>12}")
            print(f"{'stream latency p99, ms':<34} {result['stream_latency_ms_p99']:>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
