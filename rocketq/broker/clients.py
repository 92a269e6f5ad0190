"""Producers and consumers known to the broker through their heartbeats (RocketMQ's
ProducerManager and ConsumerManager). When a consumer group's membership changes, every member
is told (NOTIFY_CONSUMER_IDS_CHANGED) so it rebalances at once."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..protocol.filter import Subscription
from ..remoting import Connection

log = logging.getLogger("rocketq.broker")

CONSUME_TYPES = {0: "CONSUME_ACTIVELY", 1: "CONSUME_PASSIVELY", 2: "CONSUME_POP"}
MESSAGE_MODELS = {0: "BROADCASTING", 1: "CLUSTERING"}
CONSUME_FROM = {0: "CONSUME_FROM_LAST_OFFSET",
                1: "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                2: "CONSUME_FROM_MIN_OFFSET", 3: "CONSUME_FROM_MAX_OFFSET",
                4: "CONSUME_FROM_FIRST_OFFSET", 5: "CONSUME_FROM_TIMESTAMP"}


def enum_name(value: Any, names: dict[int, str], default: str) -> str:
    """Java enums arrive by name (Java, Go) or by ordinal (C++)."""
    if isinstance(value, str) and not value.isdigit():
        return value
    try:
        return names.get(int(value), default)
    except (TypeError, ValueError):
        return default


@dataclass
class ClientChannel:
    client_id: str
    connection: Connection
    language: str
    version: int
    last_update: float


@dataclass
class ConsumerGroup:
    name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    channels: dict[str, ClientChannel] = field(default_factory=dict)
    #: Members that consume by POP (SimpleConsumers): listed with the group, but given no
    #: queues by the group's rebalance, and their heartbeats change none of its settings.
    pop_members: set[str] = field(default_factory=set)

    def update_subscriptions(self, subs: dict[str, Subscription]) -> bool:
        """Merge one member's heartbeat into the group's table, as RocketMQ's
        ``ConsumerGroupInfo.updateSubscription`` does: a topic's subscription is replaced only
        by a newer ``subVersion``, and topics the heartbeat no longer names are dropped.

        Members of one group heartbeat with different versions (the Java client takes a new
        one after each rebalance), so keeping the last heartbeat's would refuse the pulls of
        every member whose version is newer (SUBSCRIPTION_NOT_LATEST) until it heartbeats
        again. Returns whether the set of topics changed."""
        changed = False
        table = self.subscriptions
        for topic, sub in subs.items():
            old = table.get(topic)
            if old is None:
                table[topic] = sub
                changed = True
            elif sub.sub_version > old.sub_version:
                table[topic] = sub
        for topic in [t for t in table if t not in subs]:
            del table[topic]
            changed = True
        return changed


def _subscriptions(consumer: dict[str, Any]) -> dict[str, Subscription]:
    """A heartbeat's ConsumerData subscriptions, by topic."""
    subs = {}
    for sub in consumer.get("subscriptionDataSet") or ():
        parsed = Subscription.from_json(sub)
        if parsed.topic:
            subs[parsed.topic] = parsed
    return subs


