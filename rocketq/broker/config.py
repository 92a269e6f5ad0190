"""BrokerConfig: the broker's own ``broker.conf`` keys, and the reading of a ``broker.conf``
into it and the store's MessageStoreConfig (one file configures both, ``load_broker_conf``).
What a key rocketq does not read is called at start is in ``unknown_keys.py``; the changes
UPDATE_BROKER_CONFIG makes while the broker runs, in ``config_updates.py``."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ..protocol import Perm
from ..store.config import (
    MessageStoreConfig,
    _convert,
    read_properties,
    with_renamed_keys,
)
from .unheeded_security import refuse_unheeded


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
    #: The gRPC port of RocketMQ 5.x clients (a proxy's MessagingService; 0: none), which
    #: ``rocketq broker`` opens only with ``enableProxy`` (``mqbroker --enable-proxy``).
    grpcServerPort: int = 8081
    enableProxy: bool = False
    #: ``PROM`` serves Prometheus metrics on ``metricsPromExporterHost`` (empty: brokerIP1)
    #: and ``metricsPromExporterPort``; ``DISABLE`` (the default) serves none. RocketMQ's
    #: ``OTLP_GRPC`` and ``LOG`` are refused at start. ``--metrics-port`` wins over these.
    metricsExporterType: str = "DISABLE"
    metricsPromExporterHost: str = ""
    metricsPromExporterPort: int = 5557
    brokerPermission: int = Perm.READ | Perm.WRITE
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
    #: Write each change of a committed consumer offset to the CommitLog (system topic
    #: ``rmq_sys_CONSUMER_OFFSET_LOG``): offsets replicate with the messages, so a slave
    #: promoted by a failover holds every commit (rocketq's; false: copied every few seconds).
    offsetLogEnable: bool = True
    transactionTimeOut: int = 6000  # ms before a half message is checked
    transactionCheckMax: int = 15
    transactionCheckInterval: int = 30_000  # ms
    timerMaxDelaySec: int = 3 * 24 * 3600
    #: A slave serves pulls even while its master is up (RocketMQ's slaveReadEnable).
    slaveReadEnable: bool = False
    #: Controller mode (RocketMQ 5): a controller elects this group's master.
    enableControllerMode: bool = False
    #: ``;``-separated controller addresses.
    controllerAddr: str = ""
    #: ms between heartbeats to the controllers; each renews a master's lease.
    brokerHeartbeatInterval: int = 500
    #: ms of silence after which the controller counts this broker gone (RocketMQ: 10 s;
    #: shorter here, so a failover takes seconds).
    controllerHeartBeatTimeoutMills: int = 3000
    #: ms between GET_REPLICA_INFO polls (a lost role notice is caught by the next).
    syncBrokerMetadataPeriod: int = 1000
    #: ms between a master's checks of which slaves keep up (its SyncStateSet).
    checkSyncStateSetPeriod: int = 1000
    #: Among equally up-to-date candidates, the lowest value is elected.
    brokerElectionPriority: int = 2**31 - 1
    regionId: str = "DefaultRegion"
    traceOn: bool = True
    #: Check every request against the accounts of ``plain_acl.yml`` (RocketMQ's aclEnable).
    aclEnable: bool = False
    #: The accounts file, reloaded when it changes; empty: ``<storePathRootDir>/config/
    #: plain_acl.yml``, where RocketMQ keeps ``conf/plain_acl.yml``.
    aclFile: str = ""
    #: ``{"accessKey": ..., "secretKey": ...}``: what the broker signs its own requests with
    #: (to NameServers, its master, the controllers), RocketMQ 5's key. Empty: the first admin
    #: account of the ACL file.
    innerClientAuthenticationCredentials: str = ""
    #: ``disabled``, ``permissive`` or ``enforcing`` (RocketMQ's ``tls.server.mode``) for the
    #: remoting and HA ports; the certificate is in the ``tls.server.*`` keys (``tls``).
    tlsMode: str = "disabled"
    #: RocketMQ's ``tls.*`` keys as given (``tls.server.certPath``, ``tls.client.*``, ...).
    tls: dict[str, str] = field(default_factory=dict, repr=False)
    #: The file's keys that are not rocketq's, as given: RocketMQ settings rocketq has no use
    #: for, old spellings (``RENAMED_KEYS``, read under their new name too) and typos.
    #: ``unknown_key_warnings`` tells them apart for the report at start.
    unknown: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        kind = self.metricsExporterType.upper()
        if kind not in ("DISABLE", "PROM"):
            supported = " (rocketq exports no OTLP or LOG)" if kind in ("OTLP_GRPC", "LOG") else ""
            raise ValueError(f"metricsExporterType must be DISABLE or PROM{supported}, not "
                             f"{self.metricsExporterType!r}")
        self.metricsExporterType = kind

    @property
    def broker_addr(self) -> str:
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrvAddr.replace(",", ";").split(";") if a.strip()]


def load_broker_conf(values: dict[str, Any] | str | os.PathLike[str] | None = None,
                     **overrides: Any) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Split a ``broker.conf`` (a path or a dict of keys) into broker and store settings.

    Keys neither knows are kept in ``BrokerConfig.unknown`` (``unknown_key_warnings`` says
    what each is); an old spelling of ``RENAMED_KEYS`` is read under its new name as well.
    ``overrides`` (for instance from command-line flags) win over the file. A value of the
    wrong type or out of its choices raises ValueError naming the key (and the file, when
    ``values`` is a path), so that no broker starts on a setting nobody chose.
    """
    if values is None:
        raw: dict[str, Any] = {}
    elif isinstance(values, dict):
        raw = dict(values)
    else:
        try:
            raw = dict(read_properties(values))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{os.fspath(values)}: not UTF-8 text: {exc}") from None
    raw.update({k: v for k, v in overrides.items() if v is not None})
    raw = with_renamed_keys(raw)
    if values is not None and not isinstance(values, dict):
        try:
            return _split_conf(refuse_unheeded(raw))
        except ValueError as exc:
            raise ValueError(f"{os.fspath(values)}: {exc}") from None
    return _split_conf(refuse_unheeded(raw))


