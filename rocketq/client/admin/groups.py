"""Consumer groups: their settings on the brokers (mqadmin updateSubGroup, deleteSubGroup),
their live members and producers' (consumerConnection, producerConnection), and how far they
have consumed (consumerProgress)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson

from ...protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from ...protocol.topic import is_system_group
from ...protocol.version import version_name
from ..errors import ClientError, NotFoundError
from ..message import MessageQueue
from .base import AdminBase

#: Keyword of create_group and update_group -> SubscriptionGroupConfig's JSON name (mqadmin
#: updateSubGroup's -r, -q, -s, ...).
GROUP_SETTINGS = {
    "retry_max_times": "retryMaxTimes", "retry_queues": "retryQueueNums",
    "consume_enable": "consumeEnable", "broadcast_enable": "consumeBroadcastEnable",
    "consume_from_min_enable": "consumeFromMinEnable", "broker_id": "brokerId",
    "slow_broker_id": "whichBrokerWhenConsumeSlowly",
    "notify_enable": "notifyConsumerIdsChangedEnable",
    "fifo": "consumeMessageOrderly",
}


@dataclass
class GroupInfo:
    """A consumer group's settings on its brokers (RocketMQ's SubscriptionGroupConfig)."""

    name: str
    #: Whether the group may consume.
    consume_enable: bool = True
    #: Whether it may consume in broadcasting mode.
    broadcast: bool = True
    #: Attempts before a failed message goes to the group's dead-letter queue.
    retry_max_times: int = 16
    #: A FIFO group for POP consumers (RocketMQ 5's consumeMessageOrderly).
    fifo: bool = False
    #: Whether brokers keep it for themselves or their tools.
    system: bool = False
    #: Queues of the group's retry topic (0: no retries).
    retry_queues: int = 1
    consume_from_min_enable: bool = True
    #: Whether members are told when the group changes.
    notify_enable: bool = True
    #: The broker to consume from, and the one when consumption is slow.
    broker_id: int = 0
    slow_broker_id: int = 1
    #: The addresses of the brokers the settings were read from.
    brokers: list[str] = field(default_factory=list)

    @property
    def orderly(self) -> bool:
        """``fifo``, by RocketMQ's name for it."""
        return self.fifo

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> GroupInfo:
        def flag(key: str, default: bool) -> bool:
            value = data.get(key, default)
            return value is True or str(value).lower() == "true"

        return cls(name, flag("consumeEnable", True), flag("consumeBroadcastEnable", True),
                   int(data.get("retryMaxTimes", 16)), flag("consumeMessageOrderly", False),
                   is_system_group(name), int(data.get("retryQueueNums", 1)),
                   flag("consumeFromMinEnable", True),
                   flag("notifyConsumerIdsChangedEnable", True), int(data.get("brokerId", 0)),
                   int(data.get("whichBrokerWhenConsumeSlowly", 1)))


@dataclass
class Connection:
    """A live member of a consumer or producer group (RocketMQ's Connection), as a broker
    sees it."""

    client_id: str
    #: ``host:port`` of its connection to ``broker_name``.
    address: str
    #: JAVA, CPP, PYTHON, GO, ...
    language: str
    #: The RocketMQ version it says it speaks (MQVersion's number)...
    version: int
    #: ... and its name, e.g. ``V4_9_8``.
    version_name: str = field(init=False, default="")
    #: The broker that reported it.
    broker_name: str = ""
    #: A consumer's subscriptions, ``topic -> expression`` (its group's, as the broker
    #: holds them); empty for a producer.
    subscriptions: dict[str, str] = field(default_factory=dict)
    #: The kind of each subscription's expression, ``topic -> TAG or SQL92``.
    subscription_types: dict[str, str] = field(default_factory=dict)
    #: A consumer's CLUSTERING or BROADCASTING; None for a producer.
    message_model: str | None = None
    #: A consumer's CONSUME_PASSIVELY (push), CONSUME_ACTIVELY (pull) or CONSUME_POP.
    consume_type: str | None = None
    #: A consumer's starting point where it has no offset (CONSUME_FROM_LAST_OFFSET, ...).
    consume_from_where: str | None = None

    def __post_init__(self) -> None:
        self.version_name = version_name(self.version)


