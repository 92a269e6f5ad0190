"""Applying a push consumer's share of the queues (the push half of RocketMQ's RebalanceImpl:
updateProcessQueueTableInRebalance, and RebalancePushImpl's queue locks).

The group consumer allocates the queues among the group's members; this module turns the
share allocated to this member into work: a queue gained gets a ProcessQueue at the offset to
start from and a pull task, a queue lost is dropped once its work in flight is done and its
offset committed. Orderly clustering consumers lock a queue on its broker before they take it,
renew their locks, and unlock the queues they give up so the next owner can start at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson

from ..protocol import RemotingCommand, RequestCode, ResponseCode
from ..remoting import RemotingError
from .consume_service import ConsumeService
from .errors import ClientError
from .instance import ClientInstance
from .message import MessageQueue
from .offset_store import OffsetStore
from .process_queue import ProcessQueue
from .pull_service import PullService

log = logging.getLogger("rocketq.client")


def diff_queues(owned: Iterable[MessageQueue], topic: str, mine: set[MessageQueue]
                ) -> tuple[list[MessageQueue], list[MessageQueue]]:
    """The queues of ``topic`` lost (owned, in their order, but no longer in ``mine``) and the
    queues gained (in ``mine`` but not owned yet, sorted), when the allocation of ``topic``'s
    queues gives this member ``mine``."""
    owned = list(owned)
    lost = [mq for mq in owned if mq.topic == topic and mq not in mine]
    gained = sorted(mine - set(owned))
    return lost, gained


class QueueLocker:
    """The broker locks of an orderly clustering group's queues (LOCK_BATCH_MQ and
    UNLOCK_BATCH_MQ): a queue is consumed by the one member holding its lock.

    ``maybe_held`` is every queue this member may hold a lock on: a queue joins it before its
    LOCK_BATCH_MQ is sent, and leaves it only when the broker answered that the lock is
    someone else's or that it was released. A rebalance cancelled by the consumer's shutdown
    between locking a queue and owning it (or between giving it up and unlocking it) leaves
    the queue here, so ``unlock_all`` still releases it and the next owner need not wait out
    the broker's 60 s lock."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        self.maybe_held: set[MessageQueue] = set()

    async def lock(self, queues: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ on each broker: the queues this member now holds."""
        held: set[MessageQueue] = set()
        for broker, mqs in by_broker(queues).items():
            body = orjson.dumps({"consumerGroup": self.group,
                                 "clientId": self.instance.client_id, "onlyThisBroker": False,
                                 "mqSet": [mq.to_json() for mq in mqs]})
            self.maybe_held.update(mqs)
            try:
                response = await self.instance.invoke_broker(broker, RemotingCommand.request(
                    RequestCode.LOCK_BATCH_MQ, None, body), 3, mqs[0].topic)
            except (ClientError, RemotingError, OSError) as exc:
                log.info("locking queues on %s failed: %s", broker, exc)
                continue
            if response.code == ResponseCode.SUCCESS:
                locked = {MessageQueue(q["topic"], q["brokerName"], int(q["queueId"]))
                          for q in orjson.loads(response.body).get("lockOKMQSet") or []}
                held |= locked
                self.maybe_held.difference_update(mq for mq in mqs if mq not in locked)
        return held

    async def unlock(self, mq: MessageQueue) -> None:
        """UNLOCK_BATCH_MQ of one queue; a failure only delays the next owner (the lock
        expires by itself)."""
        await self._unlock(mq.broker_name, [mq])

    async def unlock_all(self, queues: Iterable[MessageQueue] = ()) -> None:
        """UNLOCK_BATCH_MQ of ``queues`` and of every queue this member may still hold, one
        request per broker (RocketMQ's RebalanceImpl.unlockAll at shutdown)."""
        await asyncio.gather(*(self._unlock(broker, mqs) for broker, mqs in
                               by_broker(self.maybe_held.union(queues)).items()))

    async def _unlock(self, broker: str, mqs: list[MessageQueue]) -> None:
        body = orjson.dumps({"consumerGroup": self.group, "clientId": self.instance.client_id,
                             "mqSet": [mq.to_json() for mq in mqs]})
        try:
            response = await self.instance.invoke_broker(broker, RemotingCommand.request(
                RequestCode.UNLOCK_BATCH_MQ, None, body), 3, mqs[0].topic)
        except (ClientError, RemotingError, OSError) as exc:
            log.info("unlocking %s failed: %s (the lock expires by itself)",
                     ", ".join(map(str, mqs)), exc)
            return
        if response.code == ResponseCode.SUCCESS:
            self.maybe_held.difference_update(mqs)


def by_broker(queues: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
    """``queues`` grouped by the broker that serves them, each list sorted."""
    grouped: dict[str, list[MessageQueue]] = {}
    for mq in sorted(queues):
        grouped.setdefault(mq.broker_name, []).append(mq)
    return grouped


async def apply_share(owned: dict[MessageQueue, Any], topic: str, mine: set[MessageQueue],
                      offset_store: OffsetStore, group: str, *,
                      stop: Callable[[MessageQueue, Any], Awaitable[None]],
                      start_offset: Callable[[MessageQueue], Awaitable[int]],
                      start: Callable[[MessageQueue, int], Any],
                      may_take: Callable[[MessageQueue], Awaitable[bool]] | None = None,
                      released: Callable[[MessageQueue], Awaitable[None]] | None = None,
                      ) -> None:
    """Own exactly ``mine`` of ``topic``'s queues (RocketMQ's
    updateProcessQueueTableInRebalance), for every kind of consumer.

    A queue lost is stopped (``stop`` waits for its work in flight), its offset committed and
    forgotten, then ``released`` (orderly consumers unlock it). A queue gained is taken if
    ``may_take`` allows (orderly consumers lock it first), from ``start_offset``; ``start``
    returns what ``owned`` keeps for it. ``owned`` is changed in place; callers serialize.
    """
    lost, gained = diff_queues(owned, topic, mine)
    for mq in lost:
        await stop(mq, owned[mq])
        await offset_store.persist([mq])
        offset_store.remove(mq)
        del owned[mq]
        if released is not None:
            await released(mq)
        log.info("group %s released %s", group, mq)
    for mq in gained:
        if may_take is not None and not await may_take(mq):
            continue
        try:
            offset = await start_offset(mq)
        except (ClientError, RemotingError, OSError) as exc:
            log.warning("cannot find where to consume %s from: %s", mq, exc)
            continue
        offset_store.update(mq, offset)
        owned[mq] = start(mq, offset)
        log.info("group %s took %s from offset %d", group, mq, offset)


class PushRebalance:
    """Starts and stops the work on a push consumer's queues as its share changes.

    ``process_queues`` is the consumer's table of owned queues, changed in place; callers
    serialize ``update``, ``reset`` and ``drop_all`` (the consumer's queues lock)."""

    def __init__(self, process_queues: dict[MessageQueue, ProcessQueue], pulls: PullService,
                 consume: ConsumeService, offset_store: OffsetStore,
                 start_offset: Callable[[MessageQueue], Awaitable[int]],
                 locker: QueueLocker | None, *, group: str) -> None:
        self.process_queues = process_queues
        self.pulls = pulls
        self.consume = consume
        self.offset_store = offset_store
        #: Where consumption of a newly gained queue starts (computePullFromWhere).
        self.start_offset = start_offset
        #: Orderly clustering consumers only.
        self.locker = locker
        self.group = group

    def _start(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        pq = ProcessQueue(mq, offset)
        pq.locked = True  # locked before it was taken (or no lock is needed)
        self.pulls.start(pq)
        return pq

    def _stop(self, pq: ProcessQueue) -> None:
        pq.dropped = True
        self.pulls.stop(pq)

    async def update(self, topic: str, mine: set[MessageQueue]) -> None:
        """Own exactly ``mine`` of ``topic``'s queues."""
        locker = self.locker
        await apply_share(
            self.process_queues, topic, mine, self.offset_store, self.group,
            stop=self._stop_and_wait, start_offset=self.start_offset, start=self._start,
            may_take=None if locker is None else self._lock_one,
            released=None if locker is None else locker.unlock)

    async def _stop_and_wait(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self._stop(pq)
        await self.consume.wait_queue(pq)

    async def _lock_one(self, mq: MessageQueue) -> bool:
        assert self.locker is not None
        return mq in await self.locker.lock([mq])

    async def reset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Consume the owned queues of ``topic`` in ``offsets`` from there, as RocketMQ's
        MQClientInstance.resetOffset does: each queue's ProcessQueue is dropped with the
        messages it holds (a listener still busy with one of them has its result ignored),
        the new offsets go to the offset store and are committed, and a new ProcessQueue
        pulls from the new offset."""
        dropped = []
        for mq, offset in sorted(offsets.items()):
            pq = self.process_queues.get(mq)
            if mq.topic != topic or pq is None or pq.dropped:
                continue
            self._stop(pq)
            dropped.append((mq, pq, offset))
        for mq, pq, offset in dropped:
            # Orderly: the queue's messages stay in order across the reset.
            await self.consume.wait_queue(pq)
            self.offset_store.update(mq, offset)
            fresh = self._start(mq, offset)
            fresh.locked = pq.locked
            self.process_queues[mq] = fresh
            log.info("group %s consumes %s from offset %d after a reset", self.group, mq,
                     offset)
        await self.offset_store.persist([mq for mq, _, _ in dropped])

    async def relock(self) -> None:
        """Renew the locks of every owned queue; a queue whose lock is lost pauses."""
        if self.locker is None:
            return
        owned = list(self.process_queues)
        if not owned:
            return
        held = await self.locker.lock(owned)
        for mq in owned:
            pq = self.process_queues.get(mq)
            if pq is not None:
                pq.locked = mq in held

    async def relock_loop(self, interval: float) -> None:
        """Renew the locks every ``interval`` seconds (they expire after 60 s) until
        cancelled."""
        while True:
            await asyncio.sleep(interval)
            await self.relock()

    async def drop_all(self) -> None:
        """The consumer stops: drop every queue; orderly consumers commit their offsets
        first, then unlock the queues, and any a cancelled rebalance locked without taking,
        so the next owners can lock them at once."""
        for pq in self.process_queues.values():
            pq.dropped = True
        if self.locker is not None:
            await self.offset_store.persist(list(self.process_queues))
            await self.locker.unlock_all(self.process_queues)
