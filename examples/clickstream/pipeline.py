"""The Structured Streaming job: clicks in, per-page windowed aggregates out.

Reads the ``Clicks`` topic, parses the JSON bodies, and per 10-second event-time window and
page counts events and purchases and sums revenue. A 5-second watermark bounds late events
and lets each window be emitted once, when it closes (append mode). Every micro-batch of
closed windows goes to the ``ClickStats`` topic (one JSON message per window and page, the
page as the tag), exactly once, and to Parquet files.

    python -m examples.clickstream.pipeline --namesrv 127.0.0.1:9876 \\
        --checkpoint /tmp/clicks-checkpoint --parquet /tmp/click-stats

On a Spark cluster only the master and the addresses change (install ``rocketq[spark]`` on
the workers, and use storage every node sees for the checkpoint and the Parquet output):

    python -m examples.clickstream.pipeline --master spark://spark-master:7077 \\
        --namesrv 10.0.0.5:9876 --checkpoint hdfs:///clicks/checkpoint \\
        --parquet hdfs:///clicks/stats
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

RESULT_TOPIC = "ClickStats"
WINDOW = "10 seconds"
WATERMARK = "5 seconds"
EVENT_SCHEMA = ("event_id long, user string, page string, action string, ts long, "
                "amount_cents long")


def session(master: str = "local[2]") -> Any:
    """A SparkSession whose Python workers use this interpreter (they import rocketq)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("rocketq-clickstream")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def window_stats(spark: Any, namesrv: str, topic: str = "Clicks",
                 starting_offsets: str = "earliest") -> Any:
    """The streaming DataFrame of closed windows: window_start, window_end, page, events,
    purchases, revenue_cents."""
    from pyspark.sql import functions as F

    clicks = (spark.readStream.format("rocketq").option("namesrv", namesrv)
              .option("topic", topic).option("startingOffsets", starting_offsets).load()
              .select(F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("e.*")
              .withColumn("event_time", F.timestamp_millis("ts")))
    return (clicks.withWatermark("event_time", WATERMARK)
            .groupBy(F.window("event_time", WINDOW), "page")
            .agg(F.count("*").alias("events"),
                 F.sum(F.when(F.col("action") == "purchase", 1).otherwise(0)).alias("purchases"),
                 F.sum("amount_cents").alias("revenue_cents"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"),
                    "page", "events", "purchases", "revenue_cents"))


def start(spark: Any, namesrv: str, checkpoint: str, parquet: str, *,
          topic: str = "Clicks", result_topic: str = RESULT_TOPIC,
          available_now: bool = False, trigger_seconds: float = 2,
          sink_name: str = "clickstream-stats") -> Any:
    """Start the query; returns the StreamingQuery. ``sink_name`` names the exactly-once
    sink: one per checkpoint, kept across restarts."""
    from pyspark.sql import functions as F

    def publish(batch: Any, batch_id: int) -> None:
        batch = batch.persist()
        try:
            batch.write.mode("append").parquet(parquet)
            (batch.select(F.to_json(F.struct(
                F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss").alias("window_start"),
                F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ss").alias("window_end"),
                "page", "events", "purchases", "revenue_cents")).alias("body"),
                F.col("page").alias("tags"))
             .write.format("rocketq").option("namesrv", namesrv)
             .option("topic", result_topic)
             # Exactly once: a micro-batch replayed after a crash adds nothing to the topic.
             .option("exactlyOnce", "true").option("sinkName", sink_name)
             .option("batchId", str(batch_id)).mode("append").save())
        finally:
            batch.unpersist()

    writer = (window_stats(spark, namesrv, topic).writeStream.outputMode("append")
              .foreachBatch(publish).option("checkpointLocation", checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--topic", default="Clicks")
    parser.add_argument("--result-topic", default=RESULT_TOPIC)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--parquet", required=True)
    parser.add_argument("--available-now", action="store_true",
                        help="process what is there, then stop")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this long (default: run until Ctrl-C)")
    args = parser.parse_args(argv)
    spark = session(args.master)
    query = start(spark, args.namesrv, args.checkpoint, args.parquet, topic=args.topic,
                  result_topic=args.result_topic, available_now=args.available_now)
    try:
        query.awaitTermination(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
