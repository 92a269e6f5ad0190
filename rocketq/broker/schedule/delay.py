"""Delayed messages by level (RocketMQ's ScheduleMessageService).

A message sent with ``DELAY=n`` is stored in ``SCHEDULE_TOPIC_XXXX`` queue ``n-1`` with its
real destination in ``REAL_TOPIC``/``REAL_QID``; the dispatcher gives its ConsumeQueue unit the
delivery time as tag code. This service walks each level's queue in order (all messages of a
level have the same delay, so due times only grow) and re-puts every due message to its real
topic and queue. Progress per level is kept in ``config/delayOffset.json``: after a clean
restart nothing is delivered twice and nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson

from ...protocol import (
    SCHEDULE_TOPIC,
    MessageRecord,
    Property,
    SysFlag,
    encode_properties,
)
from ...store import DiskFullError, StoreMessage
from ..files import write_atomically

if TYPE_CHECKING:
    from ...store import MessageStore, MessageStoreConfig, PutResult

log = logging.getLogger("rocketq.broker")

BATCH = 256


def delay_level_of(properties: dict[str, str]) -> int:
    """The DELAY property of parsed properties (0 when absent or bad)."""
    try:
        return int(properties.get(Property.DELAY) or 0)
    except ValueError:
        return 0


def with_real_destination(topic: str, queue_id: int, properties: dict[str, str],
                          **extra: str) -> None:
    """Make parsed properties remember where a message really goes (REAL_TOPIC, REAL_QID)
    while it waits in a system topic (delayed, timed or half messages)."""
    properties[Property.REAL_TOPIC] = topic
    properties[Property.REAL_QUEUE_ID] = str(queue_id)
    properties.update(extra)


def to_schedule(topic: str, queue_id: int, properties: dict[str, str], level: int,
                max_level: int) -> tuple[str, int]:
    """Where a delayed message is stored until it is due: the schedule topic's queue of its
    level; the real destination goes into its (parsed) properties."""
    level = min(level, max_level)
    with_real_destination(topic, queue_id, properties, **{Property.DELAY: str(level)})
    return SCHEDULE_TOPIC, level - 1


def is_delayable(sysflag: int) -> bool:
    tran = sysflag & SysFlag.TRANSACTION_MASK
    return tran not in (SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK)


def record_to_real(record: MessageRecord) -> StoreMessage:
    """The message a delayed record becomes when it is due."""
    props = dict(record.properties)
    topic = props.get(Property.REAL_TOPIC, record.topic)
    try:
        queue_id = int(props.get(Property.REAL_QUEUE_ID, "0"))
    except ValueError:
        queue_id = 0
    for name in (Property.DELAY, Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_MS,
                 Property.TIMER_DELAY_SEC, Property.TIMER_OUT_MS):
        props.pop(name, None)
    return StoreMessage.from_record(record, topic, queue_id, encode_properties(props))


class DelayDelivery:
    """Delivers due messages of every delay level from the store's schedule topic back into
    the store; its progress is kept in ``config_dir``."""

    def __init__(self, config_dir: str, store_config: MessageStoreConfig,
                 store: Callable[[], MessageStore],
                 put: Callable[..., Awaitable[list[PutResult]]]) -> None:
        self.store_config = store_config
        self._store = store  # the store exists once the broker has started
        self.put = put  # how the broker's loop writes to the store
        self.path = os.path.join(config_dir, "delayOffset.json")
        self.offsets: dict[int, int] = {}
        self.delivered = 0
        self._wake = asyncio.Event()
        self._refused_logged = -10.0  # when a delivery refused for a full disk was logged
        if os.path.exists(self.path):
            with open(self.path, "rb") as fh:
                table = orjson.loads(fh.read()).get("offsetTable") or {}
            self.offsets = {int(k): int(v) for k, v in table.items()}

    @property
    def store(self) -> MessageStore:
        return self._store()

    @property
    def levels(self) -> int:
        return len(self.store_config.delay_levels_ms)

    def wake(self) -> None:
        self._wake.set()

    def wrapper(self) -> dict[str, dict[str, int]]:
        """The delay offsets as ``delayOffset.json`` and GET_ALL_DELAY_OFFSET (45) hold them."""
        return {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}}

    def persist(self) -> None:
        write_atomically(self.path, orjson.dumps(self.wrapper(), option=orjson.OPT_INDENT_2))

    async def run(self) -> None:
        """Deliver due messages as they fall due, until cancelled."""
        while True:
            next_due = await self.deliver_due()
            timeout = 0.1 if next_due is None else max(0.0, min(0.1, next_due - time.time()))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    async def deliver_due(self) -> float | None:
        """Re-put every due message; return when the next one falls due (epoch seconds)."""
        store = self.store
        now_ms = int(time.time() * 1000)
        next_due: float | None = None
        for level in range(1, self.levels + 1):
            cq = store.consume_queues.get((SCHEDULE_TOPIC, level - 1))
            if cq is None:
                continue
            offset = max(self.offsets.get(level, 0), cq.min_offset)
            end = cq.max_offset
            while offset < end:
                due: list[StoreMessage] = []
                stop = min(end, offset + BATCH)
                scanned = offset
                while scanned < stop:
                    unit = cq.unit(scanned)
                    if unit is None:
                        break
                    phys, size, deliver_at = unit
                    if size > 0 and deliver_at > now_ms:
                        due_s = deliver_at / 1000
                        next_due = due_s if next_due is None else min(next_due, due_s)
                        break
                    record = store.look_message_by_offset(phys) if size > 0 else None
                    if record is not None:
                        due.append(record_to_real(record))
                    scanned += 1
                if due:
                    try:
                        await self.put(due)
                    except DiskFullError as exc:
                        # Retried every second until sends are taken again; said every 10 s.
                        if time.monotonic() - self._refused_logged >= 10:
                            self._refused_logged = time.monotonic()
                            log.warning("delivering %d delayed message(s) of level %d waits: "
                                        "%s", len(due), level, exc)
                        return time.time() + 1
                    except Exception:
                        log.exception("delivering %d delayed message(s) of level %d failed",
                                      len(due), level)
                        return time.time() + 1
                    self.delivered += len(due)
                if scanned == offset:
                    break
                offset = scanned
                self.offsets[level] = offset
                if scanned < stop:
                    break
        return next_due
