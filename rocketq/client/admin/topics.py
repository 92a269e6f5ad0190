"""Topics: create, change and delete them on the brokers (mqadmin updateTopic, deleteTopic),
list them with their settings, and read their routes and queue offsets (topicRoute,
topicStatus)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from ...protocol import (
    AUTO_CREATE_TOPIC_KEY,
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    fastjson,
)
from ...protocol.topic import is_system_topic
from ..errors import ClientError, InvalidArgumentError, NotFoundError
from .base import AdminBase

#: Queues of a topic created without saying how many: the default of mqadmin's updateTopic
#: and of a broker's defaultTopicQueueNums.
DEFAULT_TOPIC_QUEUES = 8
#: Values of a topic's ``message.type`` attribute (RocketMQ 5's TopicMessageType).
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
#: How long create_topic waits for the NameServer to list a topic it created, in seconds.
TOPIC_VISIBLE_WAIT = 5.0
#: The attribute that says what the 5.x clients may send to a topic.
MESSAGE_TYPE_ATTRIBUTE = "message.type"


@dataclass
class TopicInfo:
    """A topic's settings on the master brokers that hold it."""

    name: str
    #: Read and write queues on each broker (the largest, should the brokers differ).
    read_queues: int
    write_queues: int
    #: Permission bits: 4 read, 2 write, 1 inherit (6: read and write).
    perm: int
    #: The ``message.type`` attribute (NORMAL, FIFO, DELAY, TRANSACTION, MIXED); NORMAL
    #: when the topic has none.
    message_type: str
    #: Whether brokers keep it for themselves or for a group (a retry or dead-letter topic):
    #: not one applications send to.
    system: bool
    #: The ``order`` flag of mqadmin's updateTopic.
    order: bool = False
    #: The names of the brokers that hold it.
    brokers: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``RETRY``, ``DLQ`` or ``SYSTEM`` for those topics, else the message type."""
        if self.name.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return "RETRY"
        if self.name.startswith(DLQ_GROUP_TOPIC_PREFIX):
            return "DLQ"
        return "SYSTEM" if self.system else self.message_type


@dataclass(frozen=True)
class QueueStatus:
    """One queue of a topic (a row of mqadmin topicStatus)."""

    broker_name: str
    queue_id: int
    #: The first offset still stored, and where the next message will go.
    min_offset: int
    max_offset: int
    #: When the queue's last message was stored, ms since the epoch (0: it has none).
    last_update_timestamp: int


def _message_type(message_type: str | None) -> str | None:
    if message_type is None:
        return None
    if not isinstance(message_type, str) or message_type.upper() not in MESSAGE_TYPES:
        raise InvalidArgumentError(f"message_type must be one of {', '.join(MESSAGE_TYPES)}"
                                   f", not {message_type!r}")
    return message_type.upper()


def _type_of(config: dict[str, Any]) -> str:
    attributes = {str(k).lstrip("+"): v for k, v in (config.get("attributes") or {}).items()}
    return str(attributes.get(MESSAGE_TYPE_ATTRIBUTE) or "NORMAL").upper()


class TopicAdmin(AdminBase):
    """Topics across the brokers a NameServer knows."""

    async def create_topic(self, topic: str, queues: int = DEFAULT_TOPIC_QUEUES, *,
                           cluster: str | None = None,
                           perm: int = 6, order: bool = False,
                           message_type: str | None = None) -> dict[str, str]:
        """Create (or update) ``topic`` with ``queues`` read and write queues on every master
        broker (of ``cluster``); returns the brokers it was created on. ``message_type``
        (NORMAL, FIFO, DELAY, TRANSACTION or MIXED) sets RocketMQ 5's ``message.type``
        attribute, which says what the 5.x clients may send to it.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: no master broker was found, or one refused the topic.
            InvalidArgumentError: ``message_type`` is not one of those five.
        """
        message_type = _message_type(message_type)
        masters = await self.masters(cluster)
        if not masters:
            raise ClientError("no master broker found" + (f" in {cluster}" if cluster else ""))
        for name, addr in sorted(masters.items()):
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": topic, "defaultTopic": AUTO_CREATE_TOPIC_KEY,
                    "readQueueNums": queues, "writeQueueNums": queues, "perm": perm,
                    "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": order,
                    **({"attributes": f"+{MESSAGE_TYPE_ATTRIBUTE}={message_type}"}
                       if message_type else {})}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"creating {topic} on {name} ({addr}): {r.remark}")
        await self._until_listed(topic)
        return masters

    async def _until_listed(self, topic: str) -> None:
        """The brokers tell the NameServer right after they answer: wait for that (briefly),
        so that what follows (list_topics, a send, a consumer's route) finds the topic."""
        deadline = time.monotonic() + TOPIC_VISIBLE_WAIT
        while topic not in await self.list_topics() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def update_topic(self, name: str, *, read_queues: int | None = None,
                           write_queues: int | None = None, perm: int | None = None,
                           message_type: str | None = None) -> list[str]:
        """Change the given settings of topic ``name`` on every master broker that holds it,
        keeping the others as they are; returns the names of those brokers.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused a value (queues out of 1..65535, perm out of 0..7).
            NotFoundError: no master broker holds the topic.
            InvalidArgumentError: ``message_type`` is not one of NORMAL, FIFO, DELAY,
                TRANSACTION and MIXED.
        """
        message_type = _message_type(message_type)
        updated = []
        for broker, addr, config in await self._topic_configs(name):
            header = {
                "topic": name, "defaultTopic": AUTO_CREATE_TOPIC_KEY,
                "readQueueNums": config.get("readQueueNums") if read_queues is None
                else read_queues,
                "writeQueueNums": config.get("writeQueueNums") if write_queues is None
                else write_queues,
                "perm": config.get("perm") if perm is None else perm,
                "topicFilterType": config.get("topicFilterType") or "SINGLE_TAG",
                "topicSysFlag": config.get("topicSysFlag") or 0,
                "order": bool(config.get("order"))}
            if message_type is not None:
                header["attributes"] = f"+{MESSAGE_TYPE_ATTRIBUTE}={message_type}"
            await self._ask(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, header), f"updating {name}")
            updated.append(broker)
        return updated

    async def _topic_configs(self, name: str) -> list[tuple[str, str, dict[str, Any]]]:
        """``(broker name, address, topic config)`` of each master that holds ``name``;
        NotFoundError if none does."""
        masters = sorted((await self.masters()).items())

        async def one(addr: str) -> dict[str, Any] | None:
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.GET_TOPIC_CONFIG, {"topic": name}))
            if r.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"topic {name} on {addr}: {r.remark} (code {r.code})")
            data: dict[str, Any] = orjson.loads(r.body)
            return data.get("topicConfig") or data  # RocketMQ 5 sends it bare

        configs = await asyncio.gather(*(one(addr) for _, addr in masters))
        found = [(broker, addr, config) for (broker, addr), config in zip(masters, configs,
                                                                          strict=True)
                 if config is not None]
        if not found:
            raise NotFoundError(f"topic {name} does not exist on any master broker")
        return found

    async def list_topics(self) -> list[str]:
        """Every topic the NameServer knows, sorted (mqadmin topicList), system ones included:
        those brokers create for retries, dead letters and their own use.

        Raises:
            NameServerError: no NameServer answered.
            ClientError: the NameServer refused the query.
        """
        r = await self.instance.invoke_namesrv(lambda: RemotingCommand.request(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"topic list: {r.remark} (code {r.code})")
        return sorted(fastjson.loads(r.body).get("topicList") or [])

    async def _broker_topic_table(self, addr: str) -> dict[str, dict[str, Any]]:
        """The topic table of a broker (GET_ALL_TOPIC_CONFIG): name -> config."""
        r = await self._ask(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG),
                            "topic table")
        table: dict[str, dict[str, Any]] = fastjson.loads(r.body).get("topicConfigTable") or {}
        return table

    async def topics(self) -> list[TopicInfo]:
        """Every topic of every master broker with its settings, sorted by name.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused the query.
        """
        info = await self._cluster_info()
        # Topics named after a cluster or a broker are the brokers' own (RocketMQ creates them
        # for sends that name a cluster or broker instead of a topic), as are reply topics.
        clusters = set(info.get("clusterAddrTable") or {})
        reserved = clusters | set(info.get("brokerAddrTable") or {}) | {
            f"{c}_REPLY_TOPIC" for c in clusters}
        masters = sorted((await self.masters()).items())
        tables = await asyncio.gather(*(self._broker_topic_table(a) for _, a in masters))
        merged: dict[str, TopicInfo] = {}
        for (broker, _), table in zip(masters, tables, strict=True):
            for name, config in table.items():
                merged.setdefault(name, self._topic_info(name, config, reserved))
                topic = merged[name]
                topic.brokers.append(broker)
                topic.read_queues = max(topic.read_queues, int(config.get("readQueueNums", 0)))
                topic.write_queues = max(topic.write_queues,
                                         int(config.get("writeQueueNums", 0)))
        return [merged[name] for name in sorted(merged)]

    @staticmethod
    def _topic_info(name: str, config: dict[str, Any], reserved: set[str]) -> TopicInfo:
        system = (is_system_topic(name) or name in reserved
                  or name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)))
        return TopicInfo(name, int(config.get("readQueueNums", 0)),
                         int(config.get("writeQueueNums", 0)), int(config.get("perm", 6)),
                         _type_of(config), system, bool(config.get("order")))

    async def topic(self, name: str) -> TopicInfo:
        """Topic ``name`` with its settings, from the master brokers that hold it.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            NotFoundError: no master broker holds the topic.
            ClientError: a broker refused the query.
        """
        info = await self._cluster_info()
        reserved = set(info.get("clusterAddrTable") or {}) | set(
            info.get("brokerAddrTable") or {})
        found = await self._topic_configs(name)
        topic = self._topic_info(name, found[0][2], reserved)
        for broker, _, config in found:
            topic.brokers.append(broker)
            topic.read_queues = max(topic.read_queues, int(config.get("readQueueNums", 0)))
            topic.write_queues = max(topic.write_queues, int(config.get("writeQueueNums", 0)))
        return topic

    async def topic_route(self, topic: str) -> dict[str, Any]:
        """The topic's route as the NameServer answers it (mqadmin topicRoute): its
        ``queueDatas`` and ``brokerDatas``.

        Raises:
            NameServerError: no NameServer answered.
            NotFoundError: the NameServer has no route for the topic.
            ClientError: the NameServer refused the query.
        """
        r = await self.instance.invoke_namesrv(lambda: RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if r.code == ResponseCode.TOPIC_NOT_EXIST:
            raise NotFoundError(f"no route for {topic}: {r.remark}")
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"no route for {topic}: {r.remark} (code {r.code})")
        route: dict[str, Any] = orjson.loads(r.body)
        return route

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Each queue of ``topic`` on each of its master brokers: its min and max offsets and
        when it last grew (mqadmin topicStatus), by broker and queue.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused the query.
            NotFoundError: the topic has no route.
        """
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise NotFoundError(f"no route for {topic}")
        rows = []
        for name in sorted(route.broker_addrs):
            addr = self.instance.broker_addr(name)
            if addr is None:
                continue  # no master now: its queues cannot be asked
            r = await self._ask(addr, RemotingCommand.request(
                RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}), f"status of {topic}")
            for mq, stats in fastjson.loads(r.body)["offsetTable"].items:
                rows.append(QueueStatus(
                    name, int(mq["queueId"]), int(stats["minOffset"]),
                    int(stats["maxOffset"]), int(stats.get("lastUpdateTimestamp") or 0)))
        rows.sort(key=lambda q: (q.broker_name, q.queue_id))
        return rows

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete ``topic`` from every master broker (of ``cluster``) and from the NameServers
        (mqadmin deleteTopic): its queues, messages and consumer offsets go. Returns the names
        of the brokers that held it.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            NotFoundError: no broker or NameServer knew the topic (so that a misspelt name
                is not taken for a deleted topic).
            ClientError: a broker or NameServer refused to delete it.
        """
        masters = await self.masters(cluster)
        holders = [name for name, addr in sorted(masters.items())
                   if topic in await self._broker_topic_table(addr)]
        if not holders and await self.instance.fetch_route(topic) is None:
            raise NotFoundError(f"topic {topic} does not exist")
        for name, addr in sorted(masters.items()):
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"deleting {topic} on {name} ({addr}): {r.remark}")
        for addr in self.instance.namesrv_addrs:
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"deleting {topic} on the NameServer {addr}: {r.remark}")
        self.instance.routes.pop(topic, None)
        return holders
