"""The push consumer's parts without a broker: the process queue's order and commit offsets,
the consume services' commits and retries, the pull service's flow control and the rebalance's
handling of queues gained and lost."""

from __future__ import annotations

import asyncio

from rocketq.client.consume_service import (
    ConcurrentConsumeService,
    ConsumeResult,
    OrderlyConsumeService,
)
from rocketq.client.message import MessageQueue, ReceivedMessage
from rocketq.client.process_queue import ProcessQueue
from rocketq.client.pull_service import PullService
from rocketq.client.rebalance import PushRebalance, diff_queues

MQ = MessageQueue("T", "broker-a", 0)


def msg(offset: int, body: bytes = b"x", mq: MessageQueue = MQ) -> ReceivedMessage:
    return ReceivedMessage(mq.topic, body, mq.queue_id, offset, 1000 + offset, mq.broker_name,
                           {}, f"id{offset}", f"oid{offset}", 0, 0, ("127.0.0.1", 1),
                           ("127.0.0.1", 2), 0)


class Store:
    """An in-memory offset store that records what was persisted and removed."""

    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}
        self.persisted: list[MessageQueue] = []
        self.removed: list[MessageQueue] = []

    def update(self, mq, offset, increase_only=False):
        current = self.table.get(mq)
        if current is None or not increase_only or offset > current:
            self.table[mq] = offset

    def read_memory(self, mq):
        return self.table.get(mq)

    async def persist(self, queues):
        self.persisted.extend(queues)

    def remove(self, mq):
        self.removed.append(mq)
        self.table.pop(mq, None)


