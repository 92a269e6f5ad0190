"""Retention and a full disk (RocketMQ's CleanCommitLogService, CleanConsumeQueueService and
the DISK_FULL bit of its runningFlags).

Four keys decide, each a percentage of the disk in use, measured for the CommitLog, the
ConsumeQueue and the index directories (the fullest counts):

- over ``diskMaxUsedSpaceRatio`` (75) expired CommitLog files go at once, not only at
  ``deleteWhen`` o'clock;
- over ``diskSpaceCleanForciblyRatio`` (85) the oldest files go even unexpired, but only
  while ``cleanFileForciblyEnable`` is true;
- over ``diskSpaceWarningLevelRatio`` (90) the store marks itself full and refuses puts
  until usage is back at ``diskSpaceCleanForciblyRatio`` or under (RocketMQ clears the bit
  there too, so that the store does not flap around the warning level).

ConsumeQueue and index files that only point below the new CommitLog minimum follow the
CommitLog files. A file deleted before every consumer group read it is logged once, naming
the groups and queues that lose messages, and counted in :class:`StoreCounters`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .commitlog import CommitLog
from .config import MessageStoreConfig
from .consumequeue import ConsumeQueue, ConsumeQueueTable
from .index import Index
from .mapped_file import MappedFile

log = logging.getLogger("rocketq.store")

#: Seconds between two looks at the disks: the put path reads the flag the look sets, so a
#: burst of sends can overshoot the warning level by at most a second's worth of writes.
DISK_CHECK_INTERVAL = 1.0
#: ... and while a disk is over ``diskSpaceCleanForciblyRatio``, close to the warning level,
#: where a second's worth of writes might take the last free blocks, the housekeeper looks
#: every 100 ms and the put path itself every 10 ms.
DISK_CHECK_INTERVAL_NEAR_FULL = 0.1
PUT_CHECK_INTERVAL_NEAR_FULL = 0.01

#: ``(group, topic, queue id, next offset to consume)`` of every committed consumer offset:
#: what the broker's offset table tells the store, which knows no consumer groups.
ConsumerOffsetsView = Callable[[], Iterable[tuple[str, str, int, int]]]

#: At most this many (group, queue) entries are named in the warning of one deleted file.
_NAMED_MAX = 20


@dataclass
class StoreCounters:
    """Totals since the store opened, for the broker's metrics."""

    #: CommitLog files deleted, for any reason.
    commitlog_files_deleted: int = 0
    #: Of those, files holding messages some consumer group had not consumed yet.
    commitlog_files_deleted_unconsumed: int = 0
    #: Messages deleted before a group that committed an offset on their queue read them
    #: (counted once per group that loses them).
    messages_deleted_unconsumed: int = 0
    #: Puts refused because the disk is full.
    puts_refused_disk_full: int = 0


