"""A Spark task's read of one queue: the offsets ``[start, end)`` pulled from the broker that
owns the queue, several pulls in flight (:class:`RangePuller`), and turned into Arrow record
batches of the data source's schema (:func:`pull_batches`). No Spark imports."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import Any

from ..client.consumer import pull_request
from ..client.message import MessageQueue
from ..protocol import PullSysFlag, RemotingCommand, ResponseCode
from ..protocol.filter import Subscription
from .access import PLAIN, Access, worker_client

PULL_WINDOW = 1024  # offsets asked for per pull (the broker also caps a pull at 256 KiB)
PULL_DEPTH = 4  # pulls in flight per queue

class RangePuller:
    """Pulls one queue's offsets ``[start, end)`` from its broker with several pulls in flight,
    each for its own window of offsets, and hands back the response bodies in offset order.

    Each window keeps only records with offsets inside it, so overlapping answers (a broker
    may return fewer or, with a tag filter, skip ahead) never duplicate; a window the broker
    answered only in part is asked again from where the answer stopped.
    """

    def __init__(self, addr: str, topic: str, queue_id: int, start: int, end: int,
                 subscription: str = "*", *, window: int = PULL_WINDOW,
                 depth: int = PULL_DEPTH, access: Access = PLAIN) -> None:
        self.addr, self.topic, self.queue_id = addr, topic, queue_id
        self.end = end
        self.queue = MessageQueue(topic, "", queue_id)
        self.sub = Subscription.parse(topic, subscription)
        self.window, self.depth = window, depth
        self._next = start  # first offset not yet asked for
        self._inflight: deque[tuple[int, int, asyncio.Future[RemotingCommand]]] = deque()
        self._loop, self._client = worker_client(access)
        self.done = start >= end

    def _request(self, begin: int, stop: int) -> RemotingCommand:
        return pull_request("rocketq-spark", self.queue, begin, stop - begin, self.sub,
                            sysflag=PullSysFlag.SUBSCRIPTION)

    def _fill(self) -> None:
        while len(self._inflight) < self.depth and self._next < self.end:
            begin, stop = self._next, min(self._next + self.window, self.end)
            self._next = stop
            self._send(begin, stop, append=True)

    def _send(self, begin: int, stop: int, append: bool) -> None:
        task = asyncio.ensure_future(self._client.invoke(self.addr, self._request(begin, stop),
                                                         30))
        if append:
            self._inflight.append((begin, stop, task))
        else:
            self._inflight.appendleft((begin, stop, task))

    async def _step(self) -> tuple[bytes | None, int, int]:
        self._fill()
        if not self._inflight:
            self.done = True
            return None, 0, 0
        begin, stop, task = self._inflight.popleft()
        try:
            r = await task
        except BaseException:
            for _b, _s, other in self._inflight:
                other.cancel()
            self._inflight.clear()
            self.done = True
            raise
        code = r.code
        if code not in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                        ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED):
            raise RuntimeError(f"pull from {self.addr} failed: {r.remark} (code {code})")
        next_offset = int(r.ext_fields.get("nextBeginOffset", begin))
        body = r.body if code == ResponseCode.SUCCESS else None
        if code != ResponseCode.SUCCESS and next_offset <= begin:
            # Nothing at or after ``begin``: the queue ends before ``stop``.
            for _b, _s, other in self._inflight:
                other.cancel()
            self._inflight.clear()
            self._next = self.end
        elif next_offset < stop:
            self._send(max(next_offset, begin + (0 if body else 1)), stop, append=False)
        self._fill()
        self.done = not self._inflight
        return body, begin, stop

    def next_body(self) -> tuple[bytes | None, int, int]:
        """The next answer in offset order: ``(records or None, window start, window end)``."""
        return self._loop.run(self._step())

    def close(self) -> None:
        async def cancel() -> None:
            for _b, _s, task in self._inflight:
                task.cancel()
            self._inflight.clear()
        if self._inflight:
            self._loop.run(cancel())


def pull_batches(addr: str, topic: str, queue_id: int, start: int, end: int, broker: str,
                 subscription: str = "*", rows_per_batch: int = 8192,
                 access: Access = PLAIN) -> Iterator[Any]:
    """Arrow record batches of one queue's messages with offsets in ``[start, end)``."""
    from .columns import RecordColumns

    sub = Subscription.parse(topic, subscription)
    columns = RecordColumns(topic, broker, None if sub.matches_all else sub.matches_tags)
    puller = RangePuller(addr, topic, queue_id, start, end, subscription, access=access)
    try:
        while not puller.done:
            body, begin, stop = puller.next_body()
            if body:
                columns.add(body, begin, stop)
            if len(columns) >= rows_per_batch:
                yield columns.batch()
        if len(columns):
            yield columns.batch()
    finally:
        puller.close()

