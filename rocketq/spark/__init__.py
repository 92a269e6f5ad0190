"""A PySpark data source for rocketq (and any RocketMQ-protocol broker): ``format("rocketq")``.

    spark.read.format("rocketq").option("namesrv", "127.0.0.1:9876")
         .option("topic", "Orders").load()
    df.write.format("rocketq").option("namesrv", ...).option("topic", "Results").save()

Reading plans one Spark partition per message queue (broker and queue id) and offset range
and pulls each range straight from the broker that owns it, without consumer-group
rebalancing, so Spark decides what is read. Writing sends each row through rocketq's producer;
a failed send fails the task, and the retry sends again (at least once). With
``.option("exactlyOnce", "true")`` rows go as transactional half messages that the driver
commits once per batch: a retried task or a replayed micro-batch adds nothing.

Needs ``pyspark[sql]>=4.2`` (``pip install rocketq[spark]``).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .batch_reader import RocketMQBatchReader as RocketMQBatchReader
from .options import QueueSelection as QueueSelection
from .options import apply_timestamps as apply_timestamps
from .options import lowered
from .options import offsets_behind as offsets_behind
from .options import timestamps as timestamps
from .partitions import QueueRange as QueueRange
from .sink import PreparedHalves as PreparedHalves
from .sink import RocketMQStreamWriter as RocketMQStreamWriter
from .sink import RocketMQWriter as RocketMQWriter
from .sink import SentCount as SentCount
from .stream_reader import RocketMQStreamReader as RocketMQStreamReader

SCHEMA = StructType([
    StructField("topic", StringType()),
    StructField("broker", StringType()),
    StructField("queue_id", IntegerType()),
    StructField("queue_offset", LongType()),
    StructField("msg_id", StringType()),
    StructField("tags", StringType()),
    StructField("keys", ArrayType(StringType())),
    StructField("body", BinaryType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("born_timestamp", TimestampType()),
    StructField("store_timestamp", TimestampType()),
    StructField("reconsume_times", IntegerType()),
])


class RocketMQDataSource(DataSource):  # type: ignore[misc]
    """``format("rocketq")``: batch reads and writes of rocketq topics."""

    @classmethod
    def name(cls) -> str:
        return "rocketq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketMQBatchReader(lowered(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return RocketMQWriter(lowered(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(lowered(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RocketMQStreamWriter(lowered(self.options))
