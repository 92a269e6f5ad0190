"""BrokerConfig: the broker's own ``broker.conf`` keys. Store keys live in MessageStoreConfig;
one file configures both (``load_broker_conf``)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ..store.config import MessageStoreConfig, _convert, read_properties

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


def perm_to_string(perm: int) -> str:
    """RocketMQ's rendering of permission bits, e.g. ``RW-``."""
    return (("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")
            + ("X" if perm & PERM_INHERIT else "-"))


@dataclass
class BrokerConfig:
    """Settings of a broker, named as in RocketMQ's ``broker.conf``."""

    brokerClusterName: str = "DefaultCluster"
    brokerName: str = "broker-a"
    brokerId: int = 0
    #: ``;``-separated NameServer addresses.
    namesrvAddr: str = "127.0.0.1:9876"
    brokerIP1: str = "127.0.0.1"
    listenPort: int = 10911
    brokerPermission: int = PERM_READ | PERM_WRITE
    autoCreateTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    defaultTopicQueueNums: int = 8
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    registerNameServerPeriod: int = 30_000  # ms
    registerBrokerTimeoutMills: int = 6000
    longPollingEnable: bool = True
    shortPollingTimeMills: int = 1000
    enablePropertyFilter: bool = False
    maxMessageSize: int = 4 * 1024 * 1024
    channelExpiredTimeout: int = 120_000  # ms without a heartbeat
    flushConsumerOffsetInterval: int = 5000  # ms
    transactionTimeOut: int = 6000  # ms before a half message is checked
    transactionCheckMax: int = 15
    transactionCheckInterval: int = 30_000  # ms
    timerMaxDelaySec: int = 3 * 24 * 3600
    regionId: str = "DefaultRegion"
    traceOn: bool = True
    unknown: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def broker_addr(self) -> str:
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrvAddr.replace(",", ";").split(";") if a.strip()]


def load_broker_conf(values: dict[str, Any] | str | os.PathLike[str] | None = None,
                     **overrides: Any) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Split a ``broker.conf`` (a path or a dict of keys) into broker and store settings.

    Keys neither knows are kept in ``BrokerConfig.unknown``. ``overrides`` (for instance from
    command-line flags) win over the file.
    """
    if values is None:
        raw: dict[str, Any] = {}
    elif isinstance(values, dict):
        raw = dict(values)
    else:
        raw = dict(read_properties(values))
    raw.update({k: v for k, v in overrides.items() if v is not None})
    broker_fields = {f.name: f for f in dataclasses.fields(BrokerConfig) if f.name != "unknown"}
    store_fields = {f.name for f in dataclasses.fields(MessageStoreConfig)}
    broker_kwargs: dict[str, Any] = {}
    store_values: dict[str, Any] = {}
    unknown: dict[str, str] = {}
    for key, value in raw.items():
        known = False
        if key in broker_fields:
            broker_kwargs[key] = _convert(key, broker_fields[key].type, value)
            known = True
        if key in store_fields:
            store_values[key] = value
            known = True
        if not known:
            unknown[key] = str(value)
    broker = BrokerConfig(**broker_kwargs)
    broker.unknown = unknown
    # The store writes the broker's own address into every record (offset message ids).
    store_values.setdefault("brokerIP1", broker.brokerIP1)
    store_values.setdefault("listenPort", broker.listenPort)
    store_values.setdefault("maxMessageSize", broker.maxMessageSize)
    store = MessageStoreConfig.from_dict(store_values)
    return broker, store
