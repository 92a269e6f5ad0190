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

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
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
from .options import QueueSelection, apply_timestamps, timestamps
from .options import offsets_behind as offsets_behind

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
    access: broker_io.Access

    def __init__(self, topic: str, broker: str, addr: str, queue_id: int, start: int,
                 end: int, subscription: str,
                 access: broker_io.Access = broker_io.PLAIN) -> None:
        super().__init__((topic, broker, queue_id))
        self.topic, self.broker, self.addr = topic, broker, addr
        self.queue_id, self.start, self.end = queue_id, start, end
        self.subscription = subscription
        self.access = access


def _lower(options: Any) -> dict[str, str]:
    """Spark's options are case-insensitive: keep them with lowercase keys."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def _option(options: dict[str, str], name: str, default: str | None = None) -> str:
    value = options.get(name.lower(), default)
    if value is None:
        raise ValueError(f"the rocketq data source needs the option {name!r}")
    return value


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(name: str, value: str) -> float:
    """Seconds of a duration option: ``500ms``, ``30s``, ``15m``, ``1h``, or milliseconds."""
    text = str(value).strip().lower()
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit) and text[:-len(unit)].strip().replace(".", "", 1).isdigit():
            return float(text[:-len(unit)]) * _UNITS[unit]
    if text.isdigit():
        return int(text) / 1000
    raise ValueError(f"{name} must be a duration such as 500ms, 30s or 15m, not {value!r}")


def _flag(options: dict[str, str], name: str, default: str = "false") -> bool:
    value = _option(options, name, default).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, not {value!r}")
    return value == "true"


class RocketMQDataSource(DataSource):  # type: ignore[misc]
    """``format("rocketq")``: batch reads and writes of rocketq topics."""

    @classmethod
    def name(cls) -> str:
        return "rocketq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketMQBatchReader(_lower(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return RocketMQWriter(_lower(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(_lower(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RocketMQStreamWriter(_lower(self.options))


def _data_lost(fail: bool, topic: str, broker: str, queue_id: int, start: int,
               low: int) -> int:
    """Where to read from when ``start`` is below a queue's min offset ``low``: fail, as
    Kafka's source does by default, or skip to ``low``."""
    if fail:
        raise ValueError(
            f"offsets {start}..{low - 1} of {topic}@{broker}:{queue_id} are gone (retention "
            "deleted them); set the option failOnDataLoss=false to skip to what is left")
    return low


def _read(partition: QueueRange) -> Iterator[Any]:
    """Arrow record batches of one partition, pulled from the broker that owns its queue."""
    return broker_io.pull_batches(partition.addr, partition.topic, partition.queue_id,
                                  partition.start, partition.end, partition.broker,
                                  partition.subscription, access=partition.access)