@dataclass(frozen=True)
class QueueProgress:
    """How far a consumer group has come in one queue (a row of mqadmin consumerProgress)."""

    queue: MessageQueue
    #: The queue's max offset: where the next message stored will go.
    broker_offset: int
    #: The group's committed offset: the next message it will consume.
    consumer_offset: int
    #: When the last message the group consumed was stored, ms since the epoch (0: unknown).
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        """Messages stored and not consumed yet (never negative)."""
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(frozen=True)
class ConsumerProgress:
    """A consumer group's progress through every queue it has offsets in (or of one topic)."""

    group: str
    #: One entry per queue, by topic, broker and queue id.
    queues: list[QueueProgress]

    @property
    def total_lag(self) -> int:
        """The sum of the queues' lags: what the group still has to consume."""
        return sum(q.lag for q in self.queues)

    def lag_by_topic(self) -> dict[str, int]:
        """``topic -> lag`` summed over the topic's queues."""
        out: dict[str, int] = {}
        for q in self.queues:
            out[q.queue.topic] = out.get(q.queue.topic, 0) + q.lag
        return out


def _settings(arguments: dict[str, Any]) -> dict[str, Any]:
    """The SubscriptionGroupConfig fields among a call's arguments that were given."""
    return {GROUP_SETTINGS[k]: v for k, v in arguments.items()
            if k in GROUP_SETTINGS and v is not None}


