"""How far each consumer group is behind on each topic of a broker (RocketMQ's
ConsumerLagCalculator), computed when Prometheus asks, from the consumer offsets, the queues'
offsets, where the group's pulls read next (``Stats.pull_offsets``) and the POP messages out.

Per (group, topic), summed over the topic's queues on this broker:

- ``lag``: messages not consumed yet: from the committed offset to the queue's end, plus
  POP messages handed out and not acked (their offset has moved on already).
- ``inflight``: of those, the ones handed out: pulled past the committed offset, or popped
  and not acked.
- ``ready``: the others, waiting to be pulled: from where the pulls read next to the end.
- ``lag_latency_ms``: how long the oldest message not consumed has been stored.
- ``queueing_latency_ms``: how long the oldest message not pulled yet has been stored.

Messages older than a queue's first (gone with their CommitLog file) are not counted. The
computation reads one store timestamp per queue behind, so a broker with many queues pays for
it once per scrape; ``LagTable`` keeps one result for a second, for the collectors that share
it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..broker import Broker

#: How long one computation serves the collectors that ask (seconds).
REUSE = 1.0


@dataclass
class Lag:
    """One group's position on one topic of this broker."""

    group: str
    topic: str
    lag: int = 0
    inflight: int = 0
    ready: int = 0
    #: The group's committed offsets summed over the queues.
    consumer_offset: int = 0
    lag_latency_ms: int = 0
    queueing_latency_ms: int = 0


class LagTable:
    """The lags of one broker's groups, computed at most once per ``REUSE`` seconds."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._at = -REUSE
        self._rows: list[Lag] = []

    def rows(self) -> list[Lag]:
        now = time.monotonic()
        if now - self._at >= REUSE:
            self._rows = consumer_lags(self.broker)
            self._at = now
        return self._rows


def _popped(broker: Broker) -> dict[tuple[str, str, int], tuple[int, int, bool]]:
    """POP messages out, per (group, topic read, queue): (how many, lowest offset, FIFO)."""
    out: dict[tuple[str, str, int], tuple[int, int, bool]] = {}
    for ck in list(broker.pop.checkpoints.values()):
        open_offsets = ck.open
        if not open_offsets:
            continue
        key = (ck.group, ck.topic, ck.queue_id)
        count, low, fifo = out.get(key, (0, open_offsets[0], ck.fifo))
        out[key] = (count + len(open_offsets), min(low, min(open_offsets)), fifo or ck.fifo)
    return out


def consumer_lags(broker: Broker) -> list[Lag]:
    """Every (group, topic) with offsets on this broker, with its lag; none before the store
    is open."""
    store = broker.store
    if store is None:
        return []
    with broker.offsets.lock:
        table = {key: dict(queues) for key, queues in broker.offsets.offsets.items()}
    pulls = broker.stats.pull_offsets
    popped = _popped(broker)
    now_ms = int(time.time() * 1000)
    rows = []
    for key, queues in table.items():
        topic, _, group = key.partition("@")
        row = Lag(group, topic)
        oldest_unconsumed = oldest_unpulled = None
        for queue_id, committed in queues.items():
            end = store.get_max_offset(topic, queue_id)
            low = store.get_min_offset(topic, queue_id)
            done = min(max(committed, low), end)
            row.consumer_offset += committed
            pulled = pulls.get((group, topic, queue_id))
            pulled = done if pulled is None else min(max(pulled, done), end)
            count, first_out, fifo = popped.get((group, topic, queue_id), (0, end, False))
            row.lag += end - done + (0 if fifo else count)
            row.inflight += pulled - done + count
            row.ready += end - pulled - (count if fifo else 0)
            first = min(done, first_out) if count else done
            if first < end:
                stamp = store.get_message_store_timestamp(topic, queue_id, first)
                if stamp is not None and (oldest_unconsumed is None or stamp < oldest_unconsumed):
                    oldest_unconsumed = stamp
            if pulled < end:
                stamp = store.get_message_store_timestamp(topic, queue_id, pulled)
                if stamp is not None and (oldest_unpulled is None or stamp < oldest_unpulled):
                    oldest_unpulled = stamp
        row.ready = max(0, row.ready)
        if oldest_unconsumed is not None:
            row.lag_latency_ms = max(0, now_ms - oldest_unconsumed)
        if oldest_unpulled is not None:
            row.queueing_latency_ms = max(0, now_ms - oldest_unpulled)
        rows.append(row)
    return rows
