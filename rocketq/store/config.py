"""MessageStoreConfig: the store's settings, under the names RocketMQ's ``broker.conf`` uses.

A RocketMQ user's file means the same here: ``MessageStoreConfig.from_properties(path)`` reads
``key=value`` lines, keeps the keys it knows and reports the others in ``unknown``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
ASYNC_MASTER = "ASYNC_MASTER"
SYNC_MASTER = "SYNC_MASTER"
SLAVE = "SLAVE"

#: Keys RocketMQ renamed, old spelling to new: RocketMQ up to 4.5.1 read ``maped...`` (its
#: MessageStoreConfig misspelt them until the 4.5.2 rename), so older ``broker.conf`` files
#: still carry them. They are read under the new name unless that is given too.
RENAMED_KEYS: dict[str, str] = {
    "mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
    "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue",
}


@dataclass
class MessageStoreConfig:
    """Settings of the message store. Field names are RocketMQ's ``broker.conf`` keys."""

    storePathRootDir: str = field(default_factory=lambda: os.path.join(
        os.path.expanduser("~"), "store"))
    #: Defaults to ``<storePathRootDir>/commitlog`` when empty.
    storePathCommitLog: str = ""
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    #: Units per ConsumeQueue file times 20 bytes.
    mappedFileSizeConsumeQueue: int = 300_000 * 20
    flushDiskType: str = ASYNC_FLUSH
    flushIntervalCommitLog: int = 500  # ms, ASYNC_FLUSH
    flushIntervalConsumeQueue: int = 1000  # ms
    flushCommitLogThoroughInterval: int = 10_000  # ms
    syncFlushTimeout: int = 5000  # ms, SYNC_FLUSH: FLUSH_DISK_TIMEOUT after this
    #: RocketMQ's key (and its spelling): write zeros over the CommitLog's current file ahead
    #: of the appends (``warmMappedFileAheadSize`` bytes) and sync them, so that a SYNC_FLUSH
    #: fdatasync finds its blocks written already and commits no filesystem journal for them.
    #: Unset (None): on with SYNC_FLUSH; off with ASYNC_FLUSH, where it only doubles writes.
    warmMapedFileEnable: bool | None = None
    #: How far ahead of the CommitLog's write position the zeros go (bytes, at least 2 MiB).
    warmMappedFileAheadSize: int = 4 << 20
    #: Append to the CommitLog with ``pwrite`` rather than by copying into its mapping (as
    #: RocketMQ's ``putConsumeQueueDataByFileChannel`` does for ConsumeQueues), appends of
    #: 2 KiB or more (``mapped_file.PWRITE_MIN_SIZE``); readers still read the mapping. An
    #: fdatasync then has no mapped pages to write-protect (SYNC_FLUSH), and no append takes
    #: the page faults of a never-written mapped page with the interpreter lock held (a
    #: broker fed batches spends less CPU per message with either flush type).
    putCommitLogDataByFileChannel: bool = True
    fileReservedTime: int = 72  # hours
    deleteWhen: str = "04"  # hours of the day, ';'-separated
    diskMaxUsedSpaceRatio: int = 75  # percent: above it, expired files go at once
    #: Percent: above it the oldest files go even unexpired, if ``cleanFileForciblyEnable``;
    #: a store refusing puts (below) takes them again once usage is back at it or under.
    diskSpaceCleanForciblyRatio: int = 85
    #: Percent: above it the store marks itself full and refuses puts (RocketMQ 4.9 reads it
    #: from the system property ``rocketmq.broker.diskSpaceWarningLevelRatio``, 5.x from
    #: ``broker.conf``).
    diskSpaceWarningLevelRatio: int = 90
    #: Whether unexpired files may be deleted over ``diskSpaceCleanForciblyRatio``; false
    #: keeps every message until ``fileReservedTime`` and lets sends be refused instead.
    cleanFileForciblyEnable: bool = True
    cleanResourceInterval: int = 10_000  # ms
    deleteFileBatchMax: int = 10
    maxMessageSize: int = 4 * 1024 * 1024
    messageIndexEnable: bool = True
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    maxMsgsNumBatch: int = 64  # per index query
    maxTransferBytesOnMessageInMemory: int = 256 * 1024
    maxTransferCountOnMessageInMemory: int = 32
    #: Delays of levels 1..18 for delayed messages and consumer retries.
    messageDelayLevel: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: Host and port written into STOREHOST of each record (the broker's address).
    brokerIP1: str = "127.0.0.1"
    listenPort: int = 10911
    #: Replication (RocketMQ's HAService): ASYNC_MASTER, SYNC_MASTER or SLAVE.
    brokerRole: str = ASYNC_MASTER
    #: Where a master listens for slaves: -1 (the default) means ``listenPort + 1`` as in
    #: RocketMQ, 0 any free port.
    haListenPort: int = -1
    #: A slave's master (``host:port`` of its HA port); empty: the one the NameServer names.
    haMasterAddress: str = ""
    haTransferBatchSize: int = 32 * 1024
    haSlaveFallbehindMax: int = 256 * 1024 * 1024
    haSendHeartbeatInterval: int = 5000  # ms
    haHousekeepingInterval: int = 20_000  # ms of silence before an HA link is closed
    #: A pull reading further than this share (percent) of physical memory behind the
    #: CommitLog's end is told to read from a slave (when ``slaveReadEnable``), as RocketMQ's.
    accessMessageInMemoryMaxRatio: int = 40
    #: Controller mode: a send is answered once every SyncStateSet member holds it
    #: (else once ``inSyncReplicas`` replicas, the master counted, do).
    allAckInSyncStateSet: bool = False
    inSyncReplicas: int = 1
    #: Controller mode: sends fail while the SyncStateSet has fewer members.
    minInSyncReplicas: int = 1
    #: ms a slave may fail to keep up before it leaves the SyncStateSet.
    haMaxTimeSlaveNotCatchup: int = 15_000
    #: Controller mode (a broker key the store reads too): the store opens fenced as a slave
    #: and recovers its ConsumeQueues only up to the confirm offset its checkpoint keeps.
    enableControllerMode: bool = False
    unknown: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.storePathCommitLog:
            self.storePathCommitLog = os.path.join(self.storePathRootDir, "commitlog")
        if self.flushDiskType not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise ValueError(
                f"flushDiskType must be {ASYNC_FLUSH} or {SYNC_FLUSH}, not {self.flushDiskType!r}")
        if self.mappedFileSizeConsumeQueue % 20:
            # RocketMQ rounds the ConsumeQueue file size to whole units the same way.
            self.mappedFileSizeConsumeQueue -= self.mappedFileSizeConsumeQueue % 20
        if not self.delay_levels_ms:
            raise ValueError("messageDelayLevel is empty")
        if self.brokerRole not in (ASYNC_MASTER, SYNC_MASTER, SLAVE):
            raise ValueError(f"brokerRole must be {ASYNC_MASTER}, {SYNC_MASTER} or {SLAVE}, "
                             f"not {self.brokerRole!r}")
        if self.warmMapedFileEnable is None:
            self.warmMapedFileEnable = self.sync_flush
        if self.warmMappedFileAheadSize < 2 << 20:
            raise ValueError("warmMappedFileAheadSize must be at least 2097152 (2 MiB), not "
                             f"{self.warmMappedFileAheadSize}")
        if self.haListenPort < 0:
            self.haListenPort = self.listenPort + 1 if self.listenPort else 0
        for name in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxMessageSize",
                     "maxHashSlotNum", "maxIndexNum"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    @property
    def is_slave(self) -> bool:
        return self.brokerRole == SLAVE

    @property
    def answers_when_safe(self) -> bool:
        """Whether a send is answered only once on disk (SYNC_FLUSH) or on a slave
        (SYNC_MASTER), rather than as soon as it is appended."""
        return self.sync_flush or self.brokerRole == SYNC_MASTER

    @property
    def delay_levels_ms(self) -> list[int]:
        """``messageDelayLevel`` in milliseconds, level 1 first."""
        units = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out = []
        for token in self.messageDelayLevel.split():
            for suffix in ("ms", "s", "m", "h", "d"):
                if token.endswith(suffix) and token[:-len(suffix)].isdigit():
                    out.append(int(token[:-len(suffix)]) * units[suffix])
                    break
            else:
                raise ValueError(f"messageDelayLevel has a bad entry {token!r} (use 1s, 5m, 2h)")
        return out

    # Paths, derived as RocketMQ derives them.
    @property
    def store_path_consume_queue(self) -> str:
        return os.path.join(self.storePathRootDir, "consumequeue")

    @property
    def store_path_index(self) -> str:
        return os.path.join(self.storePathRootDir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.storePathRootDir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.storePathRootDir, "abort")

    @property
    def sync_flush(self) -> bool:
        return self.flushDiskType == SYNC_FLUSH

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> MessageStoreConfig:
        """Build a config from string or typed values; unknown keys land in ``unknown``.

        An old spelling of ``RENAMED_KEYS`` stays in ``unknown`` (for the start's report) and
        is read under its new name, unless that name is given as well."""
        known = {f.name: f for f in dataclasses.fields(cls) if f.name != "unknown"}
        kwargs: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        values = with_renamed_keys(values)
        for key, value in values.items():
            f = known.get(key)
            if f is None:
                unknown[key] = str(value)
                continue
            kwargs[key] = _convert(key, f.type, value)
        cfg = cls(**kwargs)
        cfg.unknown = unknown
        return cfg

    @classmethod
    def from_properties(cls, path: str | os.PathLike[str],
                        **overrides: Any) -> MessageStoreConfig:
        """Read a RocketMQ-style ``broker.conf`` (``key=value`` lines, ``#`` comments)."""
        values: dict[str, Any] = read_properties(path)
        values.update(overrides)
        return cls.from_dict(values)


def with_renamed_keys(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` plus, for each old spelling of ``RENAMED_KEYS`` given without its new name,
    the value under the new name."""
    out = dict(values)
    for old, new in RENAMED_KEYS.items():
        if old in out and new not in out:
            out[new] = out[old]
    return out


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Parse a Java-style properties file of ``key=value`` (or ``key: value``) lines."""
    values: dict[str, str] = {}
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, _, value = line.partition(sep)
                values[key.strip()] = value.strip()
                break
        else:
            values[line] = ""
    return values


def _convert(key: str, type_name: Any, value: Any) -> Any:
    type_name = str(type_name).removesuffix(" | None")
    if isinstance(value, str):
        if type_name == "int":
            try:
                return int(value.strip())
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {value!r}") from None
        if type_name == "bool":
            lowered = value.strip().lower()
            if lowered in ("true", "1", "yes"):
                return True
            if lowered in ("false", "0", "no"):
                return False
            raise ValueError(f"{key} must be true or false, got {value!r}")
    return value
