"""What the Spark data source does on the network, in plain Python (no Spark imports): find
queues and their offsets, pull an offset range from the owning broker, send rows."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import socket
import ssl
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from ..acl import Credentials
from ..client.consumer import pull_request, starting_position
from ..client.instance import ClientInstance
from ..client.message import MessageQueue
from ..client.sync import _LoopThread
from ..protocol import PullSysFlag, RemotingCommand, RequestCode, ResponseCode
from ..protocol.filter import Subscription
from ..protocol.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic
from ..remoting import RemotingClient, run
from .writes import Halves, Sent, send_rows

log = logging.getLogger("rocketq.spark")


@dataclass(frozen=True)
class Access:
    """How every connection of the connector signs and encrypts: the options ``accessKey``
    and ``secretKey`` (ACL), ``tls`` and ``tlsTrustCertPath`` (the CA the brokers' and
    NameServers' certificates are checked against; the system's CAs without it). Plain
    strings, so it travels to the tasks with their partitions; each process makes its own TLS
    context. Every client below is made by :meth:`remoting`, :meth:`instance` or
    :meth:`producer`."""

    access_key: str = ""
    secret_key: str = ""
    tls: bool = False
    trust_cert_path: str = ""

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Access:
        """From the data source's options (lowercase keys)."""
        key, secret = options.get("accesskey", ""), options.get("secretkey", "")
        if bool(key) != bool(secret):
            raise ValueError("the options accessKey and secretKey go together")
        tls = str(options.get("tls", "false")).strip().lower()
        if tls not in ("true", "false"):
            raise ValueError(f"tls must be true or false, not {tls!r}")
        trust = options.get("tlstrustcertpath", "")
        return cls(key, secret, tls == "true" or bool(trust), trust)

    @property
    def credentials(self) -> Credentials | None:
        return Credentials(self.access_key, self.secret_key) if self.access_key else None

    def ssl_context(self) -> ssl.SSLContext | None:
        return _ssl_context(self.trust_cert_path) if self.tls else None

    def remoting(self) -> RemotingClient:
        credentials = self.credentials
        return RemotingClient(signer=credentials.sign if credentials else None,
                              ssl=self.ssl_context())

    def instance(self, namesrv: str) -> ClientInstance:
        return ClientInstance(namesrv, credentials=self.credentials, tls=self.ssl_context())

    def producer(self, group: str, namesrv: str) -> Any:
        from ..client.producer import AsyncProducer

        return AsyncProducer(group, namesrv, credentials=self.credentials,
                             tls=self.ssl_context())


#: No ACL, no TLS.
PLAIN = Access()


@functools.lru_cache(maxsize=8)
def _ssl_context(trust_cert_path: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=trust_cert_path or None)


def queue_offsets(namesrv: str, topics: list[str], access: Access = PLAIN,
                  missing_ok: bool = False
                  ) -> dict[tuple[str, str, str, int], tuple[int, int]]:
    """``(topic, broker, address, queue id) -> (min offset, max offset)`` of every readable
    queue of ``topics``. A topic without a route raises ValueError, or is left out with
    ``missing_ok`` (a topic found by a pattern may be deleted between listing and routing)."""

    async def go() -> dict[tuple[str, str, str, int], tuple[int, int]]:
        instance = access.instance(namesrv)
        out = {}
        try:
            for topic in topics:
                route = await instance.fetch_route(topic)
                if route is None:
                    if missing_ok:
                        continue
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


