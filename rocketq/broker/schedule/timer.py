"""Delivery at an arbitrary time (RocketMQ 5's timer messages): ``TIMER_DELIVER_MS`` (epoch
ms), ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC``, up to ``timerMaxDelaySec`` (3 days).

A timed message waits in ``rmq_sys_wheel_timer``; its ConsumeQueue unit carries the due time.
Pending messages are kept in a wheel of one-second buckets holding only queue offsets in
``array('q')`` (8 bytes each), so millions of pending messages cost tens of megabytes. A
bitmap of delivered entries above a low watermark (one bit each) is persisted in
``config/timer.json`` with the watermark, so a clean restart rebuilds exactly the pending set.
"""

from __future__ import annotations

import array
import asyncio
import base64
import contextlib
import heapq
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson

from ...protocol import TIMER_TOPIC, Property
from ..files import write_atomically
from .delay import record_to_real, with_real_destination

if TYPE_CHECKING:
    from ...store import MessageStore, PutResult

log = logging.getLogger("rocketq.broker")



class TimerError(ValueError):
    """A timer property that is not a time, or is too far ahead."""


def due_time(props: dict[str, str], now_ms: int, max_delay_s: int) -> int | None:
    """The delivery time asked for by a message's TIMER_* property, or None if it has none."""
    try:
        if Property.TIMER_DELIVER_MS in props:
            due = int(props[Property.TIMER_DELIVER_MS])
        elif Property.TIMER_DELAY_MS in props:
            due = now_ms + int(props[Property.TIMER_DELAY_MS])
        elif Property.TIMER_DELAY_SEC in props:
            due = now_ms + int(props[Property.TIMER_DELAY_SEC]) * 1000
        else:
            return None
    except ValueError:
        raise TimerError("timer properties must be integers") from None
    if due - now_ms > max_delay_s * 1000:
        raise TimerError(f"a timer message may wait at most {max_delay_s} s")
    return due


def to_timer(topic: str, queue_id: int, properties: dict[str, str], due_ms: int
             ) -> tuple[str, int]:
    """Where a timed message waits: the timer topic; its due time (TIMER_OUT_MS) and real
    destination go into its (parsed) properties."""
    with_real_destination(topic, queue_id, properties, **{Property.TIMER_OUT_MS: str(due_ms)})
    return TIMER_TOPIC, 0


class TimerWheel:
    """The wheel of pending timer messages of the store's timer topic, and its delivery
    loop; what was delivered is kept in ``config_dir``."""

    def __init__(self, config_dir: str, store: Callable[[], MessageStore],
                 put: Callable[..., Awaitable[list[PutResult]]]) -> None:
        self._store = store  # the store exists once the broker has started
        self.put = put  # how the broker's loop writes to the store
        self.path = os.path.join(config_dir, "timer.json")
        self.buckets: dict[int, array.array[int]] = {}
        self.seconds: list[int] = []  # heap of bucket keys
        self.loaded = 0  # timer queue offsets below this are in the wheel or delivered
        self.low = 0  # all offsets below this are delivered
        self.done = bytearray()  # bit i: offset low + i was delivered
        self.pending = 0
        self.delivered = 0
        self._wake = asyncio.Event()
        self._failure_logged = -10.0  # when a failed delivery was last logged
        if os.path.exists(self.path):
            with open(self.path, "rb") as fh:
                data = orjson.loads(fh.read())
            self.low = int(data.get("low", 0))
            self.done = bytearray(base64.b64decode(data.get("done", "")))

    @property
    def store(self) -> MessageStore:
        return self._store()

    # ------------------------------------------------------------------ bookkeeping
    def _is_done(self, offset: int) -> bool:
        i = offset - self.low
        return i < 0 or (i >> 3 < len(self.done) and bool(self.done[i >> 3] & (1 << (i & 7))))

    def _mark_done(self, offset: int) -> None:
        i = offset - self.low
        if i < 0:
            return
        need = (i >> 3) + 1
        if need > len(self.done):
            self.done.extend(bytes(need - len(self.done)))
        self.done[i >> 3] |= 1 << (i & 7)
        # Slide the watermark past whole delivered bytes.
        skip = 0
        while skip < len(self.done) and self.done[skip] == 0xFF:
            skip += 1
        if skip:
            del self.done[:skip]
            self.low += skip * 8

    def persist(self) -> None:
        data = {"low": self.low, "done": base64.b64encode(bytes(self.done)).decode()}
        write_atomically(self.path, orjson.dumps(data))

    def _add(self, offset: int, due_ms: int) -> None:
        second = due_ms // 1000
        bucket = self.buckets.get(second)
        if bucket is None:
            bucket = self.buckets[second] = array.array("q")
            heapq.heappush(self.seconds, second)
        bucket.append(offset)
        self.pending += 1

    def load_new(self) -> int:
        """Put newly dispatched timer units into the wheel."""
        store = self.store
        cq = store.consume_queues.get((TIMER_TOPIC, 0))
        if cq is None:
            return 0
        end = cq.max_offset
        offset = max(self.loaded, self.low, cq.min_offset)
        added = 0
        while offset < end:
            unit = cq.unit(offset)
            if unit is None:
                break
            if unit[1] > 0 and not self._is_done(offset):
                self._add(offset, unit[2])
                added += 1
            offset += 1
        self.loaded = offset
        return added

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ delivery
    async def run(self) -> None:
        """Load new timer messages and deliver due ones, until cancelled."""
        while True:
            self.load_new()
            await self.deliver_due()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.1):
                    await self._wake.wait()

    async def deliver_due(self, now_ms: int | None = None) -> int:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        store = self.store
        cq = store.consume_queues.get((TIMER_TOPIC, 0))
        delivered = 0
        while self.seconds and self.seconds[0] <= now_ms // 1000:
            second = heapq.heappop(self.seconds)
            bucket = self.buckets.pop(second)
            later = array.array("q")
            due_messages = []
            due_offsets = []
            for offset in bucket:
                unit = cq.unit(offset) if cq is not None else None
                if unit is None:
                    self.pending -= 1
                    continue
                if unit[2] > now_ms:
                    later.append(offset)  # later within this second
                    continue
                record = store.look_message_by_offset(unit[0])
                self.pending -= 1
                if record is None:
                    self._mark_done(offset)
                    continue
                due_messages.append(record_to_real(record))
                due_offsets.append(offset)
            if due_messages:
                try:
                    await self.put(due_messages)
                except Exception as exc:
                    # Nothing was stored (a full disk refuses puts): the bucket waits for
                    # the next round, whole, rather than being dropped.
                    later.extend(due_offsets)
                    self.pending += len(due_offsets)
                    self.buckets[second] = later
                    heapq.heappush(self.seconds, second)
                    now = time.monotonic()
                    if now - self._failure_logged >= 10:
                        self._failure_logged = now
                        log.error("delivering %d timer message(s) failed, retrying: %s",
                                  len(due_messages), exc)
                    break
                for offset in due_offsets:
                    self._mark_done(offset)
                delivered += len(due_messages)
            if later:
                self.buckets[second] = later
                heapq.heappush(self.seconds, second)
                break
        self.delivered += delivered
        return delivered


__all__ = ["TimerError", "TimerWheel", "due_time", "to_timer"]
