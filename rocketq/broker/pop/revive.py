"""The revive side of the POP service (RocketMQ's PopReviveService and the FIFO part of its
ConsumerOrderInfoManager): what happens to messages popped and not acked in time.

- **Replay.** When a broker becomes master it reads the revive topic from the oldest record
  still needed and so rebuilds every checkpoint out, every ack, and each FIFO queue's state.
- **Revival.** A loop looks every ``REVIVE_INTERVAL`` for checkpoints whose time is up and
  stores each message not acked again in the group's pop retry topic, or in its dead-letter
  topic once its attempts are spent; a failure leaves the checkpoint out, to try again.
- **FIFO queues** are opened again once their batch is acked, or after it ran out of time
  (from its first message not acked, with the next attempt).
- **Renewal.** Checkpoints popped for an owner (``auto_renew``) have their invisible time
  grown in place while the owner lives.

``PopRevival`` is a part of ``service.PopService``, sharing its state; the pop is in
``service``, the ack and the change of invisible time in ``acks``.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import orjson

from ...protocol import Perm, Property, encode_properties
from ...protocol.message import MessageRecord
from ...store import GetStatus, StoreMessage
from ..send_back import dead_letter_topic
from .records import (
    RENEW_AHEAD_MS,
    RENEW_BY_MS,
    REVIVE_GROUP,
    REVIVE_INTERVAL,
    CheckPoint,
    FifoState,
    Put,
    pop_retry_topic,
)

if TYPE_CHECKING:
    from ...store import MessageStore
    from ..offsets.table import ConsumerOffsets
    from ..stats import Stats
    from ..subscription_groups import SubscriptionGroupTable
    from ..topics import TopicTable

log = logging.getLogger("rocketq.broker.pop")


class PopRevival:
    """Replay, revival, FIFO reopening and renewal: a part of :class:`service.PopService`.

    It reads and changes the service's state (declared below, set by ``PopService``) and
    calls its ``_write``, ``_track``, ``_mark``, ``_fifo_state`` and ``_notify``."""

    store: MessageStore
    stats: Stats
    put: Put
    topics: TopicTable
    subscription_groups: SubscriptionGroupTable
    offsets: ConsumerOffsets
    topics_changed: Callable[[], None]
    revive_topic: str
    checkpoints: dict[tuple[str, str, int, int, int], CheckPoint]
    fifo: dict[tuple[str, str, int], FifoState]
    _deadlines: list[tuple[int, int, CheckPoint]]
    _seq: Iterator[int]
    _stuck: dict[tuple[str, str, int], CheckPoint]
    _renewing: dict[tuple[str, str, int, int, int], CheckPoint]
    _writing: int
    _last_revive_commit: float

    # ------------------------------------------------------------------ replay
    def replay(self) -> int:
        """Rebuild the state from the revive topic. Returns the records read."""
        store = self.store
        store.catch_up()
        start = self.offsets.query(REVIVE_GROUP, self.revive_topic, 0)
        low = store.get_min_offset(self.revive_topic, 0)
        offset = low if start is None else max(start, low)
        end = store.get_max_offset(self.revive_topic, 0)
        read = 0
        while offset < end:
            result = store.get_messages(self.revive_topic, 0, offset, 256)
            if result.status is not GetStatus.FOUND:
                offset = max(offset + 1, result.next_begin_offset)
                result.release()
                continue
            try:
                for record in result.decode():
                    read += 1
                    try:
                        self._apply(orjson.loads(record.body), record.queue_offset)
                    except (ValueError, KeyError, TypeError, IndexError):
                        log.warning("revive topic %s: record at %d is not a checkpoint or an "
                                    "ack; skipped", self.revive_topic, record.queue_offset)
            finally:
                result.release()
            offset = result.next_begin_offset
        if read:
            log.info("POP: replayed %d checkpoint and ack records from %s: %d checkpoints "
                     "out", read, self.revive_topic, len(self.checkpoints))
        return read

    def _apply(self, data: dict[str, Any], log_offset: int) -> None:
        if data["t"] == "ck":
            ck = CheckPoint.from_record(data, log_offset)
            if not ck.fifo:
                self._track(ck)
            qkey = (ck.group, ck.topic, ck.queue_id)
            if ck.fifo:
                state = self.fifo.setdefault(qkey, FifoState())
                if not data.get("split"):
                    # A new batch: whatever the last one left open was revived before it.
                    for old in state.out:
                        old.done = True
                        self.checkpoints.pop(old.key, None)
                    state.out, state.expired = [], set()
                    state.attempt = ck.attempt
                    state.acked = {int(o) for o in data.get("ak", ())}
                    state.pin = -1
                self._track(ck)
                state.out.append(ck)
            else:
                if (self.offsets.query(ck.group, ck.topic, ck.queue_id) or 0) < ck.next_offset:
                    self.offsets.commit(ck.group, ck.topic, ck.queue_id, ck.next_offset)
        elif data["t"] == "renew":  # an owner's messages kept invisible longer
            ck = self._named(data)
            if ck is not None:
                ck.invisible_ms = int(data["it"])
                heapq.heappush(self._deadlines, (ck.deadline, next(self._seq), ck))
        elif data["t"] == "acks":  # acks written together
            for g, tp, q, so, pt, offsets in data["l"]:
                ck = self._named({"g": g, "tp": tp, "q": q, "so": so, "pt": pt})
                if ck is not None:
                    self._mark(ck, [int(o) for o in offsets])
        elif data["t"] == "ack":
            ck = self._named(data)
            if ck is not None:
                offsets = [int(o) for o in data["o"]]
                if data.get("moved"):
                    ck.moved.update(offsets)
                self._mark(ck, offsets, consumed=not data.get("moved"))
        elif data["t"] == "fifo":  # a FIFO batch revived: where it starts again, and when
            state = self.fifo.setdefault((data["g"], data["tp"], int(data["q"])), FifoState())
            for old in state.out:  # revived with it: out no longer
                old.done = True
                self.checkpoints.pop(old.key, None)
            state.acked = {int(o) for o in data.get("ak", ())}
            self._reopen(state, data["g"], data["tp"], int(data["q"]), int(data["from"]),
                         int(data["a"]))
            if state.acked or state.attempt > 1:
                state.pin = log_offset

    def _named(self, data: dict[str, Any]) -> CheckPoint | None:
        """The checkpoint a record names (see CheckPoint.ref), if it is still out."""
        return self.checkpoints.get((data["g"], data["tp"], int(data["q"]), int(data["so"]),
                                     int(data["pt"])))

    # ------------------------------------------------------------------ revive
    async def _revive_loop(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL)
            try:
                await self.revive_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("POP: reviving messages not acked in time failed; trying again")
                await asyncio.sleep(1)

    async def revive_due(self, now: int | None = None) -> int:
        """Revive every checkpoint whose invisible time is over. Returns messages revived
        (to the retry topic, to the DLQ, or FIFO batches opened again)."""
        now = int(time.time() * 1000) if now is None else now
        revived = 0
        if self._renewing:
            await self._renew(now)
        for qkey, ck in list(self._stuck.items()):  # FIFO queues whose reopening failed
            del self._stuck[qkey]
            revived += await self._reopen_after_expiry(self.fifo[qkey], ck)
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, ck = heapq.heappop(self._deadlines)
            if ck.done or self.checkpoints.get(ck.key) is not ck:
                continue
            if ck.deadline > now:
                continue  # renewed: a later entry stands for it
            if ck.pending:
                # An ack of it is being written: look again shortly.
                heapq.heappush(self._deadlines, (now + 200, next(self._seq), ck))
                continue
            try:
                revived += await (self._revive_fifo(ck) if ck.fifo else self._revive(ck))
            except Exception as exc:
                # Nothing is lost: the checkpoint stays out and is tried again (a full
                # disk, a slave gone under SYNC_MASTER), as RocketMQ re-puts a checkpoint.
                log.warning("POP: reviving %d message(s) of %s:%d for group %s failed, "
                            "retrying in 5 s: %s", len(ck.open), ck.topic, ck.queue_id,
                            ck.group, exc)
                heapq.heappush(self._deadlines, (now + 5000, next(self._seq), ck))
                break
        if time.monotonic() - self._last_revive_commit >= 1.0:
            self._last_revive_commit = time.monotonic()
            self._commit_revive_offset()
        return revived

    async def _revive(self, ck: CheckPoint) -> int:
        max_times = self._retry_max_times(ck.group)
        todo = ck.open
        for offset in todo:
            record = self._read(ck.topic, ck.queue_id, offset)
            if record is None:
                log.warning("POP: message %d of %s:%d is gone from the store; not revived",
                            offset, ck.topic, ck.queue_id)
                continue
            times = record.reconsume_times + 1
            props = dict(record.properties)
            props.setdefault(Property.RETRY_TOPIC, ck.origin)
            props.setdefault("1ST_POP_TIME", str(ck.pop_time))
            if times > max_times:
                message = self._dead_letter(record, ck, times, props)
            else:
                message = StoreMessage.from_record(
                    record, self._retry_topic(ck.group, ck.origin), 0,
                    encode_properties(props), reconsume_times=times)
            await self.put([message])
        await self._write({"t": "ack", **ck.ref(), "o": todo})
        ck.acked.update(todo)
        self._finish(ck)
        if todo:
            self._notify(ck.origin)
        return len(todo)

    async def _revive_fifo(self, ck: CheckPoint) -> int:
        """A FIFO checkpoint not acked in time: once nothing else of its batch is out, the
        queue is read again from the first message not acked, with the next attempt; a
        message whose attempts are spent goes to the DLQ instead, and the queue reads on."""
        state = self._fifo_state(ck)
        todo = ck.open
        ck.done = True
        self.checkpoints.pop(ck.key, None)
        if ck in state.out:
            state.out.remove(ck)
        state.expired.update(todo)
        # Its record holds the batch's state until the queue is opened again.
        state.pin = ck.log_offset if state.pin < 0 else min(state.pin, ck.log_offset)
        if state.out:
            return 0  # the rest of the batch is still out: wait for it
        return await self._reopen_after_expiry(state, ck)

    async def _reopen_after_expiry(self, state: FifoState, ck: CheckPoint) -> int:
        """Open a FIFO queue again after its batch's time ran out; its state changes only
        once what that takes is written (a failure leaves it to the next round)."""
        max_attempts = self._retry_max_times(ck.group) + 1
        first = min(state.expired)
        attempt = state.attempt + 1
        acked = set(state.acked)
        try:
            if attempt > max_attempts:
                record = self._read(ck.topic, ck.queue_id, first)
                if record is not None:
                    await self.put([self._dead_letter(record, ck, state.attempt)])
                acked.add(first)
                attempt = 1
                later = [o for o in state.expired if o > first]
                start = min(later) if later else ck.next_offset
            else:
                start = first
            acked = {o for o in acked if o >= start}
            pin = await self._write({"t": "fifo", "g": ck.group, "tp": ck.topic,
                                     "q": ck.queue_id, "a": attempt, "from": start,
                                     "ak": sorted(acked)})
        except Exception:
            self._stuck[(ck.group, ck.topic, ck.queue_id)] = ck
            raise
        state.acked = acked
        count = len(state.expired)
        self._reopen(state, ck.group, ck.topic, ck.queue_id, start, attempt)
        state.pin = pin if (state.acked or attempt > 1) else -1
        self._notify(ck.origin)
        return count

    def _retry_topic(self, group: str, origin: str) -> str:
        retry = pop_retry_topic(group, origin)
        if self.topics.get(retry) is None:
            self.topics.create_system(retry, 1, Perm.READ | Perm.WRITE)
            self.topics_changed()
        return retry

    def _read(self, topic: str, queue_id: int, offset: int) -> MessageRecord | None:
        result = self.store.get_messages(topic, queue_id, offset, 1)
        try:
            if result.status is not GetStatus.FOUND:
                return None
            record = result.decode(decompress=False)[0]
            return record if record.queue_offset == offset else None
        finally:
            result.release()

    def _commit_revive_offset(self) -> None:
        """Keep where a replay must start: the oldest checkpoint still out, or FIFO state
        record still needed; never past a record being written."""
        if self._writing:
            return
        live = [ck.log_offset for ck in self.checkpoints.values() if ck.log_offset >= 0]
        live += [st.pin for st in self.fifo.values() if st.pin >= 0]
        if live:
            start = min(live)
        else:
            start = self.store.get_max_offset(self.revive_topic, 0)
        if self.offsets.query(REVIVE_GROUP, self.revive_topic, 0) != start:
            self.offsets.commit(REVIVE_GROUP, self.revive_topic, 0, start)

    # ------------------------------------------------------------------ dead letters
    def _dead_letter(self, record: MessageRecord, ck: CheckPoint, reconsume_times: int,
                     props: dict[str, str] | None = None) -> StoreMessage:
        """``record`` as stored in its group's dead-letter topic, saying where it came from."""
        props = dict(record.properties) if props is None else props
        props.setdefault(Property.DLQ_ORIGIN_TOPIC, ck.origin)
        props.setdefault(Property.DLQ_ORIGIN_MESSAGE_ID, record.msg_id)
        topic = dead_letter_topic(self.topics, ck.group, self.topics_changed)
        self.stats.dlq(1, ck.origin, ck.group)
        return StoreMessage.from_record(record, topic, 0, encode_properties(props),
                                        reconsume_times=reconsume_times)

    def _retry_max_times(self, group: str) -> int:
        """The group's retryMaxTimes (16 for a group this broker cannot create)."""
        config = self.subscription_groups.find_or_create(group)
        return config.retry_max_times if config is not None else 16

    # ------------------------------------------------------------------ FIFO queues
    def _finish(self, ck: CheckPoint) -> None:
        """Nothing of ``ck`` is out any more."""
        ck.done = True
        self.checkpoints.pop(ck.key, None)
        self._renewing.pop(ck.key, None)
        if ck.fifo:
            state = self._fifo_state(ck)
            if ck in state.out:
                state.out.remove(ck)
            if not state.out:
                if state.expired:
                    # Part of the batch ran out of time: reopened from its first message
                    # not acked, with the next attempt, by the revive loop (it writes).
                    self._stuck[(ck.group, ck.topic, ck.queue_id)] = ck
                else:
                    # The whole batch is acked: on after it.
                    self._reopen(state, ck.group, ck.topic, ck.queue_id, ck.next_offset, 1)
                    state.pin = -1
                    self._notify(ck.origin)

    def _reopen(self, state: FifoState, group: str, topic: str, queue_id: int, start: int,
                attempt: int) -> None:
        """A FIFO queue reads again from ``start``, its first message at ``attempt``."""
        state.out = []
        state.expired = set()
        state.attempt = attempt
        state.acked = {o for o in state.acked if o >= start}
        self.offsets.commit(group, topic, queue_id, start)

    # ------------------------------------------------------------------ renewal
    async def _renew(self, now: int) -> None:
        """Keep invisible the messages of owners that asked for it (RENEW_BY_MS more when
        less than RENEW_AHEAD_MS is left): the checkpoint's invisible time grows, in place,
        so the handles the owner holds stay good."""
        for key, ck in list(self._renewing.items()):
            if ck.done or not ck.owner or now >= ck.renew_until:
                del self._renewing[key]
                continue
            if ck.deadline - now >= RENEW_AHEAD_MS or ck.pending:
                continue
            longer = now + RENEW_BY_MS - ck.pop_time
            await self._write({"t": "renew", **ck.ref(), "it": longer})
            ck.invisible_ms = longer
            heapq.heappush(self._deadlines, (ck.deadline, next(self._seq), ck))

    def forget_owner(self, owner: str) -> None:
        """``owner`` is gone: its messages are no longer renewed, and come back when their
        invisible time ends."""
        for key, ck in list(self._renewing.items()):
            if ck.owner == owner:
                ck.owner = ""
                del self._renewing[key]


__all__ = ["PopRevival"]
