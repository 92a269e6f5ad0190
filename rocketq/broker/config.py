"""BrokerConfig: the broker's own ``broker.conf`` keys. Store keys live in MessageStoreConfig;
one file configures both (``load_broker_conf``)."""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protocol import Perm
from ..store.config import (
    RENAMED_KEYS,
    MessageStoreConfig,
    _convert,
    read_properties,
    with_renamed_keys,
)
from .files import write_atomically
from .runtime_keys import RUNTIME_KEYS
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
    return set(_field_types())


def unknown_key_warnings(unknown: Mapping[str, str], source: str = "broker.conf"
                         ) -> list[str]:
    """One line per key of ``BrokerConfig.unknown``, in the file's order, saying what the key
    is: an old spelling read under its new name, a RocketMQ setting rocketq has no use for,
    or a key nobody knows (a typo, most likely), with the nearest known key.

    RocketMQ itself skips keys it does not know without a word, so a misspelt key silently
    leaves its default in force (a 1 GiB CommitLog file on a small disk, say); the broker
    logs these lines at start so that such a file is noticed."""
    ours = rocketq_keys()
    lines = []
    for key in unknown:
        if key in RENAMED_KEYS:
            new = RENAMED_KEYS[key]
            lines.append(f"key {key} in {source} is the old spelling of {new} (RocketMQ 4.5.1 "
                         f"and older); read as {new}, unless {new} is given too: rename it")
        elif key in ROCKETMQ_KEYS:
            lines.append(f"key {key} in {source} is a RocketMQ setting not used by rocketq; "
                         "ignored")
        else:
            near = nearest_key(key, ours | ROCKETMQ_KEYS)
            if near is None:
                lines.append(f"unknown key {key} in {source}, ignored")
            else:
                unused = "" if near in ours else " (a RocketMQ setting not used by rocketq)"
                lines.append(f"unknown key {key} in {source}, ignored: did you mean "
                             f"{near}{unused}?")
    return lines


