"""Topic configuration of a broker (RocketMQ's TopicConfigManager), persisted as
``config/topics.json`` with a DataVersion that changes whenever a topic does, so the
NameServer knows when to re-read them."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from ..protocol import (
    AUTO_CREATE_TOPIC_KEY,
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    IllegalTopicError,
    Perm,
    validate_topic,
)
from ..protocol.topic import OFFSET_LOG_TOPIC, SINK_LEDGER_TOPIC
from .config import BrokerConfig
from .files import write_atomically

T = TypeVar("T")


@dataclass
class TopicConfig:
    """One topic on this broker."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = Perm.READ | Perm.WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
                "order": self.order, "attributes": self.attributes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        return cls(data["topicName"], int(data.get("readQueueNums", 16)),
                   int(data.get("writeQueueNums", 16)), int(data.get("perm", 6)),
                   str(data.get("topicFilterType", "SINGLE_TAG")),
                   int(data.get("topicSysFlag", 0)), bool(data.get("order", False)),
                   dict(data.get("attributes") or {}))


#: The most read or write queues a topic may have. RocketMQ 4.9 bounds them only by Java's
#: int; but each queue is a directory of ConsumeQueue files on the broker and a MessageQueue
#: that every client of the topic balances, and a request for 10^9 of them is a mistake, not
#: a plan. rocketq refuses more than this (its own bound, not RocketMQ's).
MAX_QUEUE_NUMS = 65535
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


class TopicConfigError(ValueError):
    """An UPDATE_AND_CREATE_TOPIC request with a field RocketMQ (or rocketq) would refuse;
    the message names the field."""


