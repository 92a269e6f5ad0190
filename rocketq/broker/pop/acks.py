"""The ack side of the POP service (RocketMQ 5's AckMessageProcessor and
ChangeInvisibleTimeProcessor): acks of popped messages, one at a time or a batch, written to
the revive topic together with the others of the same turn of the event loop; the change of
a message's invisible time, which moves it to a checkpoint of its own with a new receipt
handle; and the move of a popped message to its group's dead-letter topic.

``PopAcks`` is a part of ``service.PopService``, sharing its state; the pop itself is in
``service``, the revival of what is not acked in time in ``revive``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .records import (
    MAX_INVISIBLE_MS,
    RETRY_TOPIC,
    CheckPoint,
    FifoState,
    PopError,
    Put,
    ReceiptHandle,
    pop_retry_topic,
)

if TYPE_CHECKING:
    from ...store import MessageStore
    from ..config import BrokerConfig


class PopAcks:
    """Acks, changes of invisible time and dead-lettering: a part of
    :class:`service.PopService`.

    It reads and changes the service's state (declared below, set by ``PopService``) and
    calls its ``_write``, ``_track``, ``_read``, ``_dead_letter`` and ``_finish``."""

    config: BrokerConfig
    store: MessageStore
    put: Put
    running: bool
    loop: asyncio.AbstractEventLoop | None
    checkpoints: dict[tuple[str, str, int, int, int], CheckPoint]
    fifo: dict[tuple[str, str, int], FifoState]
    _pending_acks: list[tuple[list[tuple[CheckPoint, list[int]]], asyncio.Future[None]]]
    _flushing: set[asyncio.Future[None]]

    def _find(self, group: str, topic: str, handle: ReceiptHandle) -> CheckPoint:
        source = pop_retry_topic(group, topic) if handle.topic_type == RETRY_TOPIC else topic
        ck = self.checkpoints.get((group, source, handle.queue_id, handle.start_offset,
                                   handle.pop_time))
        now = int(time.time() * 1000)
        if ck is None or handle.queue_offset not in ck.offsets:
            if handle.deadline <= now:
                raise PopError("expired", "the receipt handle has expired: its invisible time "
                               "ended, and the message is (or will be) delivered again")
            raise PopError("handle", f"no message of topic {topic} received by group {group} "
                           "has this receipt handle (is it another group's, or changed "
                           "since?)")
        if ck.deadline <= now:
            raise PopError("expired", "the receipt handle has expired: its invisible time "
                           "ended, and the message is (or will be) delivered again")
        return ck

    async def ack(self, group: str, topic: str, handle: str) -> None:
        """Mark a popped message consumed. Acking it twice is fine. Raises PopError for a
        handle that is not one of the group's messages out, or whose time is up."""
        error = (await self.ack_many(group, topic, [handle]))[0]
        if error is not None:
            raise error

    async def ack_many(self, group: str, topic: str, handles: Sequence[str]
                       ) -> list[PopError | None]:
        """Ack several messages at once (one record per checkpoint); what went wrong with
        each, or None."""
        self._serving()
        errors: list[PopError | None] = []
        by_ck: dict[int, tuple[CheckPoint, list[int]]] = {}
        for text in handles:
            try:
                handle = ReceiptHandle.decode(text)
                ck = self._find(group, topic, handle)
                if handle.queue_offset in ck.moved:
                    raise PopError("handle", "this receipt handle was replaced by a change "
                                   "of the message's invisible time: ack with the new one")
            except PopError as exc:
                errors.append(exc)
                continue
            errors.append(None)
            if handle.queue_offset not in ck.acked:
                by_ck.setdefault(id(ck), (ck, []))[1].append(handle.queue_offset)
        if by_ck:
            acks = list(by_ck.values())
            store = self.store
            if store.config.answers_when_safe:
                # Written once flushed or replicated: not revived meanwhile.
                for ck, offsets in acks:
                    ck.pending.update(offsets)
                try:
                    await self._ack_soon(acks)
                finally:
                    for ck, offsets in acks:
                        ck.pending.difference_update(offsets)
            else:
                # Answered once appended: written now, and the call never waits.
                store.put_messages([self._record(self._acks_record([(acks, None)]))])
                self._acked([(acks, None)])
        return errors

    def _ack_soon(self, acks: list[tuple[CheckPoint, list[int]]]) -> asyncio.Future[None]:
        """Write ``acks`` with the others made in this turn of the event loop: one record
        for all of them (the acks of many consumers, each its own call, cost one append);
        the future is done once it is written and the checkpoints marked."""
        assert self.loop is not None
        fut: asyncio.Future[None] = self.loop.create_future()
        if not self._pending_acks:
            self.loop.call_soon(self._flush_acks)
        self._pending_acks.append((acks, fut))
        return fut

    def _flush_acks(self) -> None:
        pending, self._pending_acks = self._pending_acks, []
        if not pending:
            return
        task = asyncio.ensure_future(self._write_acks(pending))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    @staticmethod
    def _acks_record(pending: list[tuple[list[tuple[CheckPoint, list[int]]],
                                         asyncio.Future[None] | None]]) -> dict[str, Any]:
        return {"t": "acks", "l": [[ck.group, ck.topic, ck.queue_id, ck.offsets[0],
                                    ck.pop_time, offsets]
                                   for acks, _ in pending for ck, offsets in acks]}

    async def _write_acks(self, pending: list[tuple[list[tuple[CheckPoint, list[int]]],
                                                    asyncio.Future[None]]]) -> None:
        try:
            await self._write(self._acks_record(pending))
        except BaseException as exc:
            for _, fut in pending:
                if not fut.done():
                    fut.set_exception(exc)
            if isinstance(exc, Exception):
                return
            raise
        self._acked(pending)

    def _acked(self, pending: list[tuple[list[tuple[CheckPoint, list[int]]],
                                         asyncio.Future[None] | None]]) -> None:
        for acks, fut in pending:
            for ck, offsets in acks:
                self._mark(ck, offsets)
            if fut is not None and not fut.done():
                fut.set_result(None)

    async def dead_letter(self, group: str, topic: str, handle: str,
                          delivery_attempt: int = 0) -> None:
        """Move a popped message to the group's dead-letter topic now (the 5.x push
        consumer's ForwardMessageToDeadLetterQueue when its attempts are spent): stored
        there first, then acked, so that a failure loses nothing."""
        self._serving()
        parsed = ReceiptHandle.decode(handle)
        ck = self._find(group, topic, parsed)
        record = self._read(ck.topic, ck.queue_id, parsed.queue_offset)
        if record is None:
            raise PopError("handle", "the message of this receipt handle is no longer stored")
        await self.put([self._dead_letter(
            record, ck, max(record.reconsume_times, delivery_attempt - 1))])
        await self.ack(group, topic, handle)

    def _serving(self) -> None:
        if not self.running:
            raise PopError("permission", f"broker {self.config.brokerName} does not serve POP "
                           "now (it is a slave, or it is starting: try again)")

    def _mark(self, ck: CheckPoint, offsets: list[int], consumed: bool = True) -> None:
        """``offsets`` of ``ck`` are acked (``consumed``), or moved to another checkpoint."""
        ck.acked.update(offsets)
        if ck.fifo and consumed:
            self._fifo_state(ck).acked.update(offsets)
        if not ck.open:
            self._finish(ck)

    def _fifo_state(self, ck: CheckPoint) -> FifoState:
        return self.fifo.setdefault((ck.group, ck.topic, ck.queue_id), FifoState())

    async def change_invisible(self, group: str, topic: str, handle: str,
                               invisible_ms: int) -> str:
        """Make a popped message invisible for ``invisible_ms`` from now; the new handle."""
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise PopError("argument", f"invisible time {invisible_ms} ms is out of range: it "
                           f"must be within 0..{MAX_INVISIBLE_MS} ms")
        self._serving()
        old = ReceiptHandle.decode(handle)
        ck = self._find(group, topic, old)
        offset = old.queue_offset
        if offset in ck.acked or offset in ck.moved or offset in ck.pending:
            raise PopError("handle", "the message of this receipt handle was acked or its "
                           "invisible time changed already")
        now = int(time.time() * 1000)
        if now <= ck.pop_time:
            now = ck.pop_time + 1  # another checkpoint than the one it leaves
        new = CheckPoint(group, ck.topic, ck.origin, ck.queue_id, [offset], now,
                         invisible_ms, ck.next_offset, ck.fifo, ck.attempt)
        state = self._fifo_state(ck) if ck.fifo else None
        ck.pending.add(offset)  # not revived from the old checkpoint while this is written
        if state is not None:
            state.out.append(new)  # the batch stays out meanwhile
        try:
            new.log_offset = await self._write({**new.record(), "split": True})
            self._track(new)
            await self._write({"t": "ack", **ck.ref(), "o": [offset], "moved": True})
        except BaseException:
            if new.log_offset < 0 and state is not None and new in state.out:
                state.out.remove(new)
            raise
        finally:
            ck.pending.discard(offset)
        ck.moved.add(offset)
        self._mark(ck, [offset], consumed=False)
        return ReceiptHandle(old.queue_offset, now, invisible_ms, 0, old.topic_type,
                             old.broker, old.queue_id, old.queue_offset,
                             old.commitlog_offset).encode()


__all__ = ["PopAcks"]