class ClientTable:
    """Producer and consumer groups, by client id and connection."""

    def __init__(self, notify: Callable[[ConsumerGroup], None],
                 notifies: Callable[[str], bool] = lambda group: True) -> None:
        self.consumers: dict[str, ConsumerGroup] = {}
        self.producers: dict[str, dict[str, ClientChannel]] = {}
        self.notify = notify
        #: Whether a group's members hear of a member that heartbeats in or unregisters (its
        #: notifyConsumerIdsChangedEnable); a closed or expired connection is always told, as
        #: RocketMQ's ConsumerManager does.
        self.notifies = notifies

    def heartbeat(self, conn: Connection, data: dict[str, Any], language: str,
                  version: int) -> list[str]:
        """Apply a HeartbeatData body; return the consumer groups it names."""
        client_id = str(data.get("clientID") or f"{conn.peer[0]}:{conn.peer[1]}")
        conn.attributes["client_id"] = client_id
        now = time.monotonic()
        channel = ClientChannel(client_id, conn, language, version, now)
        for producer in data.get("producerDataSet") or ():
            group = str(producer.get("groupName", ""))
            if group:
                self.producers.setdefault(group, {})[client_id] = channel
        groups = []
        for consumer in data.get("consumerDataSet") or ():
            name = str(consumer.get("groupName", ""))
            if not name:
                continue
            groups.append(name)
            group = self.consumers.get(name)
            if group is None:
                group = self.consumers[name] = ConsumerGroup(name)
            consume_type = enum_name(consumer.get("consumeType"), CONSUME_TYPES,
                                     "CONSUME_PASSIVELY")
            if consume_type == "CONSUME_POP":
                # A POP member carries its subscription in each pop: the push and pull
                # members' subscriptions and settings stay as they are.
                group.pop_members.add(client_id)
                if not group.channels or set(group.channels) <= group.pop_members:
                    group.consume_type = consume_type
                    group.message_model = enum_name(consumer.get("messageModel"),
                                                    MESSAGE_MODELS, "CLUSTERING")
                    group.update_subscriptions(_subscriptions(consumer))
                new_member = client_id not in group.channels
                group.channels[client_id] = channel
                if new_member:
                    log.info("POP consumer %s joined group %s", client_id, name)
                continue
            group.pop_members.discard(client_id)
            group.consume_type = consume_type
            group.message_model = enum_name(consumer.get("messageModel"), MESSAGE_MODELS,
                                            "CLUSTERING")
            group.consume_from_where = enum_name(consumer.get("consumeFromWhere"),
                                                 CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET")
            subs = _subscriptions(consumer)
            if subs or not consumer.get("withoutSub"):
                group.update_subscriptions(subs)
            new_member = client_id not in group.channels
            group.channels[client_id] = channel
            if new_member:
                log.info("consumer %s joined group %s", client_id, name)
                if self.notifies(name):
                    self.notify(group)
        return groups

    def unregister(self, client_id: str, producer_group: str | None,
                   consumer_group: str | None) -> None:
        if producer_group:
            self.producers.get(producer_group, {}).pop(client_id, None)
        if consumer_group:
            group = self.consumers.get(consumer_group)
            if group is not None and group.channels.pop(client_id, None) is not None:
                log.info("consumer %s left group %s", client_id, consumer_group)
                if self.notifies(consumer_group) or not group.channels:
                    self._after_leave(group)

    def connection_closed(self, conn: Connection) -> None:
        for members in self.producers.values():
            for cid in [c for c, ch in members.items() if ch.connection is conn]:
                del members[cid]
        for group in list(self.consumers.values()):
            gone = [c for c, ch in group.channels.items() if ch.connection is conn]
            for cid in gone:
                del group.channels[cid]
                log.info("consumer %s of group %s disconnected", cid, group.name)
            if gone:
                self._after_leave(group)

    def expire(self, timeout_s: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for members in self.producers.values():
            for cid in [c for c, ch in members.items() if now - ch.last_update > timeout_s]:
                del members[cid]
        for group in list(self.consumers.values()):
            gone = [c for c, ch in group.channels.items() if now - ch.last_update > timeout_s]
            for cid in gone:
                ch = group.channels.pop(cid)
                ch.connection.close()
                log.warning("consumer %s of group %s expired (no heartbeat)", cid, group.name)
            if gone:
                self._after_leave(group)

    def _after_leave(self, group: ConsumerGroup) -> None:
        """Tell the members left that one went; a group with no member left is forgotten
        with its subscriptions, as RocketMQ's ConsumerManager forgets it (its offsets and
        subscription group config stay)."""
        group.pop_members &= set(group.channels)
        if group.channels:
            self.notify(group)
        elif self.consumers.get(group.name) is group:
            del self.consumers[group.name]

    def consumer_ids(self, group: str) -> list[str]:
        """The members a group's rebalance shares its queues among: not its POP members."""
        g = self.consumers.get(group)
        return sorted(c for c in g.channels if c not in g.pop_members) if g else []

    def subscription(self, group: str, topic: str) -> Subscription | None:
        g = self.consumers.get(group)
        return g.subscriptions.get(topic) if g else None

    def client_channel(self, client_id: str) -> ClientChannel | None:
        """The live channel of a client, found by its client id (reply routing)."""
        for members in self.producers.values():
            ch = members.get(client_id)
            if ch is not None and ch.connection.is_open:
                return ch
        for group in self.consumers.values():
            ch = group.channels.get(client_id)
            if ch is not None and ch.connection.is_open:
                return ch
        return None

    def producer_channel(self, group: str) -> ClientChannel | None:
        """A live channel of a producer group (for transaction check-backs)."""
        members = self.producers.get(group) or {}
        live = [ch for ch in members.values() if ch.connection.is_open]
        return max(live, key=lambda ch: ch.last_update) if live else None