def nearest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key most like ``key``, compared without regard to case (``listenport``
    finds ``listenPort``), or None when none is close."""
    by_lower = {k.lower(): k for k in known}
    matches = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[matches[0]] if matches else None


# ====================================================================== runtime changes
#: Where the changes made with UPDATE_BROKER_CONFIG are kept, under ``storePathRootDir``. At
#: start they are applied over the ``broker.conf`` values, so a change survives a restart.
OVERRIDES_FILE = os.path.join("config", "broker.properties")


class ConfigUpdateError(ValueError):
    """A broker config change that cannot be made. ``static`` says the keys exist but are
    read only at start (answered NO_PERMISSION, as RocketMQ answers the keys of its
    configBlackList)."""

    def __init__(self, message: str, *, static: bool = False) -> None:
        super().__init__(message)
        self.static = static


def _field_types() -> dict[str, str]:
    types = {f.name: str(f.type) for f in dataclasses.fields(MessageStoreConfig)}
    types.update({f.name: str(f.type) for f in dataclasses.fields(BrokerConfig)})
    types.pop("unknown", None)
    types.pop("tls", None)
    return types


def check_settings(values: dict[str, str]) -> dict[str, Any]:
    """Convert and check the ``key=value`` pairs of a config change, all of them before
    anything changes. Returns the typed values; raises ConfigUpdateError naming every key
    that is unknown, or else every key that cannot change while the broker runs, or else
    the first value that does not convert or is out of range."""
    types = _field_types()
    unknown = sorted(k for k in values if k not in types)
    if unknown:
        named = []
        for key in unknown:
            near = nearest_key(key, types)
            named.append(f"{key} (did you mean {near}?)" if near else key)
        raise ConfigUpdateError(f"unknown config key(s): {', '.join(named)}")
    static = sorted(k for k in values if k not in RUNTIME_KEYS)
    if static:
        raise ConfigUpdateError(
            f"config key(s) {', '.join(static)} cannot change while the broker runs; set "
            "them in broker.conf and restart the broker", static=True)
    checked: dict[str, Any] = {}
    for key, raw in values.items():
        try:
            value = _convert(key, types[key], raw.strip())
        except ValueError as exc:
            raise ConfigUpdateError(f"bad value for {key}: {exc}") from None
        bounds = RUNTIME_KEYS[key]
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise ConfigUpdateError(
                f"bad value for {key}: {value} is outside {bounds[0]}..{bounds[1]}")
        if key == "namesrvAddr":
            _check_namesrv_addr(value)
        if key == "deleteWhen":
            hours = [h.strip() for h in value.split(";")]
            if not hours or not all(h.isdigit() and 0 <= int(h) <= 23 for h in hours):
                raise ConfigUpdateError(
                    f"bad value for deleteWhen: {value!r} is not hours of the day (0..23) "
                    "separated by ';'")
        checked[key] = value
    return checked


def _check_namesrv_addr(value: str) -> None:
    """``host:port`` addresses separated by ``;`` (RocketMQ's form; rocketq also takes
    ``,``), at least one."""
    addrs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise ConfigUpdateError("bad value for namesrvAddr: no NameServer address")
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigUpdateError(
                f"bad value for namesrvAddr: {addr!r} is not host:port")


def apply_settings(config: BrokerConfig, store_config: MessageStoreConfig,
                   values: dict[str, Any]) -> None:
    """Set checked values on the live configs (a key both have, such as maxMessageSize, on
    both)."""
    for key, value in values.items():
        if hasattr(config, key):
            setattr(config, key, value)
        if hasattr(store_config, key):
            setattr(store_config, key, value)


def _render(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def overrides_path(store_config: MessageStoreConfig) -> str:
    """``<storePathRootDir>/config/broker.properties``."""
    return os.path.join(store_config.storePathRootDir, OVERRIDES_FILE)


def save_overrides(path: str, values: dict[str, Any]) -> None:
    """Add ``values`` to the saved changes (replacing a key saved before), atomically: a
    failure raises OSError and leaves the file as it was."""

    saved = parse_properties(Path(path).read_text(encoding="utf-8")) \
        if os.path.exists(path) else {}
    saved.update({k: _render(v) for k, v in values.items()})
    text = "".join(f"{k}={v}\n" for k, v in sorted(saved.items()))
    write_atomically(path, ("# Changes made with updateBrokerConfig; applied over broker.conf "
                         "at start.\n" + text).encode())


def load_overrides(config: BrokerConfig, store_config: MessageStoreConfig) -> dict[str, Any]:
    """Apply the saved changes of an earlier run over the ``broker.conf`` values; returns
    them. A file with a key or value that would be refused today raises ValueError naming
    the file, so that the broker does not start with settings nobody chose."""
    path = overrides_path(store_config)
    values: dict[str, Any] = {}
    if os.path.exists(path):
        try:
            values = check_settings(parse_properties(Path(path).read_text(encoding="utf-8")))
        except ConfigUpdateError as exc:
            raise ValueError(f"{path}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                             ) from None
        apply_settings(config, store_config, values)
    # The store reads enableControllerMode too (it recovers only up to the confirm offset):
    # a broker built in code whose BrokerConfig alone says so must not recover as a plain one.
    store_config.enableControllerMode |= config.enableControllerMode
    return values


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Read Java properties text as ``java.util.Properties.load`` does (what RocketMQ's
    MixAll.string2Properties uses for an UPDATE_BROKER_CONFIG body): ``#`` and ``!``
    comments, ``=``, ``:`` or blanks between key and value, backslash escapes and line
    continuations. A later line wins over an earlier one with the same key."""
    values: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # Join continuation lines: an odd number of trailing backslashes continues.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        key, pos = _unescape_until(line, 0, separators=True)
        while pos < len(line) and line[pos] in " \t\f":
            pos += 1
        if pos < len(line) and line[pos] in "=:":
            pos += 1
            while pos < len(line) and line[pos] in " \t\f":
                pos += 1
        value, _ = _unescape_until(line, pos, separators=False)
        values[key] = value
    return values


def _unescape_until(line: str, pos: int, *, separators: bool) -> tuple[str, int]:
    out: list[str] = []
    while pos < len(line):
        ch = line[pos]
        if separators and ch in "=: \t\f":
            break
        if ch == "\\" and pos + 1 < len(line):
            nxt = line[pos + 1]
            if nxt == "u" and pos + 6 <= len(line):
                try:
                    out.append(chr(int(line[pos + 2:pos + 6], 16)))
                    pos += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            pos += 2
            continue
        if ch != "\\":
            out.append(ch)
        pos += 1
    return "".join(out), pos


