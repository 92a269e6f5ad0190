"""The Spark connector's speed: batch read rows/s next to rocketq's own pull client on the same
messages, the sink's rows/s at least once and exactly once, and streaming latency from send
to row visible in a micro-batch.

    .venv/bin/python benchmarks/spark_bench.py            # 1,000,000 messages of 128 bytes
    .venv/bin/python benchmarks/spark_bench.py --count 100000 --json

Starts ``rocketq standalone`` (async flush) in a temporary directory and a local[2] Spark
session. The batch read materialises every column through Spark's ``noop`` sink; the best of
``--repeat`` runs counts (the first pays for Spark's warm-up). The client baseline is
``e2e_bench``'s pull consumer reading the same topic from the start. The sink writes
``--sink-rows`` rows of 128 bytes per run, at-least-once and exactly-once runs alternating
for ``--repeat`` rounds; the median counts, the spread is reported.
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


def spark_session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("rocketq-spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


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
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as data_dir:
        proc, namesrv = start_broker(data_dir)
        try:
            asyncio.run(create_topic(namesrv, TOPIC, args.queues))
            asyncio.run(create_topic(namesrv, "SparkLatency", 2))
            for topic in ("SparkSink", "SparkSinkExactlyOnce"):
                asyncio.run(create_topic(namesrv, topic, args.queues))
            t0 = time.perf_counter()
            asyncio.run(bench_batch(namesrv, TOPIC, args.count, 64, 8))
            load_s = time.perf_counter() - t0
            spark = spark_session()
            from rocketq.spark import broker_io

            stored = sum(high - low for (_t, _b, _a, _q), (low, high)
                         in broker_io.queue_offsets(namesrv, [TOPIC]).items())
            client = asyncio.run(bench_pull(namesrv, TOPIC, stored))
            connector = connector_read(spark, namesrv, stored, args.repeat)
            sink_write(spark, namesrv, 10_000, False)  # warm-up of both paths
            sink_write(spark, namesrv, 10_000, True)
            sink: dict[bool, list[float]] = {False: [], True: []}
            for round_ in range(args.repeat):
                for exactly_once in ((False, True) if round_ % 2 == 0 else (True, False)):
                    sink[exactly_once].append(
                        sink_write(spark, namesrv, args.sink_rows, exactly_once))
            latencies = stream_latency(spark, namesrv, args.rate, args.seconds)
            spark.stop()
        finally:
            proc.terminate()
            proc.wait(30)

    result = {
        "messages": stored,
        "load_msgs_s": round(stored / load_s),
        "connector_rows_s": round(connector),
        "client_pull_msgs_s": round(client),
        "connector_vs_client": round(connector / client, 2),
        "sink_rows": args.sink_rows,
        "sink_rows_s": round(statistics.median(sink[False])),
        "sink_exactly_once_rows_s": round(statistics.median(sink[True])),
        "sink_exactly_once_vs_at_least_once": round(
            statistics.median(sink[True]) / statistics.median(sink[False]), 2),
        "sink_rows_s_runs": [round(v) for v in sink[False]],
        "sink_exactly_once_rows_s_runs": [round(v) for v in sink[True]],
        "stream_latency_ms_p50": round(percentile(latencies, 0.5), 1),
        "stream_latency_ms_p99": round(percentile(latencies, 0.99), 1),
        "stream_messages": len(latencies),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{'measure':<34} {'value':>12}")
        print(f"{'messages (128 B) in the topic':<34} {stored:>12,}")
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
        print(f"{'stream latency p50, ms':<34} {result['stream_latency_ms_p50']:>12}")
        print(f"{'stream latency p99, ms':<34} {result['stream_latency_ms_p99']:>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
