"""A read's Spark partition: one queue's offsets ``[start, end)`` on the broker that owns it
(:class:`QueueRange`), how a task reads one, and what a read does when its start is gone
(retention deleted it). The batch and the streaming readers plan them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from .access import PLAIN, Access
from .pulls import pull_batches


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
    access: Access

    def __init__(self, topic: str, broker: str, addr: str, queue_id: int, start: int,
                 end: int, subscription: str,
                 access: Access = PLAIN) -> None:
        super().__init__((topic, broker, queue_id))
        self.topic, self.broker, self.addr = topic, broker, addr
        self.queue_id, self.start, self.end = queue_id, start, end
        self.subscription = subscription
        self.access = access


def data_lost(fail: bool, topic: str, broker: str, queue_id: int, start: int,
               low: int) -> int:
    """Where to read from when ``start`` is below a queue's min offset ``low``: fail, as
    Kafka's source does by default, or skip to ``low``."""
    if fail:
        raise ValueError(
            f"offsets {start}..{low - 1} of {topic}@{broker}:{queue_id} are gone (retention "
            "deleted them); set the option failOnDataLoss=false to skip to what is left")
    return low


def read_range(partition: QueueRange) -> Iterator[Any]:
    """Arrow record batches of one partition, pulled from the broker that owns its queue."""
    return pull_batches(partition.addr, partition.topic, partition.queue_id,
                        partition.start, partition.end, partition.broker,
                        partition.subscription, access=partition.access)