#: Every key RocketMQ's broker reads from ``broker.conf``: the setters of the classes its
#: BrokerStartup fills from the file (BrokerConfig, BrokerIdentity, NettyServerConfig,
#: NettyClientConfig, MessageStoreConfig, AuthConfig) in RocketMQ 4.9.4 and 5.3.3. A key here
#: that rocketq does not read is reported as unused; any other unknown key as a likely typo.
ROCKETMQ_KEYS: frozenset[str] = frozenset("""
    accessMessageInMemoryHotRatio accessMessageInMemoryMaxRatio accountStatsEnable
    accountStatsPrintZeroValues ackMessageThreadPoolNums ackThreadPoolQueueCapacity
    aclCacheExpiredSecond aclCacheMaxNum aclCacheRefreshSecond aclEnable
    adminBrokerThreadPoolNums adminBrokerThreadPoolQueueCapacity allAckInSyncStateSet
    allowRecallWhenBrokerNotWriteable appendAckAsync appendCkAsync asyncLearner asyncSendEnable
    authConfigPath authenticationEnabled authenticationMetadataProvider authenticationProvider
    authenticationStrategy authenticationWhitelist authorizationEnabled
    authorizationMetadataProvider authorizationProvider authorizationStrategy
    authorizationWhitelist autoCreateSubscriptionGroup autoCreateTopicEnable
    autoDeleteUnusedStats autoMessageVersionOnTopicLen batchDispatchRequestThreadPoolNums
    bindAddress bitMapLengthConsumeQueueExt bottomMostCompressionTypeForConsumeQueueStore
    broadcastOffsetExpireMaxSecond broadcastOffsetExpireSecond brokerClusterName
    brokerConfigPath brokerElectionPriority brokerFastFailureEnable brokerHeartbeatInterval
    brokerIP1 brokerIP2 brokerId brokerName brokerNotActiveTimeoutMillis brokerPermission
    brokerRole brokerTopicEnable cgColdReadThreshold channelExpiredTimeout
    channelNotActiveInterval checkCRCOnRecover checkSyncStateSetPeriod cleanFileForciblyEnable
    cleanOfflineBrokerInterval cleanResourceInterval cleanRocksDBDirtyCQIntervalMin
    cleanSwapedMapInterval clearRetryTopicWhenDeleteTopic clientAsyncSemaphoreValue
    clientCallbackExecutorThreads clientChannelMaxIdleTimeSeconds clientCloseSocketIfTimeout
    clientManageThreadPoolNums clientManagerThreadPoolQueueCapacity clientOnewaySemaphoreValue
    clientPooledByteBufAllocatorEnable clientSocketRcvBufSize clientSocketSndBufSize
    clientWorkerThreads clusterName clusterTopicEnable coldCtrStrategyEnable
    coldDataFlowControlEnable coldDataScanEnable commercialBaseCount commercialBigCount
    commercialEnable commercialSizePerMsg commercialTimerCount commercialTransCount
    commitCommitLogLeastPages commitCommitLogThoroughInterval commitIntervalCommitLog
    commitLogForceSwapMapInterval commitLogSwapMapInterval commitLogSwapMapReserveFileNum
    compactionCqMappedFileSize compactionMappedFileSize compactionScheduleInternal
    compactionThreadNum compatibleWithOldNameSrv compressedRegister configBlackList
    configManagerVersion configName connectTimeoutMillis consumerFallbehindThreshold
    consumerManageThreadPoolNums consumerManagerThreadPoolQueueCapacity
    consumerOffsetUpdateVersionStep controllerAddr controllerHeartBeatTimeoutMills
    correctLogicMinOffsetForceInterval correctLogicMinOffsetSleepInterval dLegerGroup
    dLegerPeers dLegerSelfId dataReadAheadEnable debugLockEnable defaultMessageRequestMode
    defaultPopShareQueueNum defaultQueryMaxNum defaultTopicQueueNums
    delayOffsetUpdateVersionStep deleteCommitLogFilesInterval deleteConsumeQueueFilesInterval
    deleteFileBatchMax deleteWhen destroyMapedFileIntervalForcibly disableCallbackExecutor
    disableConsumeIfConsumerReadSlowly disableNettyWorkerGroup disappearTimeAfterStart
    diskFallRecorded diskMaxUsedSpaceRatio diskSpaceCleanForciblyRatio
    diskSpaceWarningLevelRatio dispatchCqCacheNum dispatchCqThreads dispatchFromSenderThread
    duplicationEnable enableAsyncReput enableAutoInSyncReplicas enableBatchPush
    enableBroadcastOffsetStore enableBuildConsumeQueueConcurrently enableCalcFilterBitMap
    enableCleanExpiredOffset enableCompaction enableConsumeQueueExt enableControllerMode
    enableCreateSysGroup enableDLegerCommitLog enableDetailStat enableFastChannelEventProcess
    enableLmq enableLmqStats enableMixedMessageType enableMultiDispatch
    enableNetWorkFlowControl enableNotifyAfterPopOrderLockRelease
    enableNotifyBeforePopCalculateLag enablePopBatchAck enablePopBufferMerge enablePopLog
    enablePopMessageThreshold enablePropertyFilter enableReconnectForGoAway
    enableRegisterProducer enableRemoteEscape enableRetryTopicV2 enableRocksDBLog
    enableScheduleAsyncDeliver enableScheduleMessageStats enableShutdownGracefully
    enableSingleTopicRegister enableSkipLongAwaitingAck enableSlaveActingMaster
    enableSplitRegistration enabledAppendPropCRC endTransactionPoolQueueCapacity
    endTransactionThreadPoolNums estimateAccumulation expectConsumerNumUseFilter
    fastFailIfNoBufferInStorePool fetchControllerAddrByDnsLookup fetchNameSrvAddrByDnsLookup
    fetchNamesrvAddrByAddressServer fetchNamesrvAddrInterval fileReservedTime
    filterDataCleanTimeSpan filterServerNums filterSupportRetry flushCommitLogLeastPages
    flushCommitLogThoroughInterval flushCommitLogTimed flushConsumeQueueLeastPages
    flushConsumeQueueThoroughInterval flushConsumerOffsetHistoryInterval
    flushConsumerOffsetInterval flushDelayOffsetInterval flushDiskType flushIntervalCommitLog
    flushIntervalConsumeQueue flushLeastPagesWhenWarmMapedFile forceRegister forceVerifyPropCRC
    forwardTimeout globalColdReadThreshold haFlowControlEnable haHousekeepingInterval
    haListenPort haMasterAddress haMaxGapNotInSync haMaxTimeSlaveNotCatchup
    haSendHeartbeatInterval haSlaveFallbehindMax haTransferBatchSize heartbeatThreadPoolNums
    heartbeatThreadPoolQueueCapacity highSpeedMode inBrokerContainer inSyncReplicas
    initAuthenticationUser initPopOffsetByCheckMsgInMem innerClientAuthenticationCredentials
    isolateLogEnable listenPort litePullMessageEnable litePullMessageThreadPoolNums
    litePullThreadPoolQueueCapacity loadBalancePollNameServerInterval
    loadBalanceProcessorThreadPoolNums loadBalanceThreadPoolQueueCapacity lockInStrictMode
    logicQueueForceSwapMapInterval logicQueueSwapMapInterval logicQueueSwapMapReserveFileNum
    logicalDiskSpaceCleanForciblyThreshold longPollingEnable mappedFileSizeCommitLog
    mappedFileSizeConsumeQueue mappedFileSizeConsumeQueueExt mappedFileSizeTimerLog
    mappedFileSwapEnable mapperFileSizeBatchConsumeQueue maxAsyncPutMessageRequests
    maxBatchDeleteFilesNum maxChecksumRange maxConsumeQueueScan maxDelayTime
    maxErrorRateOfBloomFilter maxFilterMessageSize maxHaTransferByteInSecond maxHashSlotNum
    maxIndexNum maxLmqConsumeQueueNum maxMessageSize maxMsgsNumBatch maxOffsetMapSize
    maxPopPollingSize maxReconnectIntervalTimeSeconds maxRecoveryCommitlogFiles
    maxSlaveResendLength maxStatsIdleTimeInMinutes maxTopicLength
    maxTransferBytesOnMessageInDisk maxTransferBytesOnMessageInMemory
    maxTransferCountOnMessageInDisk maxTransferCountOnMessageInMemory memTableFlushIntervalMs
    messageDelayLevel messageIndexEnable messageIndexSafe messageStorePlugIn
    metricGrpcExporterIntervalInMills metricGrpcExporterTimeOutInMills
    metricLoggingExporterIntervalInMills metricsExporterType metricsGrpcExporterHeader
    metricsGrpcExporterTarget metricsInDelta metricsLabel metricsOtelCardinalityLimit
    metricsPromExporterHost metricsPromExporterPort migrateAuthFromV1Enabled minInSyncReplicas
    msgTraceTopicName namesrvAddr notifyConsumerIdsChangedEnable offsetCheckInSlave
    osPageCacheBusyTimeOutMills popCkMaxBufferSize popCkOffsetMaxQueueSize popCkStayBufferTime
    popCkStayBufferTimeOut popConsumerFSServiceInit popConsumerKVServiceEnable
    popConsumerKVServiceInit popConsumerKVServiceLog popFromRetryProbability
    popInflightMessageThreshold popLongPollingForceNotifyInterval popPollingMapSize
    popPollingSize popResponseReturnActualRetryTopic popReviveMaxAttemptTimes
    popReviveMaxReturnSizePerRead preferredLeaderId printChannelGroups printChannelGroupsMinNum
    processReplyMessageThreadPoolNums pullBatchMaxMessageCount pullMessageThreadPoolNums
    pullThreadPoolQueueCapacity putConsumeQueueDataByFileChannel putMessageFutureThreadPoolNums
    putMessageTimeout putMsgIndexHightWater putThreadPoolQueueCapacity
    queryMessageThreadPoolNums queryThreadPoolQueueCapacity readOnlyCommitLogStorePaths
    readUnCommitted realTimeNotifyConsumerChange realTimePersistRocksDBConfig
    recallMessageEnable recheckReputOffsetFromCq recoverConcurrently recoverThreadPoolNums
    redeleteHangedFileInterval regionId registerBrokerTimeoutMills registerNameServerPeriod
    rejectPullConsumerEnable rejectTransactionMessage replicasPerDiskPartition
    replyThreadPoolQueueCapacity retrieveMessageFromPopRetryTopicV1 reviveAckWaitMs
    reviveInterval reviveMaxSlow reviveQueueNum reviveScanTime rocketmqHome
    rocksdbCQDoubleWriteEnable rocksdbCompressionType rocksdbFlushWalFrequency
    rocksdbWalFileRollingThreshold sampleCountThreshold sampleSteps scanAvailableNameSrv
    scheduleAsyncDeliverMaxPendingLimit scheduleAsyncDeliverMaxResendNum2Blocked
    searchBcqByCacheEnable sendHeartbeatTimeoutMillis sendMessageThreadPoolNums
    sendThreadPoolQueueCapacity serverAsyncSemaphoreValue serverCallbackExecutorThreads
    serverChannelMaxIdleTimeSeconds serverLoadBalancerEnable serverNettyWorkerGroupEnable
    serverOnewaySemaphoreValue serverPooledByteBufAllocatorEnable serverSelectorThreads
    serverSocketBacklog serverSocketRcvBufSize serverSocketSndBufSize serverWorkerThreads
    shortPollingTimeMills shutdownWaitTimeSeconds skipPreOnline skipWhenCKRePutReachMaxTimes
    slaveReadEnable slaveTimeout socksProxyConfig spinLockCollisionRetreatOptimalDegree
    splitRegistrationSize startAcceptSendRequestTimeStamp statRocksDBCQIntervalSec
    statefulAuthenticationCacheExpiredSecond statefulAuthenticationCacheMaxNum
    statefulAuthorizationCacheExpiredSecond statefulAuthorizationCacheMaxNum
    storePathBrokerIdentity storePathCommitLog storePathDLedgerCommitLog storePathEpochFile
    storePathRootDir storeReplyMessageEnable storeType subscriptionExpiredTimeout
    syncBrokerMemberGroupPeriod syncBrokerMetadataPeriod syncControllerMetadataPeriod
    syncFlushTimeout syncFromLastFile syncMasterFlushOffsetWhenStartup
    timerColdDataCheckIntervalMs timerCongestNumEachSlot timerEnableCheckMetrics
    timerEnableRetryUntilSuccess timerFlushIntervalMs timerGetMessageThreadNum
    timerInterceptDelayLevel timerMaxDelaySec timerMetricSmallThreshold timerPrecisionMs
    timerProgressLogIntervalMs timerPutMessageThreadNum timerRollWindowSlot
    timerSkipUnknownError timerStopEnqueue timerWheelEnable topicQueueLockNum totalReplicas
    traceOn traceTopicEnable transactionCheckInterval transactionCheckMax
    transactionMetricFlushInterval transactionOpBatchInterval transactionOpMsgMaxSize
    transactionTimeOut transferMsgByHeap transientStorePoolEnable transientStorePoolSize
    travelCqFileNumWhenGetMessage updateNameServerAddrPeriod useABSLock useEpollNativeSelector
    usePIDColdCtrStrategy useReentrantLockWhenPutMessage useServerSideResetOffset
    useStaticSubscription useTLS userCacheExpiredSecond userCacheMaxNum userCacheRefreshSecond
    validateSystemTopicWhenUpdateTopic waitTimeMillsInAckQueue waitTimeMillsInAdminBrokerQueue
    waitTimeMillsInHeartbeatQueue waitTimeMillsInLitePullQueue waitTimeMillsInPullQueue
    waitTimeMillsInSendQueue waitTimeMillsInTransactionQueue wakeCommitWhenPutMessage
    wakeFlushWhenPutMessage warmMapedFileEnable writeBufferHighWaterMark
    writeBufferLowWaterMark
""".split())