class GroupAdmin(AdminBase):
    """Consumer groups: settings, members and progress."""

    # ------------------------------------------------------------------ settings
    async def group_table(self, *, brokers: list[str] | None = None,
                          cluster: str | None = None) -> dict[str, list[GroupInfo]]:
        """``broker address -> its groups`` (mqadmin's subscription group table, 201) of
        the brokers named, else of every broker of ``cluster``, else of every master.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused the query.
        """
        addrs = await self._targets(brokers, cluster)
        tables = await asyncio.gather(*(self._group_configs(a) for a in addrs))
        out = {}
        for addr, table in zip(addrs, tables, strict=True):
            out[addr] = [GroupInfo.from_json(name, cfg) for name, cfg in sorted(table.items())]
            for group in out[addr]:
                group.brokers.append(addr)
        return out

    async def _group_configs(self, addr: str) -> dict[str, dict[str, Any]]:
        r = await self._ask(addr, RemotingCommand.request(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), "subscription groups")
        table: dict[str, dict[str, Any]] = orjson.loads(r.body).get(
            "subscriptionGroupTable") or {}
        return table

    async def groups(self) -> list[GroupInfo]:
        """Every consumer group of every master broker, by name, with its settings (those of
        the first broker by address, should they differ) and the brokers that have it.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused the query.
        """
        merged: dict[str, GroupInfo] = {}
        for addr, groups in sorted((await self.group_table()).items()):
            for group in groups:
                if group.name in merged:
                    merged[group.name].brokers.append(addr)
                else:
                    merged[group.name] = group
        return [merged[name] for name in sorted(merged)]

    async def group(self, name: str) -> GroupInfo:
        """Consumer group ``name`` with its settings.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            NotFoundError: no master broker has the group.
        """
        for group in await self.groups():
            if group.name == name:
                return group
        raise NotFoundError(f"consumer group {name} does not exist on any master broker")

    async def create_group(self, group: str, *, retry_max_times: int | None = None,
                           retry_queues: int | None = None, consume_enable: bool | None = None,
                           broadcast_enable: bool | None = None,
                           consume_from_min_enable: bool | None = None,
                           notify_enable: bool | None = None, fifo: bool | None = None,
                           broker_id: int | None = None, slow_broker_id: int | None = None,
                           brokers: list[str] | None = None,
                           cluster: str | None = None) -> list[str]:
        """Create consumer group ``group``, or replace its settings, on the brokers named,
        else on every broker of ``cluster``, else on every master (mqadmin updateSubGroup);
        settings left out take RocketMQ's defaults. Returns the brokers' addresses.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused a setting or the name; every broker is tried first.
        """
        settings = _settings(locals())
        return await self._send_group(group, settings, True, brokers, cluster)

    async def update_group(self, group: str, *, retry_max_times: int | None = None,
                           retry_queues: int | None = None, consume_enable: bool | None = None,
                           broadcast_enable: bool | None = None,
                           consume_from_min_enable: bool | None = None,
                           notify_enable: bool | None = None, fifo: bool | None = None,
                           broker_id: int | None = None, slow_broker_id: int | None = None,
                           brokers: list[str] | None = None,
                           cluster: str | None = None) -> list[str]:
        """Change the given settings of ``group`` and keep the rest, on the brokers named,
        else on every broker of ``cluster``, else on every master. Returns the brokers'
        addresses.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused a setting; every broker is tried first.
        """
        settings = _settings(locals())
        return await self._send_group(group, settings, False, brokers, cluster)

    async def _send_group(self, group: str, settings: dict[str, Any], replace: bool,
                          brokers: list[str] | None, cluster: str | None) -> list[str]:
        addrs = await self._targets(brokers, cluster)
        if not addrs:
            raise ClientError("no broker to change the group on")

        async def change(addr: str) -> None:
            current = {} if replace else (await self._group_configs(addr)).get(group, {})
            config = {**current, **settings, "groupName": group}
            await self._ask(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(config)),
                f"{'creating' if replace else 'updating'} group {group}")
        return await self._on_each(addrs, change)

    async def delete_group(self, group: str, *, remove_offset: bool = False,
                           brokers: list[str] | None = None,
                           cluster: str | None = None) -> list[str]:
        """Delete consumer group ``group`` (and, with ``remove_offset``, its committed
        offsets) from the brokers named, else from every broker of ``cluster``, else from
        every master (mqadmin deleteSubGroup). Returns the brokers' addresses.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused; every broker is tried first.
        """
        async def delete(addr: str) -> None:
            await self._ask(addr, RemotingCommand.request(
                RequestCode.DELETE_SUBSCRIPTIONGROUP,
                {"groupName": group, "removeOffset": remove_offset}), f"deleting group {group}")
        return await self._on_each(await self._targets(brokers, cluster), delete)

    # ------------------------------------------------------------------ members
    async def consumer_connections(self, group: str) -> list[Connection]:
        """The live members of consumer group ``group`` (mqadmin consumerConnection), each
        once (as the first master broker by name that knows it reports it), with the group's
        subscriptions and message model; empty when no member is online.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused the query.
        """
        return await self._connections(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                       {"consumerGroup": group}, ResponseCode.CONSUMER_NOT_ONLINE)

    async def producer_connections(self, group: str) -> list[Connection]:
        """The live producers of producer group ``group`` (mqadmin producerConnection), each
        once; empty when none is connected.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
        """
        # A broker that knows no such group answers SYSTEM_ERROR (RocketMQ's answer too).
        return await self._connections(RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                       {"producerGroup": group}, ResponseCode.SYSTEM_ERROR)

    async def _connections(self, code: int, header: dict[str, str], none: int
                           ) -> list[Connection]:
        masters = sorted((await self.masters()).items())

        async def one(addr: str) -> dict[str, Any] | None:
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(code, header))
            if r.code == none:
                return None
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"connections on {addr}: {r.remark} (code {r.code})")
            data: dict[str, Any] = orjson.loads(r.body)
            return data

        answers = await asyncio.gather(*(one(addr) for _, addr in masters))
        seen: dict[str, Connection] = {}
        for (broker, _), data in zip(masters, answers, strict=True):
            if data is None:
                continue
            table = sorted((data.get("subscriptionTable") or {}).items())
            subs = {t: str(s.get("subString") or "*") for t, s in table}
            kinds = {t: str(s.get("expressionType") or "TAG") for t, s in table}
            for c in data.get("connectionSet") or ():
                if c["clientId"] not in seen:
                    seen[c["clientId"]] = Connection(
                        c["clientId"], c.get("clientAddr", ""), str(c.get("language", "")),
                        int(c.get("version", -1)), broker, subs, kinds,
                        data.get("messageModel"), data.get("consumeType"),
                        data.get("consumeFromWhere"))
        return list(seen.values())

    # ------------------------------------------------------------------ progress
    async def consumer_progress(self, group: str, topic: str | None = None
                                ) -> ConsumerProgress:
        """Where ``group`` stands in each queue of ``topic`` (default: of every topic it has
        offsets in or subscribes to), from every master broker: the queue's max offset, the
        group's committed offset, and the lag between them (mqadmin consumerProgress). A
        group no broker knows has no queues.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: a broker refused the query.
        """
        ext = {"consumerGroup": group}
        if topic:
            ext["topic"] = topic
        rows = []
        for name, addr in sorted((await self.masters()).items()):
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.GET_CONSUME_STATS, ext))
            if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
                continue  # the broker has no offsets of the group (RocketMQ's answer)
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"progress of {group} on {name} ({addr}): {r.remark} "
                                  f"(code {r.code})")
            for mq, stats in fastjson.loads(r.body)["offsetTable"].items:
                rows.append(QueueProgress(
                    MessageQueue(mq["topic"], mq.get("brokerName") or name, mq["queueId"]),
                    int(stats["brokerOffset"]), int(stats["consumerOffset"]),
                    int(stats.get("lastTimestamp") or 0)))
        rows.sort(key=lambda q: (q.queue.topic, q.queue.broker_name, q.queue.queue_id))
        return ConsumerProgress(group, rows)
