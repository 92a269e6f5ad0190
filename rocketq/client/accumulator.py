"""Client auto-batching (RocketMQ 5's ``autoBatch`` and ProduceAccumulator, Kafka's
``linger.ms``): sends that are in flight together are coalesced into SEND_BATCH_MESSAGE
requests, and every message still gets its own :class:`SendResult`.

A batch is gathered per lane: a topic (the queue is chosen when the batch goes, as for any
send), or one queue when the caller named it (``queue=`` or a selector). A lane with nothing
in flight sends what it has at the end of the current event-loop iteration, so a lone send
waits for nobody; a lane with a batch in flight gathers until that batch is answered, until
``batch_max_delay_ms`` passes or until ``batch_max_bytes`` is reached, whichever comes first.
A lane bound to a queue keeps one batch in flight at a time, so the queue stores its messages
in the order they were sent, retries included. ``total_batch_max_bytes`` bounds what all lanes
hold; a send beyond it waits for room.

A batch the broker refuses as a whole for a reason that is not transient (a message it will
not store, a batch over its size limit) is sent again one message at a time, so the message at
fault fails alone; transient failures are retried for the whole batch as any send is.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from operator import itemgetter
from typing import Any, Protocol

from ..protocol import Property
from .errors import BrokerError
from .message import Message, MessageQueue, SendResult

#: Bytes a batch element adds to its body and properties (RocketMQ's batch encoding).
ELEMENT_OVERHEAD = 22

#: A gathered send: the message, its encoded properties (as text), its batch element
#: ``(flag, body, encoded properties)``, its deadline and the future its sender awaits.
_Item = tuple[Message, str, tuple[int, bytes, bytes], float, "asyncio.Future[SendResult]"]
_deadline_of = itemgetter(3)
_element_of = itemgetter(2)


class _Lane:
    """The batches of one topic, or of one queue."""

    __slots__ = ("topic", "queue", "open", "open_bytes", "ready", "in_flight", "timer")

    def __init__(self, topic: str, queue: MessageQueue | None) -> None:
        self.topic = topic
        self.queue = queue
        self.open: list[_Item] = []
        self.open_bytes = 0
        self.ready: deque[tuple[list[_Item], int]] = deque()
        self.in_flight = 0
        self.timer: asyncio.Handle | None = None


class Sender(Protocol):
    """What the accumulator needs of its producer (``AsyncProducer``, which sits above this
    module and builds it): one batch request, one message with the producer's retries, and
    which refusals another attempt may pass."""

    retries: int

    async def _send_elements(self, topic: str, elements: list[tuple[int, bytes, bytes]],
                             queue: MessageQueue | None, timeout: float) -> SendResult: ...

    async def _send_prepared(self, message: Message, body: bytes, sysflag: int, props: str,
                             queue: MessageQueue | None, selector: Any, arg: Any,
                             timeout: float, retries: int, oneway: bool) -> SendResult: ...

    @staticmethod
    def _is_transient(exc: BrokerError) -> bool: ...


class Accumulator:
    """Gathers a producer's batchable sends into batches and sends them."""

    def __init__(self, producer: Sender, *, max_delay_ms: float, max_bytes: int,
                 total_max_bytes: int) -> None:
        if max_delay_ms < 0 or max_bytes <= 0 or total_max_bytes < max_bytes:
            raise ValueError("need batch_max_delay_ms >= 0, batch_max_bytes > 0 and "
                             "total_batch_max_bytes >= batch_max_bytes")
        self.producer = producer
        self.max_delay = max_delay_ms / 1000
        self.max_bytes = max_bytes
        self.total_max_bytes = total_max_bytes
        self.held = 0
        self._lanes: dict[tuple[str, MessageQueue | None], _Lane] = {}
        self._room: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # asked once, not per send

    def fits(self, message: Message, body: bytes, props: bytes) -> bool:
        """Whether a prepared message may go in a batch: small enough, and nothing the broker
        transforms per message (delays and timers, retry hand-backs, replies)."""
        if len(body) + len(props) + ELEMENT_OVERHEAD > self.max_bytes \
                or message.topic.startswith("%RETRY%"):
            return False
        p = message.properties
        # A prepared message has UNIQ_KEY and WAIT: with two properties it has no other.
        return len(p) == 2 or (
            Property.DELAY not in p and Property.MSG_TYPE not in p
            and b"TIMER_" not in props)  # a value holding it only makes the message go alone

    def add(self, message: Message, props: str, raw: bytes, queue: MessageQueue | None,
            timeout: float) -> asyncio.Future[SendResult] | None:
        """Add a message to its lane and return the future of its own result; None, and
        nothing added, when what all lanes hold leaves no room for it (:meth:`send` waits
        for room). A plain function: a pipelined send pays for no coroutine of its own."""
        body = message.body
        size = len(body) + len(raw) + ELEMENT_OVERHEAD
        held = self.held
        if held and held + size > self.total_max_bytes:
            return None
        key = (message.topic, queue)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(message.topic, queue)
        if lane.open and lane.open_bytes + size > self.max_bytes:
            self._close(lane)
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[SendResult] = loop.create_future()
        lane.open.append((message, props, (message.flag, body, raw),
                          time.monotonic() + timeout, future))
        lane.open_bytes += size
        self.held = held + size
        if lane.timer is None or lane.ready:  # else the open batch already has its timer
            self._kick(lane)
        return future

    async def send(self, message: Message, props: str, raw: bytes,
                   queue: MessageQueue | None, timeout: float) -> SendResult:
        """Add a message to its lane, once there is room, and wait for its own result."""
        while True:
            future = self.add(message, props, raw, queue, timeout)
            if future is not None:
                return await future
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()

    async def drain(self) -> None:
        """Send everything gathered and wait until every batch is answered."""
        for lane in list(self._lanes.values()):
            if lane.open:
                self._close(lane)
            self._kick(lane)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------ lanes
    def _close(self, lane: _Lane) -> None:
        """The lane's open batch is complete: it waits in ``ready`` for its turn."""
        if lane.timer is not None:
            lane.timer.cancel()
            lane.timer = None
        lane.ready.append((lane.open, lane.open_bytes))
        lane.open = []
        lane.open_bytes = 0

    def _on_timer(self, lane: _Lane) -> None:
        lane.timer = None
        if lane.open:
            self._close(lane)
        self._kick(lane)

    def _kick(self, lane: _Lane) -> None:
        """Start the batches the lane may start; arrange for its open batch to close."""
        ordered = lane.queue is not None
        while lane.ready and not (ordered and lane.in_flight):
            items, size = lane.ready.popleft()
            lane.in_flight += 1
            task = self._loop.create_task(self._send(lane, items, size))  # type: ignore[union-attr]
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if lane.open and lane.timer is None:
            loop = self._loop
            assert loop is not None
            if lane.in_flight:
                lane.timer = loop.call_later(self.max_delay, self._on_timer, lane)
            else:
                lane.timer = loop.call_soon(self._on_timer, lane)
        elif not lane.open and not lane.ready and not lane.in_flight:
            self._lanes.pop((lane.topic, lane.queue), None)

    async def _send(self, lane: _Lane, items: list[_Item], size: int) -> None:
        try:
            live = [item for item in items if not item[4].done()]  # a cancelled send left
            if live:
                await self._send_items(lane, live)
        finally:
            lane.in_flight -= 1
            self.held -= size
            if self._room is not None:
                self._room.set()
            if lane.open and lane.timer is not None and not lane.timer.cancelled():
                self._close(lane)  # answered before the delay ran out: go now
            self._kick(lane)

    async def _send_items(self, lane: _Lane, items: list[_Item]) -> None:
        producer = self.producer
        timeout = max(0.001, min(map(_deadline_of, items)) - time.monotonic())
        if len(items) == 1:
            await self._send_one(lane, items[0])
            return
        try:
            result = await producer._send_elements(
                lane.topic, list(map(_element_of, items)), lane.queue, timeout)
        except BrokerError as exc:
            if not producer._is_transient(exc):
                # Refused as a whole: one by one, so only the message at fault fails.
                for item in items:
                    await self._send_one(lane, item)
                return
            _fail(items, exc)
        except BaseException as exc:
            _fail(items, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            # Each message's own result: its UNIQ_KEY, its offset id and its queue offset
            # (a batch's are consecutive).
            offset_ids = result.offset_msg_id.split(",")
            if len(offset_ids) != len(items):
                offset_ids = [""] * len(items)
            status, mq, queue_offset = result.status, result.queue, result.queue_offset
            uniq_key = Property.UNIQ_KEY
            for (message, _props, _element, _deadline, future), offset_id in zip(
                    items, offset_ids, strict=True):
                if not future.done():
                    future.set_result(SendResult(status, message.properties[uniq_key],
                                                 offset_id, mq, queue_offset))
                queue_offset += 1

    async def _send_one(self, lane: _Lane, item: _Item) -> None:
        message, props, _element, deadline, future = item
        if future.done():
            return
        try:
            result = await self.producer._send_prepared(
                message, message.body, 0, props, lane.queue, None, None,
                max(0.001, deadline - time.monotonic()), self.producer.retries, False)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)


def _fail(items: list[_Item], exc: BaseException) -> None:
    for item in items:
        if not item[4].done():
            item[4].set_exception(exc)


__all__ = ["Accumulator"]
