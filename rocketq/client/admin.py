"""Message queries (RocketMQ's MQAdminImpl): by id, by key and time, offsets by time."""

from __future__ import annotations

import asyncio
import ssl
import time

from ..acl import Credentials
from ..protocol import (
    MessageFormatError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_records,
    fastjson,
)
from ..protocol.message import decode_offset_msg_id
from .errors import ClientError
from .instance import ClientInstance
from .message import MessageQueue, ReceivedMessage


class AsyncAdmin:
    """Look messages up across the brokers of a topic."""

    def __init__(self, namesrv: str, *,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None,
                 instance: ClientInstance | None = None) -> None:
        self.instance = instance or ClientInstance(namesrv, credentials=credentials, tls=tls)

    async def close(self) -> None:
        await self.instance.remoting.close()

    async def __aenter__(self) -> AsyncAdmin:
        """The admin itself; ``close()`` runs on leaving the block."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """``broker name -> master address`` of every broker (of ``cluster``, if given)."""
        r = await self.instance.invoke_namesrv(lambda: RemotingCommand.request(
            RequestCode.GET_BROKER_CLUSTER_INFO))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"cluster info: {r.remark}")
        info = fastjson.loads(r.body)
        names = set(info.get("clusterAddrTable", {}).get(cluster, [])) if cluster else None
        out = {}
        for name, data in info.get("brokerAddrTable", {}).items():
            addrs = {int(k): v for k, v in (data.get("brokerAddrs") or {}).items()}
            if 0 in addrs and (names is None or name in names):
                out[name] = addrs[0]
        return out

    async def create_topic(self, topic: str, queues: int = 4, *, cluster: str | None = None,
                           perm: int = 6, order: bool = False) -> dict[str, str]:
        """Create (or update) ``topic`` with ``queues`` read and write queues on every master
        broker (of ``cluster``); returns the brokers it was created on."""
        masters = await self.masters(cluster)
        if not masters:
            raise ClientError("no master broker found" + (f" in {cluster}" if cluster else ""))
        for name, addr in sorted(masters.items()):
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
                    "writeQueueNums": queues, "perm": perm, "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0, "order": order}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"creating {topic} on {name} ({addr}): {r.remark}")
        return masters

    async def view_message(self, offset_msg_id: str) -> ReceivedMessage:
        """The message with this offset id (it names its broker and CommitLog offset)."""
        try:
            host, port, offset = decode_offset_msg_id(offset_msg_id)
        except MessageFormatError as exc:
            raise ClientError(str(exc)) from None
        response = await self.instance.remoting.invoke(f"{host}:{port}", RemotingCommand.request(
            RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"no message {offset_msg_id}: {response.remark}")
        record = decode_records(response.body, decompress=True)[0]
        return ReceivedMessage.from_record(record, "")

    async def query_messages(self, topic: str, key: str, *, max_num: int = 32,
                             begin: int = 0, end: int | None = None, unique: bool = False
                             ) -> list[ReceivedMessage]:
        """Messages of ``topic`` whose key (or, with ``unique``, unique id) is ``key``, stored
        between ``begin`` and ``end`` (ms since the epoch), from every broker of the topic."""
        end = int(time.time() * 1000) + 1000 if end is None else end
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise ClientError(f"No route info of this topic: {topic}")

        async def one(name: str) -> list[ReceivedMessage]:
            addr = self.instance.broker_addr(name)
            if addr is None:
                return []
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.QUERY_MESSAGE, {"topic": topic, "key": key, "maxNum": max_num,
                                            "beginTimestamp": begin, "endTimestamp": end,
                                            "_UNIQUE_KEY_QUERY": unique}))
            if r.code != ResponseCode.SUCCESS:
                return []
            return [ReceivedMessage.from_record(rec, name)
                    for rec in decode_records(r.body, decompress=True)]

        found = [m for batch in await asyncio.gather(*(one(n) for n in route.broker_addrs))
                 for m in batch]
        # The index matches hashes; keep exact matches only, newest first.
        found = [m for m in found
                 if (m.properties.get("UNIQ_KEY") == key if unique else key in m.keys)]
        found.sort(key=lambda m: m.store_timestamp, reverse=True)
        return found[:max_num]

    async def query_message_by_unique_key(self, topic: str, msg_id: str) -> ReceivedMessage:
        found = await self.query_messages(topic, msg_id, max_num=1, unique=True)
        if not found:
            raise ClientError(f"no message of {topic} with unique id {msg_id}")
        return found[0]

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms``."""
        r = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": mq.topic, "queueId": mq.queue_id,
                                                     "timestamp": timestamp_ms}), 3, mq.topic)
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"offset search on {mq}: {r.remark}")
        return int(r.ext_fields.get("offset", "0"))