def _key(topic: str, broker: str, queue_id: int) -> str:
    return f"{topic}|{broker}|{queue_id}"


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Streams the queues ``topic``, ``subscribePattern`` or ``assign`` names (see
    ``options.QueueSelection``). Offsets are ``{"topic|broker|queueId": next offset}``, kept
    in Spark's checkpoint, so a query restarted on its checkpoint neither loses nor repeats a
    message. Queues added to a topic later, and topics created later that
    ``subscribePattern`` matches, are picked up from their first offset.

    A new query starts where ``startingOffsets`` says: ``last`` (the default: only messages
    sent from now on), ``first``, ``timestamp`` (the first message stored at or after the
    option ``startingTimestamp``, in ms since the epoch), or JSON per queue as for batch
    reads. ``earliest`` and ``latest`` are accepted for ``first`` and ``last``, as Kafka's
    source spells them. ``startingOffsetsByTimestamp`` moves the queues it names to a time
    of their own."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.namesrv = _option(options, "namesrv")
        self.selection = QueueSelection(options)
        self.subscription = _option(options, "subscription", "*")
        self.addrs: dict[str, tuple[str, str, str, int]] = {}
        self.available_now: dict[str, int] | None = None
        #: The queues' max offsets as the last latestOffset saw them (reportLatestOffset).
        self._latest: dict[str, int] | None = None
        # Kafka's names are accepted too: its users reach for them first.
        max_rows = options.get("maxmessagespertrigger") or options.get("maxoffsetspertrigger")
        self.max_rows = int(max_rows) if max_rows else None
        min_rows = options.get("minmessagespertrigger") or options.get("minoffsetspertrigger")
        self.min_rows = int(min_rows) if min_rows else 0
        self.max_delay = _duration("maxTriggerDelay", options.get("maxtriggerdelay", "15m"))
        if (self.max_rows is not None and self.max_rows < 1) or self.min_rows < 0:
            raise ValueError("maxMessagesPerTrigger must be at least 1 and "
                             "minMessagesPerTrigger at least 0")
        #: When the last micro-batch with messages was planned (minMessagesPerTrigger waits
        #: at most maxTriggerDelay after it).
        self._last_batch_at = time.monotonic()
        self.group = options.get("consumergroup")
        self.fail_on_data_loss = _flag(options, "failOnDataLoss", "true")
        self.access = broker_io.Access.from_options(options)
        # A misspelt option fails when the query is defined, not at its first batch.
        broker_io.parse_offsets("startingOffsets", self._starting(), "startingTimestamp")
        timestamps("startingOffsetsByTimestamp", options.get("startingoffsetsbytimestamp"))

    def _starting(self) -> str:
        return _option(self.options, "startingOffsets", "last")

    def _queues(self, strict: bool = False) -> dict[str, tuple[int, int]]:
        """``key -> (min offset, max offset)`` of every selected queue now."""
        out = {}
        for (topic, broker, addr, qid), bounds in self.selection.queues(
                self.namesrv, self.access, strict).items():
            key = _key(topic, broker, qid)
            self.addrs[key] = (topic, broker, addr, qid)
            out[key] = bounds
        return out

    def initialOffset(self) -> dict[str, int]:
        queues = {self.addrs[key]: bounds for key, bounds in self._queues(strict=True).items()}
        found = broker_io.resolve_offsets(
            "startingOffsets", self._starting(), queues, "last",
            "startingTimestamp", self.options.get("startingtimestamp"), self.access)
        found = apply_timestamps("startingOffsetsByTimestamp",
                                 self.options.get("startingoffsetsbytimestamp"), queues, found,
                                 self.access)
        return {_key(topic, broker, qid): offset
                for (topic, broker, _addr, qid), offset in found.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = {k: high for k, (_low, high) in self._queues().items()}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        queues = self._queues()
        target = {k: high for k, (_low, high) in queues.items()}
        self._latest = dict(target)
        if self.available_now is not None:
            target = {k: min(v, self.available_now.get(k, v)) for k, v in target.items()}
        current = {k: int(start.get(k, queues[k][0])) for k in target}
        if self.min_rows and self.available_now is None:
            waiting = sum(max(0, v - current[k]) for k, v in target.items())
            if (waiting < self.min_rows
                    and time.monotonic() - self._last_batch_at < self.max_delay):
                return dict(start)  # too few yet: no micro-batch until more or the delay
        end_offsets = self._bounded(start, current, target, limit)
        if any(int(v) > int(start.get(k, -1)) for k, v in end_offsets.items()):
            self._last_batch_at = time.monotonic()
        return end_offsets

    def reportLatestOffset(self) -> dict[str, int] | None:
        """The queues' max offsets as the last ``latestOffset`` saw them (no request of its
        own; Spark asks right after ``latestOffset``), in the offsets' form: Spark shows them
        as the source's ``latestOffset`` in the query's progress, and ``offsets_behind``
        computes Kafka's lag metrics from them. None before the first ``latestOffset``."""
        return None if self._latest is None else dict(self._latest)

    def _bounded(self, start: dict[str, int], current: dict[str, int],
                 target: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """The end offsets of the next micro-batch under ``limit``."""
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
            end = dict(current)
            # Share the budget among queues in turns, so none starves.
            while budget > 0:
                moved = False
                for k in sorted(target):
                    if budget and end[k] < target[k]:
                        step = min(target[k] - end[k], max(1, budget // len(target)))
                        end[k] += step
                        budget -= step
                        moved = True
                if not moved:
                    break
            return {**start, **end}
        return {**start, **{k: max(current[k], v) for k, v in target.items()}}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[QueueRange]:
        parts = []
        bounds: dict[str, tuple[int, int]] | None = None
        for key, stop in sorted(end.items()):
            begin = int(start.get(key, 0))
            if int(stop) <= begin:
                continue
            if bounds is None:
                bounds = self._queues()
            topic, broker, addr, qid = self.addrs[key]
            low = bounds.get(key, (begin, begin))[0]
            if begin < low:
                begin = _data_lost(self.fail_on_data_loss, topic, broker, qid, begin, low)
                if int(stop) <= begin:
                    continue
            parts.append(QueueRange(topic, broker, addr, qid, begin, int(stop),
                                    self.subscription, self.access))
        return parts

    def read(self, partition: QueueRange) -> Iterator[Any]:
        return _read(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Spark's checkpoint owns progress. With the ``consumerGroup`` option, the offsets
        Spark has finished with are also recorded as that group's consumer offsets, so
        ``rocketq admin consumer progress`` shows the query's lag."""
        if not self.group:
            return
        if any(key not in self.addrs for key in end):
            self._queues()
        offsets = {}
        for key, offset in end.items():
            if key in self.addrs:
                topic, _broker, addr, qid = self.addrs[key]
                offsets[(addr, topic, qid)] = int(offset)
        broker_io.commit_offsets(self.group, offsets, self.access)


class RocketMQBatchReader(DataSourceReader):  # type: ignore[misc]
    """Reads each queue ``topic``, ``subscribePattern`` (matched once, when the read is
    planned) or ``assign`` names from ``startingOffsets`` to ``endingOffsets``. Each is
    ``first``, ``last``, ``timestamp`` (the first message stored at or after the option
    ``startingTimestamp`` / ``endingTimestamp``, in ms since the epoch), or JSON per queue
    ``{"topic": {"broker:queueId": offset}}`` (-2 first, -1 last; a queue left out starts at
    its first offset and ends at its last). The defaults read everything: ``first`` to
    ``last``. ``earliest`` and ``latest`` are accepted for ``first`` and ``last``, as Kafka's
    source spells them. ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` move
    the queues they name to a time of their own."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.starting = _option(options, "startingOffsets", "first")
        self.ending = _option(options, "endingOffsets", "last")
        self.access = broker_io.Access.from_options(options)
        self.selection = QueueSelection(options)
        # A misspelt option fails when the read is defined, not when it is planned.
        broker_io.parse_offsets("startingOffsets", self.starting, "startingTimestamp")
        broker_io.parse_offsets("endingOffsets", self.ending, "endingTimestamp")
        for name in ("startingOffsetsByTimestamp", "endingOffsetsByTimestamp"):
            timestamps(name, options.get(name.lower()))

    def partitions(self) -> list[QueueRange]:
        namesrv = _option(self.options, "namesrv")
        subscription = _option(self.options, "subscription", "*")
        queues = self.selection.queues(namesrv, self.access, strict=True)
        starts = broker_io.resolve_offsets("startingOffsets", self.starting, queues, "first",
                                           "startingTimestamp",
                                           self.options.get("startingtimestamp"), self.access)
        starts = apply_timestamps("startingOffsetsByTimestamp",
                                  self.options.get("startingoffsetsbytimestamp"), queues, starts,
                                  self.access)
        ends = broker_io.resolve_offsets("endingOffsets", self.ending, queues, "last",
                                         "endingTimestamp", self.options.get("endingtimestamp"),
                                         self.access)
        ends = apply_timestamps("endingOffsetsByTimestamp",
                                self.options.get("endingoffsetsbytimestamp"), queues, ends,
                                self.access)
        parts = []
        for (topic, broker, addr, queue_id), (low, _high) in sorted(queues.items()):
            start = starts[(topic, broker, addr, queue_id)]
            end = ends[(topic, broker, addr, queue_id)]
            if start < low:
                fail = _flag(self.options, "failOnDataLoss", "true")
                start = _data_lost(fail, topic, broker, queue_id, start, low)
            if end > start:
                parts.append(QueueRange(topic, broker, addr, queue_id, start, end,
                                        subscription, self.access))
        return parts

    def read(self, partition: QueueRange) -> Iterator[Any]:
        return _read(partition)


@dataclass
class SentCount(WriterCommitMessage):  # type: ignore[misc]
    count: int


@dataclass
class PreparedHalves(WriterCommitMessage):  # type: ignore[misc]
    """What a task of an exactly-once sink prepared: its txn in the sink's batch, its half
    messages per broker name, and those brokers' addresses."""

    batch: str
    txn: str
    counts: dict[str, int]
    addrs: dict[str, str]


_SINK_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class RocketMQWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """Rows with ``body`` (binary or string) and optional ``topic``, ``tags``, ``keys``,
    ``properties`` become messages; the ``topic`` option, when given, overrides the ``topic``
    column (as in Kafka's sink).

    By default a failed send fails the task, and Spark's retry sends the task's rows again:
    at least once. With ``exactlyOnce=true`` each task sends its rows as transactional half
    messages, invisible to consumers, under a txn naming the sink, the batch, the partition
    and the attempt; the driver's commit has every broker commit exactly the halves of the
    attempts that succeeded, once, and roll back the rest (see
    ``rocketq/broker/transactions/sink.py``).
    """

    def __init__(self, options: dict[str, str], streaming: bool = False) -> None:
        self.options = options
        self.namesrv = _option(options, "namesrv")
        self.topic = options.get("topic")
        self.group = _option(options, "producerGroup", "rocketq-spark-writer")
        self.access = broker_io.Access.from_options(options)
        self.exactly_once = _flag(options, "exactlyOnce")
        self.sink = _option(options, "sinkName", "rocketq-spark")
        if not _SINK_NAME.match(self.sink):
            raise ValueError(f"sinkName must be 1-128 of A-Z a-z 0-9 _ . : -, not {self.sink!r}")
        self.check_after_s = int(_option(options, "transactionTimeoutSeconds", "900"))
        if self.check_after_s < 1:
            raise ValueError("transactionTimeoutSeconds must be at least 1")
        #: A batch write's key in the sink's ledger: the ``batchId`` option (a foreachBatch
        #: function passes its batch id, so a replayed call adds nothing, as Delta's
        #: txnVersion does), else one of its own. A streaming write's comes from its task.
        batch_id = options.get("batchid")
        self.job = None if streaming else (f"batch-{batch_id}" if batch_id
                                           else f"job-{uuid.uuid4().hex}")

    def write(self, batches: Iterator[Any]) -> SentCount | PreparedHalves:
        if not self.exactly_once:
            return SentCount(broker_io.send_batches(self.namesrv, self.topic, self.group,
                                                    batches, access=self.access).count)
        task = TaskContext.get()
        batch = self.job or _stream_batch(task)
        txn = f"{task.partitionId()}.{task.attemptNumber()}.{uuid.uuid4().hex[:12]}"
        sent = broker_io.send_batches(self.namesrv, self.topic, self.group, batches,
                                      broker_io.Halves(self.sink, batch, txn,
                                                       self.check_after_s),
                                      access=self.access)
        return PreparedHalves(batch, txn, sent.counts, sent.addrs)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.exactly_once and self.job is not None:
            self.commit_batch(messages, self.job)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.exactly_once and self.job is not None:
            self.abort_batch(messages, self.job)

    def _topics(self) -> list[str]:
        return [self.topic] if self.topic else []

    def commit_batch(self, messages: list[WriterCommitMessage | None],
                     batch: str | None) -> None:
        """Commit the halves of the tasks that succeeded; a batch committed before (a
        replay) is not committed again."""
        prepared = [m for m in messages if isinstance(m, PreparedHalves)]
        keys = {m.batch for m in prepared}
        if batch is None:
            if not keys:
                return  # no task ran: nothing was prepared
            if len(keys) > 1:
                raise RuntimeError(f"tasks of one batch prepared under several keys: {keys}")
            batch = keys.pop()
        addrs: dict[str, str] = {}
        for m in prepared:
            addrs.update(m.addrs)
        broker_io.commit_sink(self.namesrv, self._topics(), addrs, self.sink, batch,
                              {m.txn: m.counts for m in prepared}, self.access)

    def abort_batch(self, messages: list[WriterCommitMessage | None],
                    batch: str | None) -> None:
        """Roll back what the batch's tasks prepared (halves nobody rolls back here are
        resolved by the brokers after transactionTimeoutSeconds)."""
        prepared = [m for m in messages if isinstance(m, PreparedHalves)]
        addrs: dict[str, str] = {}
        for m in prepared:
            addrs.update(m.addrs)
        for key in {m.batch for m in prepared} if batch is None else {batch}:
            broker_io.abort_sink(self.namesrv, self._topics(), addrs, self.sink, key,
                                 self.access)


def _stream_batch(task: Any) -> str:
    """A micro-batch's key in the sink's ledger: the query's id (kept in its checkpoint, so
    the same across restarts, and new for a new checkpoint) and the batch id."""
    query = task.getLocalProperty("sql.streaming.queryId")
    batch = task.getLocalProperty("streaming.sql.batchId")
    if not query or batch is None:
        raise RuntimeError("exactlyOnce: this task does not belong to a streaming micro-batch")
    return f"{query}:{batch}"


class RocketMQStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """The streaming sink: each micro-batch's rows are sent as RocketMQWriter sends them; with
    ``exactlyOnce`` the micro-batch is committed on the brokers once, whatever the retries
    and restarts."""

    def __init__(self, options: dict[str, str]) -> None:
        self._writer = RocketMQWriter(options, streaming=True)

    def write(self, batches: Iterator[Any]) -> SentCount | PreparedHalves:
        return self._writer.write(batches)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """At least once: every row was acknowledged already. Exactly once: commit the
        successful attempts' halves (a replayed batch finds its decision and adds nothing)."""
        if self._writer.exactly_once:
            self._writer.commit_batch(messages, None)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """At least once: sent messages stay, and a retried batch sends them again. Exactly
        once: the batch's halves are rolled back."""
        if self._writer.exactly_once:
            self._writer.abort_batch(messages, None)
