"""The Structured Streaming job: log lines in, error alerts out.

Reads the ``AppLogs`` topic, parses each line (event time, level, service), and per service
and 10-second event-time window counts the ERROR lines. A 5-second watermark bounds late lines
and lets each window be judged once, when it closes (append mode). A window with at least
``ALERT_ERRORS`` errors becomes an alert on the ``LogAlerts`` topic (JSON, the service as tag
and key), through the exactly-once sink: a micro-batch replayed after a crash or a task
retried on another executor adds no alert twice.

    python -m examples.logs.pipeline --namesrv 127.0.0.1:9876 --checkpoint /tmp/logs-ckpt

On a Spark cluster, give its master (install ``rocketq[spark]`` on the workers, and put the
checkpoint on storage every node sees):

    python -m examples.logs.pipeline --master spark://spark-master:7077 \\
        --namesrv 10.0.0.5:9876 --checkpoint hdfs:///logs/checkpoint
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .lines import LOG_TOPIC

ALERT_TOPIC = "LogAlerts"
WINDOW = "10 seconds"
WATERMARK = "5 seconds"
ALERT_ERRORS = 5
LINE = r"^(\S+) (\S+) (\S+) (.*)$"


def session(master: str = "local[2]") -> Any:
    """A SparkSession whose Python workers use this interpreter (they import rocketq)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("rocketq-logs")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.pyspark.python", sys.executable)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def parsed(spark: Any, namesrv: str, topic: str = LOG_TOPIC,
           starting_offsets: str = "earliest") -> Any:
    """The streaming DataFrame of log lines: event_time, level, service, text."""
    from pyspark.sql import functions as F

    body = F.col("body").cast("string")
    return (spark.readStream.format("rocketq").option("namesrv", namesrv)
            .option("topic", topic).option("startingOffsets", starting_offsets).load()
            .select(F.to_timestamp(F.regexp_extract(body, LINE, 1),
                                   "yyyy-MM-dd'T'HH:mm:ss.SSSX").alias("event_time"),
                    F.regexp_extract(body, LINE, 2).alias("level"),
                    F.regexp_extract(body, LINE, 3).alias("service"),
                    F.regexp_extract(body, LINE, 4).alias("text"))
            .where(F.col("event_time").isNotNull()))  # not a log line: skipped


def alerts(spark: Any, namesrv: str, topic: str = LOG_TOPIC) -> Any:
    """The streaming DataFrame of alerts, ready for the sink: body (JSON), tags, keys."""
    from pyspark.sql import functions as F

    counts = (parsed(spark, namesrv, topic).withWatermark("event_time", WATERMARK)
              .groupBy(F.window("event_time", WINDOW), "service")
              .agg(F.sum(F.when(F.col("level") == "ERROR", 1).otherwise(0)).alias("errors"),
                   F.count("*").alias("lines")))
    return (counts.where(F.col("errors") >= ALERT_ERRORS)
            .select(F.to_json(F.struct(
                "service",
                F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                F.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                "errors", "lines")).alias("body"),
                F.col("service").alias("tags"), F.col("service").alias("keys")))


def start(spark: Any, namesrv: str, checkpoint: str, *, topic: str = LOG_TOPIC,
          alert_topic: str = ALERT_TOPIC, available_now: bool = False,
          trigger_seconds: float = 1, sink_name: str = "log-alerts") -> Any:
    """Start the query; returns the StreamingQuery. ``sink_name`` names the exactly-once sink:
    one per checkpoint, kept across restarts."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    writer = (alerts(spark, namesrv, topic).writeStream.format("rocketq")
              .outputMode("append").option("namesrv", namesrv).option("topic", alert_topic)
              .option("exactlyOnce", "true").option("sinkName", sink_name)
              .option("checkpointLocation", checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--topic", default=LOG_TOPIC)
    parser.add_argument("--alert-topic", default=ALERT_TOPIC)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--available-now", action="store_true",
                        help="process what is there, then stop")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this long (default: run until Ctrl-C)")
    args = parser.parse_args(argv)
    spark = session(args.master)
    query = start(spark, args.namesrv, args.checkpoint, topic=args.topic,
                  alert_topic=args.alert_topic, available_now=args.available_now)
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