def user_topics(namesrv: str, access: Access = PLAIN) -> list[str]:
    """The topics the NameServer knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), sorted, without
    the system ones: those ``rocketq admin topic list --detail`` shows as SYSTEM (the
    brokers' own, retry and dead-letter topics, topics named after a cluster or a broker, and
    clusters' reply topics). A pattern over the topics then matches only users' topics."""

    async def go() -> list[str]:
        instance = access.instance(namesrv)
        try:
            answers = [
                await instance.invoke_namesrv(lambda: RemotingCommand.request(
                    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)),
                await instance.invoke_namesrv(lambda: RemotingCommand.request(
                    RequestCode.GET_BROKER_CLUSTER_INFO))]
        finally:
            await instance.remoting.close()
        for r in answers:
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"listing topics: {r.remark} (code {r.code})")
        topics = orjson.loads(answers[0].body).get("topicList") or []
        info = orjson.loads(answers[1].body)
        clusters = set(info.get("clusterAddrTable") or {})
        reserved = clusters | set(info.get("brokerAddrTable") or {}) | {
            f"{c}_REPLY_TOPIC" for c in clusters}
        return sorted(t for t in topics if not (
            is_system_topic(t) or t in reserved
            or t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))))

    return run(go())


def commit_offsets(group: str, offsets: dict[tuple[str, str, int], int],
                   access: Access = PLAIN) -> None:
    """Record ``(address, topic, queue id) -> next offset`` as ``group``'s consumer offsets on
    the brokers (UPDATE_CONSUMER_OFFSET), so admin tools show a pipeline's progress and lag.

    Each broker first gets a heartbeat naming ``group`` as a passive (pull) consumer of the
    topics, as RocketMQ's lite pull consumer sends: the broker then makes the group's retry
    topic, whose route is how ``mqadmin consumerProgress`` finds the group's brokers."""
    loop, client = _worker_client(access)
    topics: dict[str, set[str]] = {}
    for addr, topic, _qid in offsets:
        topics.setdefault(addr, set()).add(topic)

    async def go() -> None:
        beats = await asyncio.gather(*(
            client.invoke(addr, RemotingCommand.request(
                RequestCode.HEART_BEAT, None, _group_heartbeat(group, sorted(names))))
            for addr, names in topics.items()))
        for r in beats:
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"registering {group} failed: {r.remark}")
        answers = await asyncio.gather(*(
            client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": qid,
                "commitOffset": offset}))
            for (addr, topic, qid), offset in offsets.items()))
        for r in answers:
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"recording offsets of {group} failed: {r.remark}")

    loop.run(go())


def _group_heartbeat(group: str, topics: list[str]) -> bytes:
    """A HEART_BEAT body of a passive consumer of ``topics`` in ``group`` (this process)."""
    return orjson.dumps({
        "clientID": f"{socket.gethostname()}@spark-{os.getpid()}", "producerDataSet": [],
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": False,
            "subscriptionDataSet": [Subscription.parse(t, "*").to_json() for t in topics]}]})


#: A queue as the data source knows it: ``(topic, broker name, broker address, queue id)``.
QueueKey = tuple[str, str, str, int]


def parse_offsets(option: str, spec: str, timestamp_option: str) -> str | dict[str, Any]:
    """What the option ``option`` (``startingOffsets``, ``endingOffsets``) says: ``"first"``
    (also spelled ``earliest``), ``"last"`` (also ``latest``), ``"timestamp"`` (the time is
    in the option ``timestamp_option``), or the JSON table ``{"topic": {"broker:queueId":
    offset}}``. ValueError naming the option and what it accepts for anything else."""
    text = spec.strip()
    if text.startswith("{"):
        try:
            table = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{option} is not valid JSON ({exc}): {spec!r}") from None
        if not all(isinstance(queues, dict) for queues in table.values()):
            raise ValueError(f'{option} must map each topic to {{"broker:queueId": offset}}, '
                             f"not {spec!r}")
        return table
    try:
        return starting_position(text, option)
    except ValueError:
        raise ValueError(
            f"{option} must be 'first' (or 'earliest'), 'last' (or 'latest'), 'timestamp' (with "
            f"the option {timestamp_option} in ms since the epoch) or JSON per queue such as "
            f'{{"Orders": {{"broker-a:0": 42}}}}, not {spec!r}') from None