#: Topic attributes rocketq knows, with the values each takes (RocketMQ 5's TopicAttributes).
TOPIC_ATTRIBUTES = {"message.type": ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")}


def alter_attributes(current: Mapping[str, str], change: str) -> dict[str, str]:
    """RocketMQ 5's ``attributes`` field of UPDATE_AND_CREATE_TOPIC (``-a`` of mqadmin
    updateTopic): ``+key=value`` sets, ``-key`` removes, entries ``,``-separated; applied to
    ``current``. Raises TopicConfigError for an unknown key or value."""
    out = dict(current)
    for entry in (e.strip() for e in change.split(",")):
        if not entry:
            continue
        sign, body = entry[0], entry[1:]
        key, eq, value = body.partition("=")
        key, value = key.strip(), value.strip()
        if sign not in "+-" or not key:
            raise TopicConfigError(f"the field attributes has a bad entry {entry[:60]!r}: "
                                   "write +key=value to set, -key to remove")
        if key not in TOPIC_ATTRIBUTES:
            raise TopicConfigError(f"the field attributes names an unknown attribute {key!r}; "
                                   f"known: {', '.join(sorted(TOPIC_ATTRIBUTES))}")
        if sign == "-":
            out.pop(key, None)
            continue
        allowed = TOPIC_ATTRIBUTES[key]
        if not eq or value.upper() not in allowed:
            raise TopicConfigError(f"the attribute {key} must be one of {', '.join(allowed)}, "
                                   f"not {value[:40]!r}")
        out[key] = value.upper()
    return out


def topic_config_from_request(ext: Mapping[str, str],
                              current: TopicConfig | None = None) -> TopicConfig:
    """The TopicConfig an UPDATE_AND_CREATE_TOPIC request's fields describe, every field
    checked before anything changes: a legal topic name, queue numbers within
    1..MAX_QUEUE_NUMS, perm within 0..7 (RocketMQ's PermName.isValid), topicFilterType
    SINGLE_TAG or MULTI_TAG (TopicFilterType), topicSysFlag a Java int and order a boolean.
    Absent fields take RocketMQ's defaults; ``attributes`` changes those of ``current`` (the
    topic as it is). Raises TopicConfigError naming the field."""
    topic = ext.get("topic") or ""
    try:
        validate_topic(topic)
    except IllegalTopicError as exc:
        raise TopicConfigError(f"the field topic is illegal: {exc}") from None

    def integer(name: str, default: int, low: int, high: int) -> int:
        raw = ext.get(name)
        if raw is None or raw == "":
            return default
        raw = str(raw)
        try:
            value = int(raw)
        except ValueError:
            raise TopicConfigError(f"the field {name} is not an integer: {raw[:40]!r}") from None
        if not low <= value <= high:
            raise TopicConfigError(f"the field {name} must be within {low}..{high}, not "
                                   f"{raw[:40]}")
        return value

    read = integer("readQueueNums", 16, 1, MAX_QUEUE_NUMS)
    write = integer("writeQueueNums", 16, 1, MAX_QUEUE_NUMS)
    perm = integer("perm", Perm.READ | Perm.WRITE, 0, 7)
    sys_flag = integer("topicSysFlag", 0, JAVA_INT_MIN, JAVA_INT_MAX)
    filter_type = str(ext.get("topicFilterType") or "SINGLE_TAG")
    if filter_type not in TOPIC_FILTER_TYPES:
        raise TopicConfigError(f"the field topicFilterType must be SINGLE_TAG or MULTI_TAG, "
                               f"not {filter_type[:40]!r}")
    order_raw = str(ext.get("order") or "false").strip().lower()
    if order_raw not in ("true", "false", "1", "0"):
        raise TopicConfigError(f"the field order must be true or false, not "
                               f"{str(ext.get('order'))[:40]!r}")
    attributes = alter_attributes(current.attributes if current is not None else {},
                                  str(ext.get("attributes") or ""))
    return TopicConfig(topic, read, write, perm, filter_type, sys_flag,
                       order_raw in ("true", "1"), attributes)


class DataVersion:
    """RocketMQ's DataVersion: compared as a whole by the NameServer."""

    def __init__(self, counter: int = 0, state_version: int = 0, timestamp: int = 0) -> None:
        self.counter = counter
        self.state_version = state_version
        self.timestamp = timestamp or int(time.time() * 1000)

    def next(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def following(self) -> DataVersion:
        """The version after this one, leaving this one as it is (so that a change can be
        written to disk before it is made in memory)."""
        return DataVersion(self.counter + 1, self.state_version)

    def assign(self, other: DataVersion) -> None:
        """Become ``other`` (in place: holders of this object see the new version)."""
        self.counter, self.state_version, self.timestamp = (
            other.counter, other.state_version, other.timestamp)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": self.state_version,
                "timestamp": self.timestamp}


class TopicTable:
    """The topics of a broker, with their persistence and auto-creation rules."""

    def __init__(self, config: BrokerConfig, config_dir: str) -> None:
        self.config = config
        self.path = os.path.join(config_dir, "topics.json")
        self.lock = threading.RLock()
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self._load()
        self._system_topics()

    def _load(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as fh:
            data = orjson.loads(fh.read())
        for name, cfg in (data.get("topicConfigTable") or {}).items():
            self.topics[name] = TopicConfig.from_json(cfg)
        version = data.get("dataVersion") or {}
        self.data_version = DataVersion(int(version.get("counter", 0)),
                                        int(version.get("stateVersion", 0)),
                                        int(version.get("timestamp", 0)))

    def _system_topics(self) -> None:
        cfg = self.config
        wanted = [TopicConfig("SELF_TEST_TOPIC", 1, 1), TopicConfig("OFFSET_MOVED_EVENT", 1, 1),
                  TopicConfig(SCHEDULE_TOPIC, 18, 18), TopicConfig(TRANS_HALF_TOPIC, 1, 1),
                  TopicConfig(TRANS_OP_HALF_TOPIC, 1, 1), TopicConfig(SINK_LEDGER_TOPIC, 1, 1),
                  TopicConfig(f"{cfg.brokerClusterName}_REPLY_TOPIC", 1, 1),
                  TopicConfig(TIMER_TOPIC, 1, 1),
                  # Written by the broker alone; no client sends to it or pulls from it.
                  TopicConfig(OFFSET_LOG_TOPIC, 1, 1, perm=0)]
        if cfg.autoCreateTopicEnable:
            wanted.append(self.auto_create_topic())
        base = Perm.INHERIT
        wanted.append(TopicConfig(cfg.brokerClusterName, 16, 16, base | (
            Perm.READ | Perm.WRITE if cfg.clusterTopicEnable else 0)))
        wanted.append(TopicConfig(cfg.brokerName, 1, 1, base | (
            Perm.READ | Perm.WRITE if cfg.brokerTopicEnable else 0)))
        with self.lock:
            changes: dict[str, TopicConfig | None] = {
                t.topic_name: t for t in wanted if t.topic_name not in self.topics}
            if not cfg.autoCreateTopicEnable and AUTO_CREATE_TOPIC_KEY in self.topics:
                changes[AUTO_CREATE_TOPIC_KEY] = None
            if changes:
                self._change(changes)

    def auto_create_topic(self) -> TopicConfig:
        """TBW102 as this broker's settings make it: the topic whose route a client uses to
        send to a topic nobody created, and whose queues and perm such a topic inherits."""
        queues = self.config.defaultTopicQueueNums
        return TopicConfig(AUTO_CREATE_TOPIC_KEY, queues, queues,
                           Perm.INHERIT | Perm.READ | Perm.WRITE)

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def persist(self) -> None:
        with self.lock:
            save_versioned(self.path, "topicConfigTable", self.topics, {},
                           self.data_version, TopicConfig.to_json, next_version=False)

    def _change(self, changes: dict[str, TopicConfig | None]) -> None:
        """Save the table with ``changes`` (a topic's new config, or None to remove it) and
        the next DataVersion, and only then make them in memory: when the write fails (a full
        disk, a config file that cannot be replaced) it raises, and memory and disk both keep
        the old table. Call with the lock held."""
        self.topics = save_versioned(self.path, "topicConfigTable", self.topics, changes,
                                     self.data_version, TopicConfig.to_json)

    def update(self, topic: TopicConfig) -> None:
        """Create or change a topic (UPDATE_AND_CREATE_TOPIC). Raises OSError, leaving the
        table as it was, when the new table cannot be saved."""
        validate_topic(topic.topic_name)
        with self.lock:
            self._change({topic.topic_name: topic})

    def learn(self, topic: str, queue_ids: Iterable[int]) -> TopicConfig | None:
        """A topic this broker's replicated log has queues of but no config for (its master
        created it after the last metadata copy): a config with as many queues, saved when
        it can be, so it is served and routed now. None when it has no queues."""
        ids = list(queue_ids)
        if not ids:
            return None
        count = max(ids) + 1
        config = TopicConfig(topic, count, count)
        try:
            self.update(config)
        except (OSError, ValueError):  # not saved or not a legal name: serve it unsaved
            pass
        return config

    def delete(self, topic: str) -> bool:
        """Remove a topic; False if there is none of that name."""
        with self.lock:
            if topic not in self.topics:
                return False
            self._change({topic: None})
            return True

    def take_all(self, table: dict[str, dict[str, Any]]) -> None:
        """Make this table the master's (a slave's sync): its topics added or changed, the
        ones it lacks removed. Raises OSError, leaving the table as it was, if it cannot be
        saved; ValueError on a config that is not a topic's."""
        theirs = {name: TopicConfig.from_json(cfg) for name, cfg in table.items()}
        with self.lock:
            changes: dict[str, TopicConfig | None] = {
                name: cfg for name, cfg in theirs.items()
                if self.topics.get(name) is None
                or self.topics[name].to_json() != cfg.to_json()}
            changes.update({name: None for name in self.topics if name not in theirs})
            if changes:
                self._change(changes)

    def next_version(self, state_version: int | None = None) -> None:
        """Advance the DataVersion without changing a topic, so that the NameServers re-read
        the table at the next registration (the broker's permission changed, which the
        registration applies to every topic). Only in memory, as RocketMQ does: the table on
        disk is the same, and a restarted broker registers anew anyway.

        ``state_version``: controller mode's master epoch, set on each role change (RocketMQ
        5's ``nextVersion(newMasterEpoch)``): a NameServer hands id 0 over from an old master
        that still looks alive only to a registration with a higher one."""
        with self.lock:
            if state_version is not None:
                self.data_version.state_version = state_version
            self.data_version.next()

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int
                       ) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` (TBW102) as a send does, if allowed:
        queues = min(requested, default's write queues), perm = default's perm minus INHERIT."""
        with self.lock:
            existing = self.topics.get(topic)
            if existing is not None:
                return existing
            default = self.topics.get(default_topic)
            if default is None or not default.perm & Perm.INHERIT:
                return None
            if default_topic == AUTO_CREATE_TOPIC_KEY and not self.config.autoCreateTopicEnable:
                return None
            queues = max(1, min(queue_nums, default.write_queue_nums))
            created = TopicConfig(topic, queues, queues, default.perm & ~Perm.INHERIT)
            self._change({topic: created})
            return created

    def create_system(self, topic: str, queues: int = 1, perm: int = Perm.READ | Perm.WRITE
                      ) -> TopicConfig:
        """Create a retry or dead-letter topic of a group if it is missing."""
        with self.lock:
            existing = self.topics.get(topic)
            if existing is not None:
                return existing
            created = TopicConfig(topic, queues, queues, perm)
            self._change({topic: created})
            return created

    def register_body(self, broker_permission: int | None = None) -> dict[str, Any]:
        """The ``topicConfigSerializeWrapper`` of a REGISTER_BROKER body. A
        ``broker_permission`` that lacks read or write replaces every topic's perm, as
        RocketMQ's registerBrokerAll does, so that clients stop sending to (or pulling from)
        a broker taken out of service."""
        with self.lock:
            table = {n: t.to_json() for n, t in self.topics.items()}
            version = self.data_version.to_json()
        if broker_permission is not None and (
                not broker_permission & Perm.READ or not broker_permission & Perm.WRITE):
            for data in table.values():
                data["perm"] = broker_permission
        return {"topicConfigTable": table, "dataVersion": version}


def save_versioned(path: str, table_key: str, table: Mapping[str, T],
                   changes: Mapping[str, T | None], version: DataVersion,
                   to_json: Callable[[T], Any], next_version: bool = True) -> dict[str, T]:
    """Save a config table as RocketMQ does (``{table_key: {...}, "dataVersion": {...}}``)
    with ``changes`` made (None removes an entry) and the next DataVersion; only once it is on
    disk is ``version`` moved on. Returns the new table for the caller to take; a failed write
    raises and leaves ``table`` and ``version`` as they were."""
    new = dict(table)
    for name, value in changes.items():
        if value is None:
            new.pop(name, None)
        else:
            new[name] = value
    following = version.following() if next_version else version
    write_atomically(path, orjson.dumps({
        table_key: {n: to_json(v) for n, v in sorted(new.items())},
        "dataVersion": following.to_json()}, option=orjson.OPT_INDENT_2))
    if next_version:
        version.assign(following)
    return new
