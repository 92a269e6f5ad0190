"""Retention (RocketMQ's CleanCommitLogService and CleanConsumeQueueService): CommitLog files
older than ``fileReservedTime`` go at ``deleteWhen`` o'clock, or at once when the disk fills;
ConsumeQueue and index files that only point below the new CommitLog minimum follow."""

from __future__ import annotations

import logging
import shutil
import time

from .commitlog import CommitLog
from .config import MessageStoreConfig
from .consumequeue import ConsumeQueueTable
from .index import Index

log = logging.getLogger("rocketq.store")


def disk_used_ratio(path: str) -> float:
    """Percentage of the disk holding ``path`` in use."""
    usage = shutil.disk_usage(path)
    return 100.0 * (usage.total - usage.free) / usage.total if usage.total else 0.0


def clean_expired_files(config: MessageStoreConfig, commitlog: CommitLog,
                        queues: ConsumeQueueTable, index: Index, *, now: float,
                        manual: bool = False) -> int:
    """Delete CommitLog files past ``fileReservedTime`` when it is ``deleteWhen`` o'clock,
    the disk is over ``diskMaxUsedSpaceRatio``, or ``manual``; over
    ``diskSpaceCleanForciblyRatio`` the oldest files go even if not expired. The file being
    written is never deleted. ConsumeQueue and index files that only point below the new
    CommitLog minimum go too. Returns the number of CommitLog files deleted."""
    hour = time.localtime(now).tm_hour
    due = any(part.strip() and int(part) == hour for part in config.deleteWhen.split(";")
              if part.strip().isdigit())
    ratio = disk_used_ratio(config.storePathCommitLog)
    space_full = ratio > config.diskMaxUsedSpaceRatio
    force = ratio > config.diskSpaceCleanForciblyRatio
    deleted = 0
    if due or space_full or manual:
        doomed = commitlog.files.expired_files(
            config.fileReservedTime * 3600, now, config.deleteFileBatchMax, force=force)
        if doomed:
            deleted = commitlog.files.remove_first(doomed)
            log.info("deleted %d CommitLog file(s) (disk %.0f%% used); min offset now %d",
                     deleted, ratio, commitlog.min_offset)
    commitlog.files.retry_closing()
    commitlog_min = commitlog.min_offset
    queues.delete_expired(commitlog_min)
    index.delete_before(commitlog_min)
    return deleted