class Back:
    """Stands for the broker's send back: succeeds or fails as told."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.sent: list[int] = []

    async def send_back(self, m):
        self.sent.append(m.queue_offset)
        return self.ok

    async def resend_to_retry_topic(self, m):
        self.sent.append(m.queue_offset)
        return self.ok


# ---------------------------------------------------------------------- process queue
def test_process_queue_keeps_offset_order_and_counts_bytes():
    pq = ProcessQueue(MQ, 10)
    pq.put([msg(12, b"ccc"), msg(10, b"a"), msg(11, b"bb")])
    pq.put([msg(11, b"bb")])  # already held: kept once
    assert list(pq.messages) == [10, 11, 12]
    assert pq.count == 3 and pq.cached_bytes == 6 and pq.max_offset == 12
    assert pq.commit_offset == 10


def test_commit_offset_stays_below_a_message_still_consumed():
    pq = ProcessQueue(MQ, 0)
    batch = [msg(o) for o in range(5)]
    pq.put(batch)
    # Finished out of order: the smallest offset still held bounds the commit offset.
    assert pq.remove([batch[3]]) == 0
    assert pq.remove([batch[1], batch[4]]) == 0
    assert pq.remove([batch[0]]) == 2
    assert pq.remove([batch[2]]) == 5  # nothing held: after the last message pulled
    assert pq.cached_bytes == 0 and pq.last_consume_timestamp > 0


def test_skip_to_moves_the_commit_point_only_when_nothing_is_held():
    pq = ProcessQueue(MQ, 0)
    pq.skip_to(7)  # filtered out up to 7
    assert pq.commit_offset == 7
    pq.put([msg(8)])
    pq.skip_to(20)
    assert pq.commit_offset == 8


def test_orderly_take_and_commit():
    pq = ProcessQueue(MQ, 0)
    pq.put([msg(o) for o in range(5)])
    first = pq.take(2)
    assert [m.queue_offset for m in first] == [0, 1]
    assert pq.count == 5 and pq.commit_offset == 0  # taken, not consumed yet
    # Not committed (the listener asked to retry): the same batch comes again.
    assert [m.queue_offset for m in pq.take(2)] == [0, 1]
    assert pq.commit() == 2
    assert [m.queue_offset for m in pq.take(10)] == [2, 3, 4]
    assert pq.commit() == 5 and pq.count == 0
    assert pq.take(1) == [] and pq.commit() == 5


# ---------------------------------------------------------------------- consume services
def test_concurrent_service_commits_after_out_of_order_completion():
    async def main():
        release = {o: asyncio.Event() for o in range(3)}
        order = []

        async def listener(msgs):
            await release[msgs[0].queue_offset].wait()
            order.append(msgs[0].queue_offset)
            return ConsumeResult.SUCCESS

        store = Store()
        service = ConcurrentConsumeService(listener, None, store, Back(), group="g",
                                           batch_size=1, broadcasting=False)
        pq = ProcessQueue(MQ, 0)
        batch = [msg(o) for o in range(3)]
        pq.put(batch)
        service.submit(pq, batch)
        release[2].set()
        await asyncio.sleep(0.01)
        assert order == [2] and store.table.get(MQ, 0) == 0
        release[0].set()
        await asyncio.sleep(0.01)
        assert store.table[MQ] == 1  # 1 is still being consumed
        release[1].set()
        await service.wait(1)
        assert store.table[MQ] == 3 and service.consumed_count == 3

    asyncio.run(main())


def test_concurrent_service_sends_failed_messages_back():
    async def main():
        store, back = Store(), Back()
        service = ConcurrentConsumeService(lambda msgs: ConsumeResult.RECONSUME_LATER, None,
                                           store, back, group="g", batch_size=2,
                                           broadcasting=False)
        pq = ProcessQueue(MQ, 0)
        batch = [msg(0), msg(1)]
        pq.put(batch)
        service.submit(pq, batch)
        await asyncio.sleep(0.05)
        await service.wait(1)
        assert back.sent == [0, 1]
        assert store.table[MQ] == 2 and pq.count == 0  # handed back counts as consumed

    asyncio.run(main())


def test_orderly_service_retries_a_batch_before_the_next():
    async def main():
        seen = []

        def listener(msgs):
            m = msgs[0]
            seen.append((m.queue_offset, m.reconsume_times))
            if m.queue_offset == 1 and m.reconsume_times < 2:
                return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return None

        store = Store()
        service = OrderlyConsumeService(listener, None, store, Back(), group="g",
                                        batch_size=1, needs_lock=True, max_reconsume_times=16,
                                        suspend_time=0.01)
        pq = ProcessQueue(MQ, 0)
        pq.locked = True
        batch = [msg(o) for o in range(3)]
        pq.put(batch)
        service.submit(pq, batch)
        service.submit(pq, [])  # one consume task per queue at a time
        await service.wait_queue(pq, 5)
        assert seen == [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0)]
        assert store.table[MQ] == 3 and service.consumed_count == 3

    asyncio.run(main())


def test_orderly_service_waits_for_the_queue_lock():
    async def main():
        seen = []
        service = OrderlyConsumeService(lambda msgs: seen.extend(msgs), None, Store(), Back(),
                                        group="g", batch_size=1, needs_lock=True,
                                        max_reconsume_times=16, suspend_time=0.01)
        pq = ProcessQueue(MQ, 0)
        pq.put([msg(0)])
        service.submit(pq, [])
        await asyncio.sleep(0.05)
        assert seen == []  # not locked: nothing consumed
        pq.locked = True
        await service.wait_queue(pq, 5)
        assert len(seen) == 1

    asyncio.run(main())


# ---------------------------------------------------------------------- pull service
def test_pull_service_pauses_a_full_queue():
    service = PullService(None, Store(), dict, lambda pq, msgs: None,  # type: ignore[arg-type]
                          commit_offsets=True, pull_batch_size=32, suspend_timeout=1,
                          threshold_count=2, threshold_bytes=10)
    pq = ProcessQueue(MQ, 0)
    pq.put([msg(0)])
    assert not service.flow_controlled(pq)
    pq.put([msg(1)])
    assert service.flow_controlled(pq)  # two messages
    pq.remove([msg(0), msg(1)])
    pq.put([msg(2, b"0123456789")])
    assert service.flow_controlled(pq)  # ten bytes


# ---------------------------------------------------------------------- rebalance
def test_diff_queues_of_one_topic():
    a0, a1, a2 = (MessageQueue("A", "b", i) for i in range(3))
    other = MessageQueue("B", "b", 0)
    lost, gained = diff_queues([a1, other, a0], "A", {a0, a2})
    assert lost == [a1] and gained == [a2]
    assert diff_queues([a0], "A", {a0}) == ([], [])


class Pulls:
    def __init__(self) -> None:
        self.started: list[ProcessQueue] = []
        self.stopped: list[ProcessQueue] = []

    def start(self, pq):
        self.started.append(pq)

    def stop(self, pq):
        self.stopped.append(pq)


class Consume:
    def __init__(self) -> None:
        self.waited: list[ProcessQueue] = []

    async def wait_queue(self, pq, timeout=10):
        self.waited.append(pq)


class Locker:
    def __init__(self, refused=()) -> None:
        self.refused = set(refused)
        self.unlocked: list[MessageQueue] = []

    async def lock(self, queues):
        return {q for q in queues if q not in self.refused}

    async def unlock(self, mq):
        self.unlocked.append(mq)

    async def unlock_all(self, queues=()):
        self.unlocked.extend(sorted(queues))


def rebalance(table, locker=None, starts=None):
    store, pulls, consume = Store(), Pulls(), Consume()

    async def start_offset(mq):
        return (starts or {}).get(mq, 0)

    parts = PushRebalance(table, pulls, consume, store, start_offset, locker,  # type: ignore
                          group="g")
    return parts, store, pulls, consume


def test_rebalance_starts_gained_and_stops_lost_queues():
    q = [MessageQueue("T", "b", i) for i in range(4)]

    async def main():
        table: dict[MessageQueue, ProcessQueue] = {}
        parts, store, pulls, consume = rebalance(table, starts={q[1]: 7})
        await parts.update("T", {q[0], q[1]})
        assert sorted(table) == [q[0], q[1]]
        assert table[q[1]].next_offset == 7 and store.table[q[1]] == 7
        assert [pq.mq for pq in pulls.started] == [q[0], q[1]]
        lost = table[q[0]]
        await parts.update("T", {q[1], q[2]})
        assert sorted(table) == [q[1], q[2]]
        assert lost.dropped and pulls.stopped == [lost] and consume.waited == [lost]
        assert store.persisted == [q[0]] and store.removed == [q[0]]
        assert [pq.mq for pq in pulls.started] == [q[0], q[1], q[2]]

    asyncio.run(main())


def test_orderly_rebalance_takes_only_locked_queues_and_unlocks_lost_ones():
    q = [MessageQueue("T", "b", i) for i in range(3)]

    async def main():
        table: dict[MessageQueue, ProcessQueue] = {}
        locker = Locker(refused=[q[2]])
        parts, store, pulls, _ = rebalance(table, locker)
        await parts.update("T", set(q))
        assert sorted(table) == [q[0], q[1]]  # q[2] is locked by another member
        assert all(pq.locked for pq in table.values())
        await parts.update("T", {q[1]})
        assert locker.unlocked == [q[0]]
        locker.refused = {q[1]}
        await parts.relock()
        assert not table[q[1]].locked  # the lock was lost: consumption pauses
        await parts.drop_all()
        assert table[q[1]].dropped and locker.unlocked == [q[0], q[1]]
        assert store.persisted[-1:] == [q[1]]

    asyncio.run(main())


def test_reset_replaces_the_process_queues_of_the_topic():
    q = MessageQueue("T", "b", 0)
    other = MessageQueue("U", "b", 0)

    async def main():
        table: dict[MessageQueue, ProcessQueue] = {}
        parts, store, pulls, consume = rebalance(table, starts={q: 50, other: 5})
        await parts.update("T", {q})
        await parts.update("U", {other})
        old = table[q]
        old.locked = False
        await parts.reset("T", {q: 3, other: 0})
        fresh = table[q]
        assert fresh is not old and old.dropped and consume.waited == [old]
        assert fresh.next_offset == 3 and not fresh.locked and store.table[q] == 3
        assert table[other].next_offset == 5 and store.persisted == [q]

    asyncio.run(main())
