"""Recovery at start (RocketMQ's ``recoverNormally`` and ``recoverAbnormally``).

The CommitLog is the truth; ConsumeQueues and the index are rebuilt from it. After a clean
shutdown the checkpoint says exactly where the log ends. After a crash (the ``abort`` marker
is still there), everything before the checkpointed flushed and dispatched offsets is sound:
the records after it are read and checked one by one (``protocol.message.walk_records``,
body CRC included) and the log is cut at the first that is not whole. So the cost is the
records written since the last checkpoint (about a second of traffic), not the size of the
files: the cut itself reads only the parts of the file that hold data.

A controller-mode store (``enableControllerMode``) recovers its ConsumeQueues only up to the
confirm offset its checkpoint keeps (:func:`confirmed_bound`), as RocketMQ 5 recovers up to
its confirmPhyOffset: what lies past it, a failover may take back, so no reader sees it
until the broker hears a live confirmOffset (units past it left by a crash are cut).
"""

from __future__ import annotations

import logging
import os

from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .config import MessageStoreConfig
from .consumequeue import ConsumeQueueTable
from .dispatch import Dispatcher
from .index import Index

log = logging.getLogger("rocketq.store")


def confirmed_bound(cp: Checkpoint) -> int:
    """How far a controller-mode store dispatches before its broker hears a live
    confirmOffset: the checkpoint's confirm offset, and never less than its dispatched
    offset (such a store dispatches no further than the confirm offset, so what it had
    dispatched was confirmed; a page from before the field existed reads 0). 0 without a
    checkpoint."""
    return max(cp.confirm_offset, cp.dispatched_offset) if cp.existed else 0


def recover(config: MessageStoreConfig, commitlog: CommitLog, queues: ConsumeQueueTable,
            index: Index, dispatcher: Dispatcher, *, hold_at_confirm: bool = False
            ) -> tuple[Checkpoint, bool]:
    """Load every file, find where the CommitLog ends, bring the ConsumeQueues and index up
    to it (with ``hold_at_confirm``, up to :func:`confirmed_bound` only), and set the
    CommitLog's queue counters. Returns the open checkpoint and whether the store had
    crashed."""
    abnormal = os.path.exists(config.abort_path)
    cp = Checkpoint(config.checkpoint_path)
    commitlog.files.load()
    queues.load()
    index.load()
    files = commitlog.files.files
    index_from = index.end_phy_offset
    crashed = False
    start = commitlog.min_offset  # a record starts here (the crash scan's start below)
    if not files:
        dispatcher.reput_offset = 0
        queues.truncate_to_commitlog(0)
    elif (not abnormal and cp.existed and files[-1].from_offset <= cp.clean_end_offset
          <= files[-1].from_offset + files[-1].file_size):
        # Clean shutdown: the checkpoint says exactly where the log ends.
        last = files[-1]
        last.wrote_position = last.flushed_position = cp.clean_end_offset - last.from_offset
        queues.truncate_to_commitlog(cp.clean_end_offset)
        dispatcher.reput_offset = max(commitlog.min_offset,
                                      min(cp.dispatched_offset, cp.clean_end_offset))
    else:
        crashed = True
        start = min(cp.flushed_offset, cp.dispatched_offset) if cp.existed else 0
        if not commitlog.min_offset <= start <= commitlog.files.max_offset:
            start = commitlog.min_offset
        if index_from >= start:
            # The newest indexed record may have only some of its keys indexed: the process
            # died between them (rolling over to the next index file, or once the header
            # counted part of them). Its entries go, wherever they are, and the scan below
            # indexes it whole; the records before it were indexed whole.
            index.truncate(index_from)
            index_from = index.end_phy_offset
        scan_file = commitlog.files.find(start) or files[-1]
        for f in files:
            if f.from_offset < scan_file.from_offset:
                f.wrote_position = f.flushed_position = f.file_size
        # One pass: each record is checked (lengths, body CRC) and dispatched; the first
        # that is not sound is where the log ends. Units for the records before it are
        # written again where missing or different (a run of units the crash cut while it
        # was copied may miss any of them, not only its last); the index is written only
        # past what it already covers.
        dispatcher.reput_offset = start
        limit = commitlog.files.max_offset
        dispatcher.rewrite_units = True  # the last run copied may be torn anywhere
        try:
            while dispatcher.reput_offset < limit and dispatcher.bad_record_at is None:
                count, _ = dispatcher.run(limit, index_from=index_from, validate=True)
                if not count:
                    break
        finally:
            dispatcher.rewrite_units = False
        end = dispatcher.bad_record_at
        if end is None:
            end = dispatcher.reput_offset
        commitlog.files.truncate(end)
        dispatcher.reput_offset = end
        log.warning("recovered after a crash: scanned CommitLog from %d, end at %d", start, end)
        queues.truncate_to_commitlog(end)
    # Dispatch what the ConsumeQueues and index may lack (idempotent per unit).
    end = commitlog.max_offset
    if hold_at_confirm:
        end = _hold_at(confirmed_bound(cp), end, start, commitlog, queues, index, dispatcher)
        index_from = max(index_from, dispatcher.indexed_to)
    while dispatcher.reput_offset < end:
        count, _ = dispatcher.run(end, index_from=index_from)
        if not count:
            break
    if end < commitlog.max_offset:
        # Held at the confirm offset: index entries of the records past where dispatch
        # stopped go too (a crash scan writes them, and so may the run before a crash), so
        # that a query by key does not find a record never confirmed. They are indexed
        # again when dispatch reaches them.
        index.truncate(dispatcher.reput_offset)
        dispatcher.indexed_to = min(dispatcher.indexed_to, dispatcher.reput_offset - 1)
    with commitlog.lock:
        commitlog.queue_offsets = queues.max_offsets()
    queues.correct_min_offsets(commitlog.min_offset)
    return cp, crashed


def _hold_at(bound: int, end: int, start: int, commitlog: CommitLog, queues: ConsumeQueueTable,
             index: Index, dispatcher: Dispatcher) -> int:
    """Controller mode: cut the ConsumeQueue units that point past ``bound`` (a crash scan
    builds them, and so may the run before a crash; :func:`recover` then cuts the index
    entries) and move dispatch back to a record start at or before it (``start``, where the
    crash scan began, or the log's start). Returns where recovery's dispatch stops."""
    if bound >= end:
        return end
    queues.truncate_to_commitlog(bound)
    if dispatcher.reput_offset > bound:
        # Dispatch from there again up to the bound: units are written where missing, and
        # index entries not twice (here, or later up to the end).
        dispatcher.indexed_to = max(dispatcher.indexed_to, index.end_phy_offset)
        dispatcher.reput_offset = start if start <= bound else commitlog.min_offset
    log.info("controller mode: ConsumeQueues recovered up to the confirm offset %d, not to "
             "the CommitLog end %d", bound, end)
    return bound
