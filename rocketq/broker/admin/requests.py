"""Admin requests of a broker (RocketMQ's AdminBrokerProcessor): topics, the broker's config,
runtime info and statistics, the connections of producer and consumer groups; and bad fields
of admin requests answered INVALID_PARAMETER.

Statistics (mqadmin ``statsAll``, ``brokerConsumeStats``, ``consumerProgress``):

- VIEW_BROKER_STATS_DATA (315), header ``statsName`` and ``statsKey``: one stats item's
  minute, hour and day (BrokerStatsData, from ``stats_items``). Names: ``TOPIC_PUT_NUMS`` and
  ``TOPIC_PUT_SIZE`` by topic; ``GROUP_GET_NUMS``, ``GROUP_GET_SIZE`` and ``SNDBCK_PUT_NUMS``
  by ``topic@group``; ``BROKER_PUT_NUMS`` and ``BROKER_GET_NUMS`` by the cluster's name. An
  item nothing was counted under yet answers SYSTEM_ERROR "The stats <name> <key> not exist",
  as RocketMQ does (statsAll then prints 0 for it); so does a name rocketq does not keep
  (``GROUP_GET_LATENCY``, the queue-level and commercial ones).
- GET_BROKER_CONSUME_STATS (317), header ``isOrder``: every group's ConsumeStats in each topic
  it has offsets in, and the lag of them all (ConsumeStatsList). The groups are those with
  committed offsets (RocketMQ walks its subscription group table, where a group without
  offsets gets an empty list, which mqadmin prints nothing for).
- GET_CONSUME_STATS (208) and 317 give each group's ``consumeTps``: the messages per second it
  pulled from the topic over the last minute (``GROUP_GET_NUMS``), summed over the topics.

UPDATE_AND_CREATE_TOPIC (17) checks every field before anything changes, and the table changes
in memory only once it is saved. DELETE_TOPIC_IN_BROKER (215) drops the topic, its consumer
offsets and its queues.

UPDATE_BROKER_CONFIG (mqadmin ``updateBrokerConfig -k KEY -v VALUE``) carries Java properties
text in its body, as AdminBrokerProcessor.updateBrokerConfig reads it with
MixAll.string2Properties. RocketMQ sets whatever key it knows (Configuration.update) and writes
the whole configuration back; rocketq is stricter, all or nothing: an unknown key, a value that
does not convert or is out of range, or a key that is read only at start refuses the whole
request and changes nothing. Accepted values are saved to
``<storePathRootDir>/config/broker.properties`` first, then set on the live configuration, so
a change survives a restart and a change that cannot be saved is not made.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson

from ...protocol import (
    AUTO_CREATE_TOPIC_KEY,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    fastjson,
)
from ...remoting import Connection
from ..clients import ClientChannel, ClientTable
from ..config import BrokerConfig
from ..config_updates import (
    ConfigUpdateError,
    apply_settings,
    check_settings,
    overrides_path,
    save_overrides,
)
from ..offsets.table import ConsumerOffsets
from ..properties import parse_properties
from ..stats import Stats
from ..stats.stats_items import BROKER_KEY, BROKER_WIDE
from ..topics import TopicConfigError, TopicTable, topic_config_from_request

if TYPE_CHECKING:
    from ...store import MessageStore, MessageStoreConfig

log = logging.getLogger("rocketq.broker")

Handler = Callable[[Connection, RemotingCommand], Any]

#: Requests of admin tools whose header fields a broker parses. A field that is missing or
#: not an integer is the caller's mistake: INVALID_PARAMETER naming it, not SYSTEM_ERROR.
ADMIN_CODES = (
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_TOPIC_CONFIG,
    RequestCode.UPDATE_BROKER_CONFIG, RequestCode.GET_BROKER_CONFIG,
    RequestCode.GET_BROKER_RUNTIME_INFO, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.GET_EARLIEST_MSG_STORETIME, RequestCode.VIEW_MESSAGE_BY_ID,
    RequestCode.QUERY_MESSAGE, RequestCode.GET_TOPIC_STATS_INFO, RequestCode.GET_CONSUME_STATS,
    RequestCode.GET_CONSUMER_CONNECTION_LIST, RequestCode.GET_PRODUCER_CONNECTION_LIST,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, RequestCode.VIEW_BROKER_STATS_DATA,
    RequestCode.GET_BROKER_CONSUME_STATS,
)


def guard_admin_fields(handlers: dict[int, Handler]) -> dict[int, Handler]:
    """``handlers`` with those of ADMIN_CODES wrapped so that a bad header field answers
    INVALID_PARAMETER."""
    guarded = dict(handlers)
    for code in ADMIN_CODES:
        handler = handlers.get(code)
        if handler is not None:
            guarded[code] = _invalid_parameter_on_bad_field(handler)
    return guarded


def _invalid_parameter_on_bad_field(handler: Handler) -> Handler:
    def handle(conn: Connection, cmd: RemotingCommand) -> Any:
        try:
            result = handler(conn, cmd)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if inspect.isawaitable(result):
            return _awaited(result, cmd)
        return result
    return handle


async def _awaited(pending: Any, cmd: RemotingCommand) -> Any:
    try:
        return await pending
    except ProtocolError as exc:
        return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))


def _mq(broker_name: str, topic: str, queue_id: int) -> dict[str, Any]:
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def _connection(channel: ClientChannel) -> dict[str, Any]:
    peer = channel.connection.peer
    return {"clientId": channel.client_id, "clientAddr": f"{peer[0]}:{peer[1]}",
            "language": channel.language, "version": channel.version}


#: Config fields GET_BROKER_CONFIG leaves out: containers, and the broker's own secret.
NOT_SHOWN = ("unknown", "tls", "innerClientAuthenticationCredentials")


class AdminRequests:
    """Serves the admin requests over the broker's config, topics, offsets, client table and
    store; ``runtime_info`` builds the GET_BROKER_RUNTIME_INFO table."""

    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig,
                 store: Callable[[], MessageStore], topics: TopicTable,
                 offsets: ConsumerOffsets, clients: ClientTable,
                 topics_changed: Callable[[], None],
                 runtime_info: Callable[[], dict[str, str]], stats: Stats | None = None) -> None:
        self.config = config
        self.store_config = store_config
        self._store = store  # the store exists once the broker has started
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.topics_changed = topics_changed
        self.runtime_info = runtime_info
        #: The windows over the broker's counters (a part tested alone gets its own).
        self.stats_items = (stats if stats is not None else Stats()).items

    @property
    def store(self) -> MessageStore:
        return self._store()

    def handlers(self) -> dict[int, Handler]:
        """The request handlers to add to the broker's table."""
        return {RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
                RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
                RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
                RequestCode.GET_TOPIC_CONFIG: self.topic_config,
                RequestCode.GET_BROKER_RUNTIME_INFO: self.broker_runtime_info,
                RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
                RequestCode.GET_CONSUME_STATS: self.consume_stats,
                RequestCode.VIEW_BROKER_STATS_DATA: self.view_broker_stats_data,
                RequestCode.GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
                RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
                RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
                RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by,
                RequestCode.GET_BROKER_CONFIG: self.broker_config,
                RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config}

    # ------------------------------------------------------------------ topics
    def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC: every field is checked before anything changes, and the
        table changes in memory only once it is saved."""
        try:
            config = topic_config_from_request(
                cmd.ext_fields, self.topics.get(cmd.ext_fields.get("topic") or ""))
        except TopicConfigError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        topic = config.topic_name
        if topic == self.config.brokerClusterName or topic == self.config.brokerName:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark=f"the topic[{topic}] is conflict with system topic")
        try:
            self.topics.update(config)
        except OSError as exc:
            log.error("topic %s not changed: %s cannot be saved: %s", topic, self.topics.path,
                      exc)
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"the topic config cannot be saved, nothing changed: "
                                       f"{exc}")
        self.topics_changed()
        return cmd.response()

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_BROKER: the topic, its consumer offsets and its queues go."""
        topic = cmd.field("topic") or ""
        self.topics.delete(topic)
        self.offsets.remove_topic(topic)
        self.store.delete_topics([topic])
        self.topics_changed()
        return cmd.response()

    def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_TOPIC_CONFIG: the topic table with its DataVersion."""
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(self.topics.register_body()))

    def topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_CONFIG: one topic's config."""
        topic = self.topics.get(cmd.field("topic") or "")
        if topic is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark="No topic in this broker.")
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"topicConfig": topic.to_json()}))

    # ------------------------------------------------------------------ runtime and stats
    def broker_runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_RUNTIME_INFO: the table mqadmin's clusterList and brokerStatus read."""
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"table": self.runtime_info()}))

    def _queue_ids(self, topic: str) -> list[int]:
        config = self.topics.get(topic)
        return list(range(config.read_queue_nums)) if config else self.store.queue_ids(topic)

    def topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO: each queue's min and max offset and last store time."""
        store = self.store
        topic = cmd.field("topic") or ""
        if self.topics.get(topic) is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                remark=f"topic[{topic}] not exist")
        items = []
        for qid in self._queue_ids(topic):
            max_offset = store.get_max_offset(topic, qid)
            last = (store.get_message_store_timestamp(topic, qid, max_offset - 1)
                    if max_offset > 0 else None)
            items.append((_mq(self.config.brokerName, topic, qid), {
                "minOffset": store.get_min_offset(topic, qid), "maxOffset": max_offset,
                "lastUpdateTimestamp": last or 0}))
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(
            {"offsetTable": fastjson.ObjectKeyMap(items)}))

    def consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUME_STATS: a group's offsets against each queue's max offset, in one topic
        or in every topic it has offsets in or subscribes to, and its consume rate."""
        group = cmd.field("consumerGroup") or ""
        wanted = cmd.field("topic")
        topics = [wanted] if wanted else self.offsets.topics_of_group(group)
        if not wanted:
            g = self.clients.consumers.get(group)
            if g is not None:
                topics = sorted(set(topics) | set(g.subscriptions))
        items: list[tuple[dict[str, Any], dict[str, int]]] = []
        consume_tps = 0.0
        for topic in topics:
            if self.topics.get(topic) is None:
                continue
            items += self._offset_table(group, topic, self._queue_ids(topic))
            consume_tps += self.stats_items.group_get_tps(topic, group)
        if not items:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                remark=f"the consumer group[{group}] not online")
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(
            {"offsetTable": fastjson.ObjectKeyMap(items), "consumeTps": consume_tps}))

    def _offset_table(self, group: str, topic: str, queue_ids: Iterable[int]
                      ) -> list[tuple[dict[str, Any], dict[str, int]]]:
        """ConsumeStats.offsetTable's entries: (MessageQueue, OffsetWrapper) of each queue."""
        store = self.store
        items = []
        for qid in queue_ids:
            consumer = self.offsets.query(group, topic, qid)
            last = None
            if consumer is not None and consumer > 0:
                last = store.get_message_store_timestamp(topic, qid, consumer - 1)
            items.append((_mq(self.config.brokerName, topic, qid), {
                "brokerOffset": max(0, store.get_max_offset(topic, qid)),
                "consumerOffset": consumer if consumer is not None else 0,
                "pullOffset": consumer if consumer is not None else 0,
                "lastTimestamp": last or 0}))
        return items

    def broker_consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS: each group's ConsumeStats in each topic it has offsets in
        (only ordered topics when ``isOrder``), as AdminBrokerProcessor
        .fetchAllConsumeStatsInBroker builds them: a topic the group's online members do not
        subscribe to is left out, queues are the topic's write queues, and ``totalDiff`` is
        the sum of broker offset minus consumer offset over every queue listed."""
        only_ordered = cmd.bool_field("isOrder")
        topics_of: dict[str, set[str]] = {}
        for group, topic, _queue_id, _offset in self.offsets.committed():
            topics_of.setdefault(group, set()).add(topic)
        stats_list: list[dict[str, list[dict[str, Any]]]] = []
        total_diff = 0
        for group in sorted(topics_of):
            online = self.clients.consumers.get(group)
            subscribed = online.subscriptions if online is not None else {}
            per_topic = []
            for topic in sorted(topics_of[group]):
                config = self.topics.get(topic)
                if config is None or (only_ordered and not config.order):
                    continue
                if subscribed and topic not in subscribed:
                    continue
                items = self._offset_table(group, topic, range(config.write_queue_nums))
                total_diff += sum(w["brokerOffset"] - w["consumerOffset"] for _, w in items)
                per_topic.append({"consumeTps": self.stats_items.group_get_tps(topic, group),
                                  "offsetTable": fastjson.ObjectKeyMap(items)})
            stats_list.append({group: per_topic})
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps({
            "brokerAddr": self.config.broker_addr, "consumeStatsList": stats_list,
            "totalDiff": total_diff}))

    def view_broker_stats_data(self, conn: Connection, cmd: RemotingCommand
                               ) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA: one stats item's minute, hour and day (BrokerStatsData)."""
        name = cmd.field("statsName") or ""
        key = cmd.field("statsKey") or ""
        data = None
        if name not in BROKER_WIDE:
            data = self.stats_items.view(name, key)
        elif key == self.config.brokerClusterName:
            data = self.stats_items.view(name, BROKER_KEY)
        if data is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"The stats <{name}> <{key}> not exist")
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(data))

    # ------------------------------------------------------------------ connections
    def consumer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_CONNECTION_LIST: a consumer group's members and subscriptions."""
        group = self.clients.consumers.get(cmd.field("consumerGroup") or "")
        if group is None or not group.channels:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                remark=f"the consumer group[{cmd.field('consumerGroup')}] not "
                                       "online")
        body = {
            "connectionSet": [_connection(ch) for ch in group.channels.values()],
            "subscriptionTable": {t: s.to_json() for t, s in group.subscriptions.items()},
            "consumeType": group.consume_type, "messageModel": group.message_model,
            "consumeFromWhere": group.consume_from_where,
        }
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def producer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST: a producer group's members."""
        members = self.clients.producers.get(cmd.field("producerGroup") or "") or {}
        if not members:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="the producer group not exist")
        body = {"connectionSet": [_connection(ch) for ch in members.values()]}
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def consumed_by(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO: the groups with offsets in or a subscription to a
        topic."""
        topic = cmd.field("topic") or ""
        groups = set(self.offsets.groups_of_topic(topic))
        groups |= {g.name for g in self.clients.consumers.values() if topic in g.subscriptions}
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"groupList": sorted(groups)}))

    # ------------------------------------------------------------------ broker config
    def broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG: every broker and store setting as properties text."""
        values = {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)
                  if f.name not in NOT_SHOWN}
        # TLS paths are shown as given; secrets are not shown at all.
        values.update({k: v for k, v in self.config.tls.items() if "Password" not in k})
        values.update({f.name: getattr(self.store_config, f.name)
                       for f in dataclasses.fields(self.store_config) if f.name != "unknown"})
        text = "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                       for k, v in sorted(values.items()))
        return cmd.response(ResponseCode.SUCCESS, {"version": orjson.dumps(
            self.topics.data_version.to_json()).decode()}, text.encode())

    def update_broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG: check every key, save, apply, and take the changes up where
        they are not read on each use."""
        try:
            text = cmd.body.decode("utf-8")
        except UnicodeDecodeError:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark="the body is not UTF-8 properties text")
        try:
            values = check_settings(parse_properties(text))
        except ConfigUpdateError as exc:
            code = ResponseCode.NO_PERMISSION if exc.static else ResponseCode.INVALID_PARAMETER
            return cmd.response(code, remark=str(exc))
        if not values:
            return cmd.response()
        path = overrides_path(self.store_config)
        try:
            save_overrides(path, values)
        except OSError as exc:
            log.error("broker config not changed: %s cannot be saved: %s", path, exc)
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"the broker config cannot be saved, nothing changed: "
                                       f"{exc}")
        before = {k: getattr(self.config, k, getattr(self.store_config, k, None))
                  for k in values}
        apply_settings(self.config, self.store_config, values)
        log.info("broker config changed by %s:%s: %s", *conn.peer[:2], ", ".join(
            f"{k}={v}" for k, v in sorted(values.items())))
        self._take_up(values, before)
        return cmd.response()

    def _take_up(self, values: dict[str, Any], before: dict[str, Any]) -> None:
        """Make the changes that are not read on each use take effect."""
        if "maxMessageSize" in values or "syncFlushTimeout" in values:
            self.store.reload_config()
        # Restart the wait with the new period; register with the new NameServers at once.
        reregister = "registerNameServerPeriod" in values or "namesrvAddr" in values
        topics = self.topics
        if "autoCreateTopicEnable" in values and values["autoCreateTopicEnable"] != before[
                "autoCreateTopicEnable"]:
            # As at start: TBW102 exists while auto-creation is on, so clients find its route.
            try:
                if values["autoCreateTopicEnable"]:
                    if topics.get(AUTO_CREATE_TOPIC_KEY) is None:
                        topics.update(topics.auto_create_topic())
                else:
                    topics.delete(AUTO_CREATE_TOPIC_KEY)
                reregister = True
            except OSError as exc:
                log.error("TBW102 not changed (the broker will at its next start): %s", exc)
        if "brokerPermission" in values and values["brokerPermission"] != before[
                "brokerPermission"]:
            # The registration applies the broker's permission to its topics; a new
            # DataVersion makes the NameServers read them again (AdminBrokerProcessor does
            # the same).
            topics.next_version()
            reregister = True
        if reregister:
            self.topics_changed()
