"""The NameServer's route table (RocketMQ's RouteInfoManager): which brokers are alive, which
clusters they belong to, and which queues each holds for each topic. Memory only; brokers
re-register every 30 s and are dropped after ``heartbeatTimeoutMillis`` (120 s) of silence.

One address per broker name and id. A registration of a name and id that another address
holds is refused while that holder is alive (heard from within its timeout, its connection
open) unless it brings a higher ``dataVersion.stateVersion``: a stray broker started with a
copied config would otherwise take the routes of the real one. Controller mode moves id 0
legitimately: the elected master registers with its master epoch as ``stateVersion`` (as
RocketMQ 5's ReplicasManager does), above the old master's, so a failover goes through even
while the old master, paused or cut off, still looks alive. RocketMQ itself refuses only a
lower ``stateVersion``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

MASTER_ID = 0
DEFAULT_BROKER_TIMEOUT_MS = 120_000


@dataclass
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "topicSysFlag": self.topic_sys_flag}


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # Standard JSON with quoted ids: every client parses it (PROTOCOL.md section 1.7).
        return {"cluster": self.cluster, "brokerName": self.broker_name,
                "brokerAddrs": {str(k): v for k, v in sorted(self.addrs.items())},
                "enableActingMaster": False}


@dataclass
class BrokerLiveInfo:
    last_update: float
    timeout_ms: int
    data_version: dict[str, Any]
    ha_server_addr: str
    connection: Any = None
    cluster: str = ""
    broker_name: str = ""
    broker_id: int = 0


@dataclass
class RegisterResult:
    master_addr: str | None
    ha_server_addr: str | None
    #: Set when the registration was refused: the live address that holds the name and id.
    holder: str | None = None


def state_version(data_version: dict[str, Any]) -> int:
    """A registration's ``dataVersion.stateVersion`` (0 when absent or not a number)."""
    value = data_version.get("stateVersion", 0)
    return value if type(value) is int else 0


def connection_open(connection: Any) -> bool:
    """Whether a broker's connection is still open (True when unknown)."""
    closed = getattr(connection, "closed", None)
    return closed is None or not closed.done()


