"""Allocation strategies: every queue to exactly one member, stable, as RocketMQ computes."""

from __future__ import annotations

import pytest

from rocketq.client import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateConsistentHash,
    MessageQueue,
)

QUEUES = [MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(4)]


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle(),
                                      AllocateConsistentHash()])
@pytest.mark.parametrize("members", [1, 2, 3, 5, 8, 11])
def test_every_queue_goes_to_exactly_one_member(strategy, members):
    consumers = sorted(f"c{i}" for i in range(members))
    owned = [q for c in consumers for q in strategy.allocate("g", c, QUEUES, consumers)]
    assert sorted(owned) == sorted(QUEUES)


def test_averagely_matches_rocketmq_blocks():
    consumers = ["c0", "c1", "c2"]
    got = [AllocateAveragely().allocate("g", c, QUEUES, consumers) for c in consumers]
    assert [len(g) for g in got] == [3, 3, 2]
    assert got[0] == QUEUES[0:3] and got[1] == QUEUES[3:6] and got[2] == QUEUES[6:8]
    assert AllocateAveragely().allocate("g", "other", QUEUES, consumers) == []


def test_by_circle_and_by_config():
    got = AllocateAveragelyByCircle().allocate("g", "c1", QUEUES, ["c0", "c1", "c2"])
    assert got == [QUEUES[1], QUEUES[4], QUEUES[7]]
    mine = [QUEUES[2], MessageQueue("T", "gone", 0)]
    assert AllocateByConfig(mine).allocate("g", "c0", QUEUES, ["c0"]) == [QUEUES[2]]


def test_consistent_hash_moves_few_queues_when_a_member_leaves():
    queues = [MessageQueue("T", "b", q) for q in range(64)]
    strategy = AllocateConsistentHash(virtual_nodes=20)
    before = {q: c for c in ["c0", "c1", "c2", "c3"]
              for q in strategy.allocate("g", c, queues, ["c0", "c1", "c2", "c3"])}
    after = {q: c for c in ["c0", "c1", "c2"]
             for q in strategy.allocate("g", c, queues, ["c0", "c1", "c2"])}
    moved = [q for q in queues if before[q] != after[q]]
    assert all(before[q] == "c3" for q in moved)  # only the leaver's queues move
