"""Consumer offsets on the client side: kept in memory, committed to the broker every 5 s and
at shutdown (clustering, RocketMQ's RemoteBrokerOffsetStore), or kept in a local file
(broadcasting, LocalFileOffsetStore). An offset is the next one to consume."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Protocol

import orjson

from ..protocol import RemotingCommand, RequestCode, ResponseCode
from ..remoting import RemotingError
from .errors import ClientError
from .instance import ClientInstance
from .message import MessageQueue

log = logging.getLogger("rocketq.client")


class OffsetStore(Protocol):
    async def load(self) -> None: ...
    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None: ...
    async def read(self, mq: MessageQueue) -> int | None: ...
    def read_memory(self, mq: MessageQueue) -> int | None: ...
    async def persist(self, queues: list[MessageQueue]) -> None: ...
    def remove(self, mq: MessageQueue) -> None: ...


class _MemoryTable:
    """The in-memory offsets both stores keep between persists."""

    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        current = self.table.get(mq)
        if current is None or not increase_only or offset > current:
            self.table[mq] = offset

    def read_memory(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)


class RemoteOffsetStore(_MemoryTable):
    """Offsets of a clustering group, stored on the brokers."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def load(self) -> None:
        pass

    async def read(self, mq: MessageQueue) -> int | None:
        """The broker's committed offset, or None when the group has none for the queue."""
        response = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": self.group, "topic": mq.topic,
                                                "queueId": mq.queue_id}), 3, mq.topic,
            master_only=False)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"query offset of {mq}: {response.remark}")
        offset = int(response.ext_fields.get("offset", "0"))
        self.table[mq] = offset
        return offset

    async def commit(self, mq: MessageQueue, offset: int) -> None:
        addr = await self.instance.broker_addr_or_refresh(mq.broker_name, mq.topic)
        await self.instance.remoting.invoke(addr, RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id,
                "commitOffset": offset}), 3)

    async def persist(self, queues: list[MessageQueue]) -> None:
        async def one(mq: MessageQueue) -> None:
            offset = self.table.get(mq)
            if offset is None:
                return
            try:
                await self.commit(mq, offset)
            except (RemotingError, OSError, ClientError) as exc:
                log.info("committing offset %d of %s failed: %s", offset, mq, exc)

        await asyncio.gather(*(one(mq) for mq in queues))

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)


class LocalOffsetStore(_MemoryTable):
    """Offsets of a broadcasting consumer, in ``<directory>/<client>/<group>/offsets.json``."""

    def __init__(self, directory: str, client_name: str, group: str) -> None:
        super().__init__()
        self.path = os.path.join(directory, client_name, group, "offsets.json")

    async def load(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as fh:
            data = orjson.loads(fh.read())
        for entry in data.get("offsetTable", []):
            mq = MessageQueue(entry["topic"], entry["brokerName"], int(entry["queueId"]))
            self.table[mq] = int(entry["offset"])

    async def read(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    async def persist(self, queues: list[MessageQueue]) -> None:
        data = orjson.dumps({"offsetTable": [
            {**mq.to_json(), "offset": offset} for mq, offset in sorted(self.table.items())]},
            option=orjson.OPT_INDENT_2)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, self.path)

    def remove(self, mq: MessageQueue) -> None:
        pass  # a broadcasting consumer keeps its position in every queue