def resolve_offsets(option: str, spec: str, queues: dict[QueueKey, tuple[int, int]],
                    default: str, timestamp_option: str, timestamp: str | None = None,
                    access: Access = PLAIN) -> dict[QueueKey, int]:
    """The offset ``spec`` (the value of ``option``, see ``parse_offsets``) gives each queue
    of ``queues`` (``key -> (min offset, max offset)``): its min offset for ``first``, its
    max for ``last``, the first message stored at or after ``timestamp`` (ms) for
    ``timestamp``; from JSON, the queue's entry (-2 first, -1 last, as Kafka's source reads
    them), or ``default`` ("first" or "last") for a queue the table does not name."""
    kind = parse_offsets(option, spec, timestamp_option)
    if kind == "timestamp":
        if timestamp is None:
            raise ValueError(f"{option}=timestamp needs the option {timestamp_option} (ms "
                             "since the epoch)")
        try:
            ms = int(timestamp)
        except ValueError:
            raise ValueError(f"{timestamp_option} must be an integer of ms since the epoch, not "
                             f"{timestamp!r}") from None
        found = offsets_by_time(list(queues), ms, access)
        return {key: min(max(found[key], low), high) for key, (low, high) in queues.items()}
    out = {}
    for key, (low, high) in queues.items():
        topic, broker, _addr, queue_id = key
        value = kind if isinstance(kind, str) else kind.get(topic, {}).get(
            f"{broker}:{queue_id}", default)
        if value in ("first", -2, "-2"):
            out[key] = low
        elif value in ("last", -1, "-1"):
            out[key] = high
        else:
            out[key] = int(value)
    return out


def offsets_by_time(queues: list[QueueKey], timestamp_ms: int,
                    access: Access = PLAIN) -> dict[QueueKey, int]:
    """The offset of the first message stored at or after ``timestamp_ms`` in each queue (its
    max offset when there is none), as the queue's broker answers SEARCH_OFFSET_BY_TIMESTAMP."""
    return offsets_at_times(dict.fromkeys(queues, timestamp_ms), access)


def offsets_at_times(times: dict[QueueKey, int], access: Access = PLAIN
                     ) -> dict[QueueKey, int]:
    """``offsets_by_time`` with a time of its own for each queue: ``queue -> ms``."""

    async def go() -> dict[QueueKey, int]:
        client = access.remoting()
        out = {}
        try:
            for key, timestamp_ms in times.items():
                topic, _broker, addr, queue_id = key
                response = await client.invoke(addr, RemotingCommand.request(
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                    {"topic": topic, "queueId": queue_id, "timestamp": timestamp_ms}))
                if response.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"offset of {topic}@{addr}:{queue_id} at {timestamp_ms}"
                                       f" ms: {response.remark}")
                out[key] = int(response.ext_fields.get("offset", "0"))
        finally:
            await client.close()
        return out

    return run(go())


PULL_WINDOW = 1024  # offsets asked for per pull (the broker also caps a pull at 256 KiB)
PULL_DEPTH = 4  # pulls in flight per queue


def _worker_client(access: Access = PLAIN) -> tuple[_LoopThread, RemotingClient]:
    """The process's event loop thread and a connection pool on it, per way of connecting.
    Spark reuses Python workers, so later partitions read through connections already open."""
    loop = _LoopThread.get()
    found = _WORKERS.get(access)
    if found is None or found[0] is not loop:
        found = _WORKERS[access] = (loop, loop.create(access.remoting))
    return found


_WORKERS: dict[Access, tuple[_LoopThread, RemotingClient]] = {}


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
        self._loop, self._client = _worker_client(access)
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


