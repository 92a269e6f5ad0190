"""What the Spark data source asks the NameServer and the brokers on the driver, in plain
Python (no Spark imports): the queues of topics and their offsets, the users' topics a
pattern is matched against, where an offset option or a time puts each queue, and a consumer
group's progress. How the connector connects is ``access.py``; the tasks' pulls are
``pulls.py``, their sends ``writes.py``, the sink's commits ``sink_commits.py``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from typing import Any

import orjson

from ..client.consumer import starting_position
from ..protocol import RemotingCommand, RequestCode, ResponseCode
from ..protocol.filter import Subscription
from ..protocol.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic
from ..remoting import run
from .access import PLAIN, Access, worker_client


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
    loop, client = worker_client(access)
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
