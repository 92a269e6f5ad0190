"""The batch source of ``format("rocketq")``: one partition per queue, from where
``startingOffsets`` puts it to where ``endingOffsets`` does, planned once when the read is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader

from . import broker_io
from .access import Access
from .options import QueueSelection, apply_timestamps, option_flag, option_value, timestamps
from .partitions import QueueRange, data_lost, read_range


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
        self.starting = option_value(options, "startingOffsets", "first")
        self.ending = option_value(options, "endingOffsets", "last")
        self.access = Access.from_options(options)
        self.selection = QueueSelection(options)
        # A misspelt option fails when the read is defined, not when it is planned.
        broker_io.parse_offsets("startingOffsets", self.starting, "startingTimestamp")
        broker_io.parse_offsets("endingOffsets", self.ending, "endingTimestamp")
        for name in ("startingOffsetsByTimestamp", "endingOffsetsByTimestamp"):
            timestamps(name, options.get(name.lower()))

    def partitions(self) -> list[QueueRange]:
        namesrv = option_value(self.options, "namesrv")
        subscription = option_value(self.options, "subscription", "*")
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
                fail = option_flag(self.options, "failOnDataLoss", "true")
                start = data_lost(fail, topic, broker, queue_id, start, low)
            if end > start:
                parts.append(QueueRange(topic, broker, addr, queue_id, start, end,
                                        subscription, self.access))
        return parts

    def read(self, partition: QueueRange) -> Iterator[Any]:
        return read_range(partition)
