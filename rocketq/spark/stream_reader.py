"""The streaming source of ``format("rocketq")``: micro-batches planned per queue, their end
offsets kept in Spark's checkpoint, under the trigger's limits (``maxMessagesPerTrigger``,
``minMessagesPerTrigger`` with ``maxTriggerDelay``, ``Trigger.AvailableNow``), and the
offsets Spark is done with recorded as a consumer group's when asked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from . import broker_io
from .access import Access
from .options import (
    QueueSelection,
    apply_timestamps,
    duration_seconds,
    option_flag,
    option_value,
    timestamps,
)
from .partitions import QueueRange, data_lost, read_range


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
        self.namesrv = option_value(options, "namesrv")
        self.selection = QueueSelection(options)
        self.subscription = option_value(options, "subscription", "*")
        self.addrs: dict[str, tuple[str, str, str, int]] = {}
        self.available_now: dict[str, int] | None = None
        #: The queues' max offsets as the last latestOffset saw them (reportLatestOffset).
        self._latest: dict[str, int] | None = None
        # Kafka's names are accepted too: its users reach for them first.
        max_rows = options.get("maxmessagespertrigger") or options.get("maxoffsetspertrigger")
        self.max_rows = int(max_rows) if max_rows else None
        min_rows = options.get("minmessagespertrigger") or options.get("minoffsetspertrigger")
        self.min_rows = int(min_rows) if min_rows else 0
        self.max_delay = duration_seconds("maxTriggerDelay", options.get("maxtriggerdelay", "15m"))
        if (self.max_rows is not None and self.max_rows < 1) or self.min_rows < 0:
            raise ValueError("maxMessagesPerTrigger must be at least 1 and "
                             "minMessagesPerTrigger at least 0")
        #: When the last micro-batch with messages was planned (minMessagesPerTrigger waits
        #: at most maxTriggerDelay after it).
        self._last_batch_at = time.monotonic()
        self.group = options.get("consumergroup")
        self.fail_on_data_loss = option_flag(options, "failOnDataLoss", "true")
        self.access = Access.from_options(options)
        # A misspelt option fails when the query is defined, not at its first batch.
        broker_io.parse_offsets("startingOffsets", self._starting(), "startingTimestamp")
        timestamps("startingOffsetsByTimestamp", options.get("startingoffsetsbytimestamp"))

    def _starting(self) -> str:
        return option_value(self.options, "startingOffsets", "last")

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
                begin = data_lost(self.fail_on_data_loss, topic, broker, qid, begin, low)
                if int(stop) <= begin:
                    continue
            parts.append(QueueRange(topic, broker, addr, qid, begin, int(stop),
                                    self.subscription, self.access))
        return parts

    def read(self, partition: QueueRange) -> Iterator[Any]:
        return read_range(partition)

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
