"""What the Spark data source does on the network, in plain Python (no Spark imports): find
queues and their offsets, pull an offset range from the owning broker, send rows."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from ..client.consumer import pull_request
from ..client.instance import ClientInstance
from ..client.message import Message, MessageQueue
from ..client.sync import _LoopThread
from ..protocol import PullSysFlag, RemotingCommand, RequestCode, ResponseCode
from ..protocol.filter import Subscription
from ..remoting import RemotingClient, run


def queue_offsets(namesrv: str, topics: list[str]
                  ) -> dict[tuple[str, str, str, int], tuple[int, int]]:
    """``(topic, broker, address, queue id) -> (min offset, max offset)`` of every readable
    queue of ``topics``."""

    async def go() -> dict[tuple[str, str, str, int], tuple[int, int]]:
        instance = ClientInstance(namesrv)
        out = {}
        try:
            for topic in topics:
                route = await instance.fetch_route(topic)
                if route is None:
                    raise ValueError(f"No route info of this topic: {topic}")
                for mq in route.subscribe_queues:
                    addr = route.broker_addrs.get(mq.broker_name, {}).get(0)
                    if addr is None:
                        continue
                    ext = {"topic": topic, "queueId": mq.queue_id}
                    low = await instance.remoting.invoke(addr, RemotingCommand.request(
                        RequestCode.GET_MIN_OFFSET, ext))
                    high = await instance.remoting.invoke(addr, RemotingCommand.request(
                        RequestCode.GET_MAX_OFFSET, ext))
                    out[(topic, mq.broker_name, addr, mq.queue_id)] = (
                        int(low.ext_fields.get("offset", "0")),
                        int(high.ext_fields.get("offset", "0")))
        finally:
            await instance.remoting.close()
        return out

    return run(go())


def commit_offsets(group: str, offsets: dict[tuple[str, str, int], int]) -> None:
    """Record ``(address, topic, queue id) -> next offset`` as ``group``'s consumer offsets on
    the brokers (UPDATE_CONSUMER_OFFSET), so admin tools show a pipeline's progress and lag."""
    loop, client = _worker_client()

    async def go() -> None:
        answers = await asyncio.gather(*(
            client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": qid,
                "commitOffset": offset}))
            for (addr, topic, qid), offset in offsets.items()))
        for r in answers:
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"recording offsets of {group} failed: {r.remark}")

    loop.run(go())


def pick_offset(spec: str, topic: str, broker: str, queue_id: int, low: int, high: int,
                default: int) -> int:
    """``earliest``, ``latest``, or JSON ``{"topic": {"broker:queueId": offset}}``
    (-2 earliest, -1 latest, as Kafka's source reads them)."""
    spec = spec.strip()
    if spec == "earliest":
        return low
    if spec == "latest":
        return high
    table = json.loads(spec)
    value = table.get(topic, {}).get(f"{broker}:{queue_id}")
    if value is None:
        return default
    value = int(value)
    return low if value == -2 else high if value == -1 else value


PULL_WINDOW = 1024  # offsets asked for per pull (the broker also caps a pull at 256 KiB)
PULL_DEPTH = 4  # pulls in flight per queue


def _worker_client() -> tuple[_LoopThread, RemotingClient]:
    """The process's event loop thread and a connection pool on it. Spark reuses Python
    workers, so later partitions read through connections already open."""
    global _WORKER
    loop = _LoopThread.get()
    if _WORKER is None or _WORKER[0] is not loop:
        _WORKER = (loop, loop.create(RemotingClient))
    return _WORKER


_WORKER: tuple[_LoopThread, RemotingClient] | None = None


class RangePuller:
    """Pulls one queue's offsets ``[start, end)`` from its broker with several pulls in flight,
    each for its own window of offsets, and hands back the response bodies in offset order.

    Each window keeps only records with offsets inside it, so overlapping answers (a broker
    may return fewer or, with a tag filter, skip ahead) never duplicate; a window the broker
    answered only in part is asked again from where the answer stopped.
    """

    def __init__(self, addr: str, topic: str, queue_id: int, start: int, end: int,
                 subscription: str = "*", *, window: int = PULL_WINDOW,
                 depth: int = PULL_DEPTH) -> None:
        self.addr, self.topic, self.queue_id = addr, topic, queue_id
        self.end = end
        self.queue = MessageQueue(topic, "", queue_id)
        self.sub = Subscription.parse(topic, subscription)
        self.window, self.depth = window, depth
        self._next = start  # first offset not yet asked for
        self._inflight: deque[tuple[int, int, asyncio.Future[RemotingCommand]]] = deque()
        self._loop, self._client = _worker_client()
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
                 subscription: str = "*", rows_per_batch: int = 8192) -> Iterator[Any]:
    """Arrow record batches of one queue's messages with offsets in ``[start, end)``."""
    from .columns import RecordColumns

    sub = Subscription.parse(topic, subscription)
    columns = RecordColumns(topic, broker, None if sub.matches_all else sub.matches_tags)
    puller = RangePuller(addr, topic, queue_id, start, end, subscription)
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


def _column(batch: Any, name: str) -> list[Any]:
    """A column of an Arrow record batch as Python values, or Nones when it is absent."""
    if name in batch.schema.names:
        return batch.column(name).to_pylist()  # type: ignore[no-any-return]
    return [None] * batch.num_rows


SEND_WINDOW = 256  # sends in flight per writing task


def send_batches(namesrv: str, default_topic: str | None, group: str,
                 batches: Iterable[Any]) -> int:
    """Send each row of Arrow record batches as a message, with up to SEND_WINDOW sends in
    flight. The first failed send raises (the Spark task then fails and is retried: at least
    once). Columns: ``body`` (binary or string), optional ``topic`` (used when there is no
    ``default_topic``), ``tags``, ``keys`` (a string or a list of strings), ``properties``
    (a map)."""
    from ..client.producer import AsyncProducer

    loop, _client = _worker_client()

    def messages() -> Iterator[Message]:
        for batch in batches:
            if "body" not in batch.schema.names:
                raise ValueError("the rocketq sink needs a 'body' column (binary or string)")
            for body, topic, tags, keys, props in zip(
                    *(_column(batch, name) for name in ("body", "topic", "tags", "keys",
                                                        "properties")), strict=True):
                topic = default_topic or topic  # the option wins, as in Kafka's sink
                if not topic:
                    raise ValueError("a row has no topic and the writer has no 'topic' option")
                if body is None:
                    raise ValueError(f"a row for {topic} has a null body")
                yield Message(topic, body, tags=tags or None, keys=keys or None,
                              properties=dict(props) if props else None)

    async def go() -> int:
        sent = 0
        producer = AsyncProducer(group, namesrv)
        await producer.start()
        pending: set[asyncio.Future[Any]] = set()
        try:
            for message in messages():
                pending.add(asyncio.ensure_future(producer.send(message)))
                if len(pending) >= SEND_WINDOW:
                    done, pending = await asyncio.wait(pending,
                                                       return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        task.result()
                        sent += 1
            for task in asyncio.as_completed(pending):
                await task
                sent += 1
            pending = set()
        finally:
            for task in pending:
                task.cancel()
            await producer.shutdown()
        return sent

    return loop.run(go())