@dataclass(frozen=True)
class DiskSpace:
    """The space of one filesystem, as Java's ``File`` reports it and ``df`` reads it:
    ``statvfs``'s blocks times its fragment size."""

    #: Every block of the filesystem (``File.getTotalSpace``, ``df``'s 1K-blocks).
    total: int
    #: Free blocks, the reserve for root included (``File.getFreeSpace``: ``f_bfree``).
    free: int
    #: Free blocks an ordinary user may take (``File.getUsableSpace``: ``f_bavail``).
    usable: int

    @property
    def used(self) -> int:
        """Bytes in use: ``df``'s Used, and what RocketMQ's ``rocketmq_storage_size`` and
        its ``getDiskPartitionSpaceUsedPercent`` count as used."""
        return self.total - self.free

    @property
    def used_percent(self) -> int:
        """Percent used, as RocketMQ 5's ``UtilAll.getDiskPartitionSpaceUsedPercent`` and
        ``df``'s Use% compute it: used over used plus usable, rounded up to a whole percent.
        The blocks reserved for root are neither used nor usable, so they count for nothing:
        a filesystem with 5 % reserved is 100 % used when an ordinary user can write no
        more, not 95 %."""
        entire = self.used + self.usable
        if entire <= 0:
            return 0
        return -(-self.used * 100 // entire)


def disk_space(path: str) -> DiskSpace:
    """:class:`DiskSpace` of the filesystem holding ``path`` (raises ``OSError`` when
    ``path`` cannot be looked at)."""
    st = os.statvfs(path)
    return DiskSpace(st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize,
                     st.f_bavail * st.f_frsize)


def disk_used_ratio(path: str) -> float:
    """Percentage of the disk holding ``path`` in use (of a parent, while ``path`` does not
    exist yet), measured as RocketMQ 5 and ``df`` do (:attr:`DiskSpace.used_percent`): the
    blocks reserved for root are not counted as used. (Counting them, as ``(total -
    available) / total`` does, put a disk with 5 % reserved and 41 % really used at 90 % on
    a large partition, and the broker refused sends there.)"""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return float(disk_space(path).used_percent)


class DiskWatch:
    """The store's view of its disks: the usage of each directory it writes, and the remark
    puts are refused with while it is full (RocketMQ's DISK_FULL running flag)."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        #: The last usage measured, percent, by directory kind.
        self.ratios: dict[str, float] = {}
        #: Why puts are refused (the disk is full, and which directory), or None.
        self.full: str | None = None

    def paths(self) -> dict[str, str]:
        """The directories the store writes, by kind."""
        cfg = self.config
        return {"CommitLog": cfg.storePathCommitLog,
                "ConsumeQueue": cfg.store_path_consume_queue,
                "index": cfg.store_path_index}

    def measure(self) -> dict[str, float]:
        """Measure the usage of every directory now; a directory that cannot be measured
        keeps its last value (and is logged)."""
        ratios = {}
        for kind, path in self.paths().items():
            try:
                ratios[kind] = disk_used_ratio(path)
            except OSError as exc:
                log.warning("cannot measure the disk of %s: %s", path, exc)
                ratios[kind] = self.ratios.get(kind, 0.0)
        self.ratios = ratios
        return ratios

    def fullest(self) -> tuple[str, str, float]:
        """``(kind, directory, percent used)`` of the fullest directory, last measured."""
        kind = max(self.ratios, key=self.ratios.__getitem__)
        return kind, self.paths()[kind], self.ratios[kind]

    def check(self) -> str | None:
        """Measure, and set or clear :attr:`full`: set over ``diskSpaceWarningLevelRatio``,
        cleared at ``diskSpaceCleanForciblyRatio`` or under. Returns :attr:`full`."""
        cfg = self.config
        self.measure()
        kind, path, ratio = self.fullest()
        if ratio > cfg.diskSpaceWarningLevelRatio:
            remark = (f"the broker's disk is full: the {kind} directory {path} is "
                      f"{ratio:.0f}% used, over diskSpaceWarningLevelRatio="
                      f"{cfg.diskSpaceWarningLevelRatio}; sends are refused until it is "
                      f"{cfg.diskSpaceCleanForciblyRatio}% used or less")
            if self.full is None:
                log.error("%s (reads and consumption go on)", remark)
            self.full = remark
        elif self.full is not None and ratio <= cfg.diskSpaceCleanForciblyRatio:
            log.warning("disk space OK again: the %s directory %s is %.0f%% used; sends are "
                        "taken again", kind, path, ratio)
            self.full = None
        return self.full

    def over(self, percent: float) -> bool:
        """Whether any directory was over ``percent`` used at the last measure."""
        return any(r > percent for r in self.ratios.values())


def clean_expired_files(config: MessageStoreConfig, commitlog: CommitLog,
                        queues: ConsumeQueueTable, index: Index, *, now: float,
                        manual: bool = False, disk: DiskWatch | None = None,
                        consumer_offsets: ConsumerOffsetsView | None = None,
                        counters: StoreCounters | None = None) -> int:
    """Delete CommitLog files past ``fileReservedTime`` when it is ``deleteWhen`` o'clock,
    a disk is over ``diskMaxUsedSpaceRatio``, or ``manual``; over
    ``diskSpaceCleanForciblyRatio``, and only if ``cleanFileForciblyEnable``, the oldest
    files go too even if not expired, one at a time until usage is back at the ratio. At
    most ``deleteFileBatchMax`` files go per call, and never the file being written.
    ConsumeQueue and index files that only point below the new CommitLog minimum go too.

    ``disk`` is measured here (and its full flag updated); ``consumer_offsets`` says which
    groups lose messages when a file goes (logged once per file, counted in ``counters``).
    Returns the number of CommitLog files deleted."""
    disk = disk if disk is not None else DiskWatch(config)
    disk.check()
    hour = time.localtime(now).tm_hour
    due = any(part.strip() and int(part) == hour for part in config.deleteWhen.split(";")
              if part.strip().isdigit())
    space_full = disk.over(config.diskMaxUsedSpaceRatio)
    deleted = 0
    if due or space_full or manual:
        limit = config.deleteFileBatchMax
        offsets = _committed(consumer_offsets)
        for f in commitlog.files.expired_files(config.fileReservedTime * 3600, now, limit):
            why = f"older than fileReservedTime={config.fileReservedTime}h"
            deleted += _delete(f, why, commitlog, queues, offsets, counters)
        while (deleted < limit and config.cleanFileForciblyEnable
               and disk.over(config.diskSpaceCleanForciblyRatio)):
            doomed = commitlog.files.expired_files(0, now, 1, force=True)
            if not doomed:
                break
            kind, path, ratio = disk.fullest()
            why = (f"not expired, deleted because the {kind} directory {path} is {ratio:.0f}% "
                   f"used, over diskSpaceCleanForciblyRatio={config.diskSpaceCleanForciblyRatio}"
                   " with cleanFileForciblyEnable=true")
            deleted += _delete(doomed[0], why, commitlog, queues, offsets, counters)
            disk.measure()
        if deleted:
            kind, path, ratio = disk.fullest()
            log.info("deleted %d CommitLog file(s); min offset now %d; the %s directory %s "
                     "is %.0f%% used", deleted, commitlog.min_offset, kind, path, ratio)
    commitlog.files.retry_closing()
    commitlog_min = commitlog.min_offset
    queues.delete_expired(commitlog_min)
    index.delete_before(commitlog_min)
    if deleted:
        disk.check()  # sends may be taken again at once
    return deleted


def _committed(view: ConsumerOffsetsView | None) -> list[tuple[str, str, int, int]]:
    if view is None:
        return []
    try:
        return list(view())
    except Exception:  # the report is worth less than the deletion it describes
        log.exception("cannot read the consumer offsets to report lost messages")
        return []


def _delete(f: MappedFile, why: str, commitlog: CommitLog, queues: ConsumeQueueTable,
            offsets: list[tuple[str, str, int, int]], counters: StoreCounters | None) -> int:
    """Delete one CommitLog file (the oldest), first logging who loses messages in it."""
    start, end = f.from_offset, f.from_offset + f.file_size
    lost = unconsumed(queues, offsets, start, end)
    name = os.path.basename(f.path)
    if lost:
        total = sum(n for *_, n in lost)
        named = "; ".join(f"group {g} queue {t}:{q} offsets {lo}..{hi - 1} ({hi - lo})"
                          for g, t, q, lo, hi, _n in lost[:_NAMED_MAX])
        more = f"; and {len(lost) - _NAMED_MAX} more" if len(lost) > _NAMED_MAX else ""
        log.warning("deleting CommitLog file %s [%d, %d) before every consumer group read it "
                    "(%s): %d message(s) lost: %s%s", name, start, end, why, total, named, more)
    else:
        log.info("deleting CommitLog file %s [%d, %d) (%s)", name, start, end, why)
    gone = commitlog.files.remove_first([f])
    if counters is not None and gone:
        counters.commitlog_files_deleted += gone
        if lost:
            counters.commitlog_files_deleted_unconsumed += 1
            counters.messages_deleted_unconsumed += sum(n for *_, n in lost)
    return gone


def unconsumed(queues: ConsumeQueueTable, offsets: Iterable[tuple[str, str, int, int]],
               start: int, end: int) -> list[tuple[str, str, int, int, int, int]]:
    """The messages stored in CommitLog ``[start, end)`` that groups have not consumed:
    ``(group, topic, queue id, first, end, count)`` per group and queue with a committed
    offset below the queue's last unit in that range."""
    out = []
    for group, topic, queue_id, committed in offsets:
        cq = queues.get(topic, queue_id)
        if cq is None:
            continue
        hi = first_unit_at(cq, end)
        lo = max(committed, first_unit_at(cq, start))
        if hi > lo:
            out.append((group, topic, queue_id, lo, hi, hi - lo))
    return out


def first_unit_at(cq: ConsumeQueue, commitlog_offset: int) -> int:
    """The queue offset of the first unit pointing at ``commitlog_offset`` or later (units
    are in CommitLog order; the leading holes of a queue started mid-way count as lower)."""
    lo, hi = cq.min_offset, cq.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        unit = cq.unit(mid)
        if unit is not None and unit[1] > 0 and unit[0] >= commitlog_offset:
            hi = mid
        else:
            lo = mid + 1
    return lo