class RouteTable:
    """Routes as brokers report them. Thread-safe; every method is quick."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLiveInfo] = {}

    # ------------------------------------------------------------------ registration
    def register_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str, topic_configs: dict[str, dict[str, Any]] | None,
                        data_version: dict[str, Any], *, timeout_ms: int | None = None,
                        connection: Any = None, now: float | None = None) -> RegisterResult:
        """Record a broker's registration; re-read its topics only when its DataVersion
        changed (or on first registration), as RocketMQ does."""
        now = time.monotonic() if now is None else now
        with self.lock:
            holder = self.holder_in_the_way(broker_name, broker_addr, broker_id, data_version,
                                            connection, now)
            if holder is not None:
                return RegisterResult(None, None, holder)
            self.clusters.setdefault(cluster, set()).add(broker_name)
            broker = self.brokers.get(broker_name)
            first = broker is None
            if broker is None:
                broker = self.brokers[broker_name] = BrokerData(cluster, broker_name)
            broker.cluster = cluster
            # One address per id: a broker restarted on another port replaces the old entry.
            for bid, addr in list(broker.addrs.items()):
                if addr == broker_addr and bid != broker_id:
                    del broker.addrs[bid]
            old_addr = broker.addrs.get(broker_id)
            if old_addr is not None and old_addr != broker_addr:
                self.live.pop(old_addr, None)
            broker.addrs[broker_id] = broker_addr
            previous = self.live.get(broker_addr)
            changed = first or previous is None or previous.data_version != data_version
            if broker_id == MASTER_ID and topic_configs is not None and changed:
                self._apply_topics(broker_name, topic_configs)
            self.live[broker_addr] = BrokerLiveInfo(
                now, timeout_ms or DEFAULT_BROKER_TIMEOUT_MS, data_version, ha_server_addr,
                connection, cluster, broker_name, broker_id)
            if broker_id == MASTER_ID:
                return RegisterResult(None, None)
            master = broker.addrs.get(MASTER_ID)
            master_live = self.live.get(master) if master else None
            return RegisterResult(master, master_live.ha_server_addr if master_live else None)

    def holder_in_the_way(self, broker_name: str, broker_addr: str, broker_id: int,
                          data_version: dict[str, Any], connection: Any = None,
                          now: float | None = None) -> str | None:
        """The address that keeps ``broker_name``/``broker_id`` against a registration from
        ``broker_addr``, or None when that registration may take it: the holder is another
        address, alive (within its heartbeat timeout, its connection open, not the same
        connection as this registration's), and the newcomer's ``stateVersion`` is not
        above the holder's."""
        now = time.monotonic() if now is None else now
        with self.lock:
            broker = self.brokers.get(broker_name)
            old_addr = broker.addrs.get(broker_id) if broker is not None else None
            if old_addr is None or old_addr == broker_addr:
                return None
            live = self.live.get(old_addr)
            if live is None or (now - live.last_update) * 1000 > live.timeout_ms:
                return None
            if live.connection is not None and (live.connection is connection
                                                or not connection_open(live.connection)):
                return None  # the same broker moving, or a holder that is gone
            if state_version(data_version) > state_version(live.data_version):
                return None  # a newer master epoch: controller-mode failover
            return old_addr

    def _apply_topics(self, broker_name: str, topic_configs: dict[str, dict[str, Any]]) -> None:
        for topic, cfg in topic_configs.items():
            self.topic_queues.setdefault(topic, {})[broker_name] = QueueData(
                broker_name, int(cfg.get("readQueueNums", 0)), int(cfg.get("writeQueueNums", 0)),
                int(cfg.get("perm", 6)), int(cfg.get("topicSysFlag", 0)))
        # Topics this broker no longer has are taken off it.
        for topic in list(self.topic_queues):
            if topic not in topic_configs:
                self._remove_topic_of_broker(topic, broker_name)

    def _remove_topic_of_broker(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queues.get(topic)
        if queues is not None:
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queues[topic]

    def is_changed(self, broker_addr: str, data_version: dict[str, Any]) -> bool:
        with self.lock:
            live = self.live.get(broker_addr)
            return live is None or live.data_version != data_version

    def heartbeat(self, broker_addr: str, now: float | None = None) -> None:
        with self.lock:
            live = self.live.get(broker_addr)
            if live is not None:
                live.last_update = time.monotonic() if now is None else now

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str,
                          broker_id: int) -> None:
        with self.lock:
            self.live.pop(broker_addr, None)
            broker = self.brokers.get(broker_name)
            if broker is not None:
                if broker.addrs.get(broker_id) == broker_addr:
                    del broker.addrs[broker_id]
                if not broker.addrs:
                    del self.brokers[broker_name]
                    names = self.clusters.get(cluster)
                    if names is not None:
                        names.discard(broker_name)
                        if not names:
                            del self.clusters[cluster]
                    for topic in list(self.topic_queues):
                        self._remove_topic_of_broker(topic, broker_name)

    def expire(self, now: float | None = None) -> list[str]:
        """Drop brokers silent for longer than their timeout; return their addresses."""
        now = time.monotonic() if now is None else now
        with self.lock:
            dead = [addr for addr, live in self.live.items()
                    if (now - live.last_update) * 1000 > live.timeout_ms]
            for addr in dead:
                self._drop(addr)
            return dead

    def drop_connection(self, connection: Any) -> list[str]:
        """Drop the brokers registered over a connection that closed."""
        with self.lock:
            dead = [addr for addr, live in self.live.items() if live.connection is connection]
            for addr in dead:
                self._drop(addr)
            return dead

    def _drop(self, addr: str) -> None:
        live = self.live.get(addr)
        if live is not None:
            self.unregister_broker(live.cluster, addr, live.broker_name, live.broker_id)

    # ------------------------------------------------------------------ queries
    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData for ``topic``, or None when no live broker serves it."""
        with self.lock:
            queues = self.topic_queues.get(topic)
            if not queues:
                return None
            broker_datas = [self.brokers[name].to_json() for name in sorted(queues)
                            if name in self.brokers]
            if not broker_datas:
                return None
            return {
                "queueDatas": [queues[name].to_json() for name in sorted(queues)],
                "brokerDatas": broker_datas,
                "filterServerTable": {},
            }

    def cluster_info(self) -> dict[str, Any]:
        with self.lock:
            return {
                "brokerAddrTable": {name: b.to_json() for name, b in self.brokers.items()},
                "clusterAddrTable": {c: sorted(names) for c, names in self.clusters.items()},
            }

    def topics(self) -> list[str]:
        with self.lock:
            return sorted(self.topic_queues)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        with self.lock:
            names = self.clusters.get(cluster, set())
            return sorted(t for t, queues in self.topic_queues.items()
                          if any(n in names for n in queues))

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        with self.lock:
            if cluster:
                for name in self.clusters.get(cluster, set()):
                    self._remove_topic_of_broker(topic, name)
            else:
                self.topic_queues.pop(topic, None)

    def data_version(self, broker_addr: str) -> dict[str, Any] | None:
        with self.lock:
            live = self.live.get(broker_addr)
            return live.data_version if live else None
