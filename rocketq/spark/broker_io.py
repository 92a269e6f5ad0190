"""What the Spark data source does on the network, in plain Python (no Spark imports): find
queues and their offsets, pull an offset range from the owning broker, send rows."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..client.instance import ClientInstance
from ..client.message import Message, ReceivedMessage
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import RemotingCommand
from ..protocol.filter import Subscription
from ..protocol.message import decode_records
from ..remoting import RemotingClient, run

PULL_SUBSCRIPTION = 0x4
PULL_BATCH = 256


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


def pull_range(addr: str, topic: str, queue_id: int, start: int, end: int,
               subscription: str = "*") -> Iterator[ReceivedMessage]:
    """Messages of one queue with offsets in ``[start, end)``, pulled from the broker."""
    sub = Subscription.parse(topic, subscription)

    async def go() -> list[ReceivedMessage]:
        client = RemotingClient()
        out: list[ReceivedMessage] = []
        offset = start
        try:
            while offset < end:
                r = await client.invoke(addr, RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, {
                        "consumerGroup": "rocketq-spark", "topic": topic, "queueId": queue_id,
                        "queueOffset": offset, "maxMsgNums": min(PULL_BATCH, end - offset),
                        "sysFlag": PULL_SUBSCRIPTION, "commitOffset": 0,
                        "suspendTimeoutMillis": 0, "subscription": sub.expression,
                        "subVersion": 0, "expressionType": "TAG"}), 30)
                if r.code == ResponseCode.SUCCESS:
                    for record in decode_records(r.body):
                        if record.queue_offset >= end:
                            break
                        m = ReceivedMessage.from_record(record, "")
                        if sub.matches_tags(m.tags):
                            out.append(m)
                next_offset = int(r.ext_fields.get("nextBeginOffset", offset))
                if r.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED) \
                        and next_offset <= offset:
                    break
                if r.code not in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                                  ResponseCode.PULL_RETRY_IMMEDIATELY,
                                  ResponseCode.PULL_OFFSET_MOVED):
                    raise RuntimeError(f"pull from {addr} failed: {r.remark} (code {r.code})")
                offset = max(next_offset, offset + (0 if r.code == ResponseCode.SUCCESS else 1))
        finally:
            await client.close()
        return out

    return iter(run(go()))


def send_rows(namesrv: str, default_topic: str | None, group: str, rows: Iterable[Any]) -> int:
    """Send each row as a message; raise on the first failure (the task then fails)."""
    from ..client.sync import Producer

    count = 0
    with Producer(group, namesrv=namesrv) as producer:
        for row in rows:
            data = row.asDict() if hasattr(row, "asDict") else dict(row)
            topic = data.get("topic") or default_topic
            if not topic:
                raise ValueError("a row has no topic and the writer has no 'topic' option")
            body = data["body"]
            keys = data.get("keys")
            producer.send(Message(topic, body.encode() if isinstance(body, str) else bytes(body),
                                  tags=data.get("tags"),
                                  keys=keys if keys else None,
                                  properties=data.get("properties") or None))
            count += 1
    return count
