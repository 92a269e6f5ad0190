"""A Spark driver for the kill test: topic KIn -> "out-<body>" -> topic KOut through the
exactly-once sink, on a checkpoint, until killed (``run``) or until KIn is drained
(``drain``).

With ``PAUSE_AFTER_COMMIT=<file>`` in the environment, the sink's commit of the first
non-empty micro-batch is followed by creating ``<file>`` and a long sleep: the brokers have
committed and Spark has not yet recorded the batch done, the moment a kill must not turn
into duplicates.
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketq.spark import RocketMQDataSource, RocketMQStreamWriter


class PausingWriter(RocketMQStreamWriter):
    def commit(self, messages, batchId):  # noqa: N803
        super().commit(messages, batchId)
        pause = os.environ.get("PAUSE_AFTER_COMMIT")
        if pause and any(getattr(m, "counts", None) for m in messages):
            with open(pause, "w") as fh:
                fh.write(str(batchId))
            time.sleep(120)


class PausingSource(RocketMQDataSource):
    @classmethod
    def name(cls):
        return "rocketq_pausing"

    def streamWriter(self, schema, overwrite):  # noqa: N802
        return PausingWriter({str(k).lower(): v for k, v in dict(self.options).items()})


def main(namesrv: str, checkpoint: str, mode: str) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("rocketq-kill")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.extraJavaOptions",
                     "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PausingSource)
    writer = (spark.readStream.format("rocketq").option("namesrv", namesrv)
              .option("topic", "KIn").option("startingOffsets", "earliest")
              .option("maxMessagesPerTrigger", "150").load()
              .select(F.concat(F.lit("out-"), F.col("body").cast("string")).alias("body"))
              .writeStream.format("rocketq_pausing").option("namesrv", namesrv)
              .option("topic", "KOut").option("exactlyOnce", "true")
              .option("sinkName", "kill-test").option("checkpointLocation", checkpoint))
    if mode == "drain":
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime="100 milliseconds").start()
    print("query started", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        sys.exit(1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
