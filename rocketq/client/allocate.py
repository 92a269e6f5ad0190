"""How a clustering consumer group splits a topic's queues among its members (RocketMQ's
AllocateMessageQueueStrategy). Every member computes the same answer from the same sorted
lists, so no coordinator is needed."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Mapping, Sequence
from typing import Protocol

from .message import MessageQueue


class AllocateStrategy(Protocol):
    name: str

    def allocate(self, group: str, current: str, queues: Sequence[MessageQueue],
                 consumers: Sequence[str]) -> list[MessageQueue]: ...


def _check(current: str, queues: Sequence[MessageQueue], consumers: Sequence[str]) -> bool:
    return bool(queues) and current in consumers


class AllocateAveragely:
    """Contiguous blocks: with 8 queues and 3 consumers, 3 + 3 + 2."""

    name = "AVG"

    def allocate(self, group: str, current: str, queues: Sequence[MessageQueue],
                 consumers: Sequence[str]) -> list[MessageQueue]:
        if not _check(current, queues, consumers):
            return []
        index = consumers.index(current)
        n, m = len(queues), len(consumers)
        mod = n % m
        if n <= m:
            size = 1 if index < n else 0
        elif mod > 0 and index < mod:
            size = n // m + 1
        else:
            size = n // m
        start = index * size if mod > 0 and index < mod else index * size + mod
        return list(queues[start:start + min(size, n - start)]) if start < n else []


class AllocateAveragelyByCircle:
    """Round robin: consumer i gets queues i, i+m, i+2m, ..."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current: str, queues: Sequence[MessageQueue],
                 consumers: Sequence[str]) -> list[MessageQueue]:
        if not _check(current, queues, consumers):
            return []
        index = consumers.index(current)
        return [q for i, q in enumerate(queues) if i % len(consumers) == index]


class AllocateConsistentHash:
    """A hash ring with virtual nodes: a member joining or leaving moves few queues."""

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = 10) -> None:
        self.virtual_nodes = virtual_nodes

    @staticmethod
    def _hash(key: str) -> int:
        return int.from_bytes(hashlib.md5(key.encode()).digest()[:8], "big")

    def allocate(self, group: str, current: str, queues: Sequence[MessageQueue],
                 consumers: Sequence[str]) -> list[MessageQueue]:
        if not _check(current, queues, consumers):
            return []
        ring = sorted((self._hash(f"{c}-{i}"), c) for c in consumers
                      for i in range(self.virtual_nodes))
        points = [p for p, _ in ring]
        out = []
        for q in queues:
            i = bisect.bisect_left(points, self._hash(str(q))) % len(ring)
            if ring[i][1] == current:
                out.append(q)
        return out


class AllocateByConfig:
    """A fixed list of queues for this member, whatever the others do."""

    name = "CONFIG"

    def __init__(self, queues: Sequence[MessageQueue] | Mapping[str, Sequence[MessageQueue]]
                 ) -> None:
        self.queues = queues

    def allocate(self, group: str, current: str, queues: Sequence[MessageQueue],
                 consumers: Sequence[str]) -> list[MessageQueue]:
        mine = self.queues.get(current, []) if isinstance(self.queues, Mapping) else self.queues
        available = set(queues)
        return [q for q in mine if q in available]


STRATEGIES = {"averagely": AllocateAveragely, "averagely_by_circle": AllocateAveragelyByCircle,
              "consistent_hash": AllocateConsistentHash}