def complete_configs(config: BrokerConfig | None, store_config: MessageStoreConfig | None
                     ) -> tuple[BrokerConfig, MessageStoreConfig]:
    """The two settings a Broker is built from, the missing ones filled in: the defaults
    for a missing ``config``; for a missing ``store_config``, the defaults with the broker's
    address (the store writes it into records) and its message size limit."""
    if config is None:
        config, default_store = load_broker_conf({})
        return config, store_config or default_store
    if store_config is None:
        _, store_config = load_broker_conf({
            "brokerIP1": config.brokerIP1, "listenPort": config.listenPort,
            "maxMessageSize": config.maxMessageSize})
    return config, store_config


def _split_conf(raw: dict[str, Any]) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Give each key to the config that has it (both, for the keys both have)."""
    broker_fields = {f.name: f for f in dataclasses.fields(BrokerConfig)
                     if f.name not in ("unknown", "tls")}
    store_fields = {f.name for f in dataclasses.fields(MessageStoreConfig)}
    broker_kwargs: dict[str, Any] = {}
    store_values: dict[str, Any] = {}
    unknown: dict[str, str] = {}
    tls: dict[str, str] = {}
    for key, value in raw.items():
        if key.startswith("tls."):
            tls[key] = str(value)
            continue
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
    broker.tls = tls
    # The store writes the broker's own address into every record (offset message ids).
    store_values.setdefault("brokerIP1", broker.brokerIP1)
    store_values.setdefault("listenPort", broker.listenPort)
    store_values.setdefault("maxMessageSize", broker.maxMessageSize)
    store = MessageStoreConfig.from_dict(store_values)
    return broker, store


def rocketq_keys() -> set[str]:
    """Every ``broker.conf`` key rocketq reads (``tls.*`` aside)."""
    return set(field_types())


def field_types() -> dict[str, str]:
    """Each key rocketq reads with its type's name (the broker's, for a key both configs
    have): what a config change is checked and converted against."""
    types = {f.name: str(f.type) for f in dataclasses.fields(MessageStoreConfig)}
    types.update({f.name: str(f.type) for f in dataclasses.fields(BrokerConfig)})
    types.pop("unknown", None)
    types.pop("tls", None)
    return types
