"""A PySpark data source for rocketq (and any RocketMQ-protocol broker): ``format("rocketq")``.

    spark.read.format("rocketq").option("namesrv", "127.0.0.1:9876")
         .option("topic", "Orders").load()
    df.write.format("rocketq").option("namesrv", ...).option("topic", "Results").save()

Reading plans one Spark partition per message queue (broker and queue id) and offset range
and pulls each range straight from the broker that owns it, without consumer-group
rebalancing, so Spark decides what is read. Writing sends each row through rocketq's producer;
a failed send fails the task (at least once).

Needs ``pyspark[sql]>=4.2`` (``pip install rocketq[spark]``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
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

from . import broker_io

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


@dataclass
class QueueRange(InputPartition):  # type: ignore[misc]
    """One queue's offsets ``[start, end)`` on the broker at ``addr``."""

    topic: str
    broker: str
    addr: str
    queue_id: int
    start: int
    end: int
    subscription: str

    def __init__(self, topic: str, broker: str, addr: str, queue_id: int, start: int,
                 end: int, subscription: str) -> None:
        super().__init__((topic, broker, queue_id))
        self.topic, self.broker, self.addr = topic, broker, addr
        self.queue_id, self.start, self.end = queue_id, start, end
        self.subscription = subscription


def _lower(options: Any) -> dict[str, str]:
    """Spark's options are case-insensitive: keep them with lowercase keys."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def _option(options: dict[str, str], name: str, default: str | None = None) -> str:
    value = options.get(name.lower(), default)
    if value is None:
        raise ValueError(f"the rocketq data source needs the option {name!r}")
    return value


def _topics(options: dict[str, str]) -> list[str]:
    return [t.strip() for t in _option(options, "topic").split(",") if t.strip()]


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000)


def row_of(message: Any, topic: str, broker: str) -> tuple[Any, ...]:
    """A message as a row of SCHEMA."""
    props = message.properties
    return (topic, broker, message.queue_id, message.queue_offset, message.msg_id,
            props.get("TAGS"), message.keys, message.body, dict(props),
            _ts(message.born_timestamp), _ts(message.store_timestamp), message.reconsume_times)


class RocketMQDataSource(DataSource):  # type: ignore[misc]
    """``format("rocketq")``: batch reads and writes of rocketq topics."""

    @classmethod
    def name(cls) -> str:
        return "rocketq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketMQBatchReader(_lower(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return RocketMQWriter(_lower(self.options))


class RocketMQBatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[QueueRange]:
        namesrv = _option(self.options, "namesrv")
        subscription = _option(self.options, "subscription", "*")
        starting = _option(self.options, "startingOffsets", "earliest")
        ending = _option(self.options, "endingOffsets", "latest")
        queues = broker_io.queue_offsets(namesrv, _topics(self.options))
        parts = []
        for (topic, broker, addr, queue_id), (low, high) in sorted(queues.items()):
            start = broker_io.pick_offset(starting, topic, broker, queue_id, low, high, low)
            end = broker_io.pick_offset(ending, topic, broker, queue_id, low, high, high)
            if start < low:
                if _option(self.options, "failOnDataLoss", "true").lower() == "true":
                    raise ValueError(
                        f"offsets {start}..{low} of {topic}@{broker}:{queue_id} are gone "
                        "(retention deleted them); set failOnDataLoss=false to skip them")
                start = low
            if end > start:
                parts.append(QueueRange(topic, broker, addr, queue_id, start, end,
                                        subscription))
        return parts

    def read(self, partition: QueueRange) -> Iterator[tuple[Any, ...]]:
        for message in broker_io.pull_range(partition.addr, partition.topic,
                                            partition.queue_id, partition.start, partition.end,
                                            partition.subscription):
            yield row_of(message, partition.topic, partition.broker)


@dataclass
class SentCount(WriterCommitMessage):  # type: ignore[misc]
    count: int


class RocketMQWriter(DataSourceWriter):  # type: ignore[misc]
    """Rows with ``body`` (binary or string) and optional ``topic``, ``tags``, ``keys``,
    ``properties`` become messages; the ``topic`` option is the default topic."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        _option(options, "namesrv")

    def write(self, rows: Iterator[Any]) -> SentCount:
        return SentCount(broker_io.send_rows(
            _option(self.options, "namesrv"), self.options.get("topic"),
            _option(self.options, "producerGroup", "rocketq-spark-writer"), rows))