def send_batches(namesrv: str, default_topic: str | None, group: str,
                 batches: Iterable[Any], halves: Halves | None = None,
                 access: Access = PLAIN) -> Sent:
    """Send each row of Arrow record batches as a message (see ``writes``: the rows are read
    on this thread and sent in batches from the worker's event loop, up to SEND_WINDOW
    requests in flight). The first failed send raises (the Spark task then fails and is
    retried: at least once). With ``halves``, the rows go as half messages, each sent once
    (no retry: a failed task's halves are rolled back, and its retry sends them under a new
    txn). Columns: ``body`` (binary or string), optional ``topic`` (used when there is no
    ``default_topic``), ``tags``, ``keys`` (a string or a list of strings), ``properties``
    (a map)."""
    loop, _client = _worker_client(access)
    return send_rows(loop, partial(access.producer, group, namesrv), default_topic, batches,
                     halves)


# --------------------------------------------------------------------------- sink commits
async def _brokers(namesrv: str, topics: Iterable[str], addrs: dict[str, str],
                   access: Access) -> list[str]:
    """The addresses in ``addrs`` (name -> address) and the masters of the topics' routes."""
    instance = access.instance(namesrv)
    out = dict(addrs)
    try:
        for topic in topics:
            route = await instance.fetch_route(topic)
            for name, by_id in (route.broker_addrs if route else {}).items():
                if 0 in by_id:
                    out.setdefault(name, by_id[0])
    finally:
        await instance.remoting.close()
    return sorted(set(out.values()) - {""})


def _sink_request(code: int, sink: str, batch: str, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, {"sink": sink, "batch": batch}, body)


def commit_sink(namesrv: str, topics: Iterable[str], addrs: dict[str, str], sink: str,
                batch: str, decision: dict[str, dict[str, int]],
                access: Access = PLAIN) -> dict[str, dict[str, int]]:
    """Commit a sink's batch on every broker: the brokers that hold its halves (``addrs``,
    name -> address) and those of ``topics``. A decision recorded before (the batch is
    replayed) wins over ``decision``; the one applied is returned. Raises if a broker refuses
    or cannot be reached: the batch is then not done, and Spark runs it again."""
    loop, client = _worker_client(access)

    async def go() -> dict[str, dict[str, int]]:
        targets = await _brokers(namesrv, topics, addrs, access)
        # A decision recorded on any broker is the batch's: a driver that died after
        # committing on some brokers and not others left it there.
        answers = await asyncio.gather(*(client.invoke(addr, _sink_request(
            RequestCode.SINK_DECISION, sink, batch), 30) for addr in targets))
        chosen = decision
        for addr, r in zip(targets, answers, strict=True):
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"reading sink {sink} batch {batch} on {addr}: {r.remark}")
            if r.ext_fields.get("decided") == "true":
                chosen = orjson.loads(r.body)["txns"]
                break
        body = orjson.dumps({"txns": chosen})
        answers = await asyncio.gather(*(client.invoke(addr, _sink_request(
            RequestCode.SINK_COMMIT, sink, batch, body), 60) for addr in targets))
        for addr, r in zip(targets, answers, strict=True):
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"committing on {addr}: {r.remark}")
        return chosen

    return loop.run(go())


def abort_sink(namesrv: str, topics: Iterable[str], addrs: dict[str, str], sink: str,
               batch: str, access: Access = PLAIN) -> None:
    """Roll back a sink's batch's open halves on every broker (a recorded decision's are
    committed instead). Best effort: halves left open are resolved by the brokers' checks."""
    loop, client = _worker_client(access)

    async def go() -> None:
        targets = await _brokers(namesrv, topics, addrs, access)
        answers = await asyncio.gather(*(client.invoke(addr, _sink_request(
            RequestCode.SINK_ABORT, sink, batch), 60) for addr in targets),
            return_exceptions=True)
        for addr, r in zip(targets, answers, strict=True):
            if isinstance(r, BaseException) or r.code != ResponseCode.SUCCESS:
                log.warning("rolling back sink %s batch %s on %s failed: %s", sink, batch,
                            addr, r if isinstance(r, BaseException) else r.remark)

    loop.run(go())
