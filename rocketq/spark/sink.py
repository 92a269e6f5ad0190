"""The sink of ``format("rocketq")``, batch and streaming: each task sends its rows
(``writes.py``) and tells the driver what it sent; at least once by default, and with
``exactlyOnce`` as half messages the driver commits once per batch (``sink_commits.py``)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from .access import Access
from .options import option_flag, option_value
from .sink_commits import abort_sink, commit_sink
from .writes import Halves, send_batches


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
        self.namesrv = option_value(options, "namesrv")
        self.topic = options.get("topic")
        self.group = option_value(options, "producerGroup", "rocketq-spark-writer")
        self.access = Access.from_options(options)
        self.exactly_once = option_flag(options, "exactlyOnce")
        self.sink = option_value(options, "sinkName", "rocketq-spark")
        if not _SINK_NAME.match(self.sink):
            raise ValueError(f"sinkName must be 1-128 of A-Z a-z 0-9 _ . : -, not {self.sink!r}")
        self.check_after_s = int(option_value(options, "transactionTimeoutSeconds", "900"))
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
            return SentCount(send_batches(self.namesrv, self.topic, self.group,
                                                    batches, access=self.access).count)
        task = TaskContext.get()
        batch = self.job or _stream_batch(task)
        txn = f"{task.partitionId()}.{task.attemptNumber()}.{uuid.uuid4().hex[:12]}"
        sent = send_batches(self.namesrv, self.topic, self.group, batches,
                                      Halves(self.sink, batch, txn,
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
        commit_sink(self.namesrv, self._topics(), addrs, self.sink, batch,
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
            abort_sink(self.namesrv, self._topics(), addrs, self.sink, key,
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
