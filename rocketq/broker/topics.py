"""Topic configuration of a broker (RocketMQ's TopicConfigManager), persisted as
``config/topics.json`` with a DataVersion that changes whenever a topic does, so the
NameServer knows when to re-read them."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..protocol.topic import (
    AUTO_CREATE_TOPIC_KEY,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    validate_topic,
)
from .config import PERM_INHERIT, PERM_READ, PERM_WRITE, BrokerConfig


@dataclass
class TopicConfig:
    """One topic on this broker."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
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


class DataVersion:
    """RocketMQ's DataVersion: compared as a whole by the NameServer."""

    def __init__(self, counter: int = 0, state_version: int = 0, timestamp: int = 0) -> None:
        self.counter = counter
        self.state_version = state_version
        self.timestamp = timestamp or int(time.time() * 1000)

    def next(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": self.state_version,
                "timestamp": self.timestamp}


class TopicConfigManager:
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
                  TopicConfig(TRANS_OP_HALF_TOPIC, 1, 1),
                  TopicConfig(f"{cfg.brokerClusterName}_REPLY_TOPIC", 1, 1),
                  TopicConfig(TIMER_TOPIC, 1, 1)]
        if cfg.autoCreateTopicEnable:
            wanted.append(TopicConfig(AUTO_CREATE_TOPIC_KEY, cfg.defaultTopicQueueNums,
                                      cfg.defaultTopicQueueNums,
                                      PERM_INHERIT | PERM_READ | PERM_WRITE))
        base = PERM_INHERIT
        wanted.append(TopicConfig(cfg.brokerClusterName, 16, 16, base | (
            PERM_READ | PERM_WRITE if cfg.clusterTopicEnable else 0)))
        wanted.append(TopicConfig(cfg.brokerName, 1, 1, base | (
            PERM_READ | PERM_WRITE if cfg.brokerTopicEnable else 0)))
        changed = False
        with self.lock:
            for topic in wanted:
                if topic.topic_name not in self.topics:
                    self.topics[topic.topic_name] = topic
                    changed = True
            if not cfg.autoCreateTopicEnable and AUTO_CREATE_TOPIC_KEY in self.topics:
                del self.topics[AUTO_CREATE_TOPIC_KEY]
                changed = True
            if changed:
                self.data_version.next()
                self.persist()

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def persist(self) -> None:
        with self.lock:
            data = orjson.dumps({
                "topicConfigTable": {n: t.to_json() for n, t in sorted(self.topics.items())},
                "dataVersion": self.data_version.to_json()}, option=orjson.OPT_INDENT_2)
        _atomic_write(self.path, data)

    def update(self, topic: TopicConfig) -> None:
        """Create or change a topic (UPDATE_AND_CREATE_TOPIC)."""
        validate_topic(topic.topic_name)
        with self.lock:
            self.topics[topic.topic_name] = topic
            self.data_version.next()
            self.persist()

    def delete(self, topic: str) -> bool:
        with self.lock:
            if self.topics.pop(topic, None) is None:
                return False
            self.data_version.next()
            self.persist()
            return True

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int
                       ) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` (TBW102) as a send does, if allowed:
        queues = min(requested, default's write queues), perm = default's perm minus INHERIT."""
        with self.lock:
            existing = self.topics.get(topic)
            if existing is not None:
                return existing
            default = self.topics.get(default_topic)
            if default is None or not default.perm & PERM_INHERIT:
                return None
            if default_topic == AUTO_CREATE_TOPIC_KEY and not self.config.autoCreateTopicEnable:
                return None
            queues = max(1, min(queue_nums, default.write_queue_nums))
            created = TopicConfig(topic, queues, queues, default.perm & ~PERM_INHERIT)
            self.topics[topic] = created
            self.data_version.next()
            self.persist()
            return created

    def create_system(self, topic: str, queues: int = 1, perm: int = PERM_READ | PERM_WRITE
                      ) -> TopicConfig:
        """Create a retry or dead-letter topic of a group if it is missing."""
        with self.lock:
            existing = self.topics.get(topic)
            if existing is not None:
                return existing
            created = TopicConfig(topic, queues, queues, perm)
            self.topics[topic] = created
            self.data_version.next()
            self.persist()
            return created

    def register_body(self) -> dict[str, Any]:
        """The ``topicConfigSerializeWrapper`` of a REGISTER_BROKER body."""
        with self.lock:
            return {"topicConfigTable": {n: t.to_json() for n, t in self.topics.items()},
                    "dataVersion": self.data_version.to_json()}


def _atomic_write(path: str, data: bytes) -> None:
    """Write ``path`` so that a crash leaves the old or the new file, never half of one."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
