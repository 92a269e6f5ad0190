"""The dispatcher (RocketMQ's CommitLogDispatcher): turns new CommitLog records into
ConsumeQueue units and index entries. When it runs (on its thread, or inline on the appending
one) and who is told which queues grew is :mod:`.dispatch_runner`'s.

It reads the records' own bytes, so the CommitLog alone is the source of truth and recovery
rebuilds the rest with the same code. Per record it unpacks only the fields it needs; units
bound for the same queue are written as one contiguous run, and index keys are hashed in bulk.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Sequence

from ..protocol import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    MessageFormatError,
    Property,
    SysFlag,
    walk_records,
)
from ..protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_HEADER,
    RECORD_OVERHEAD,
    SIZE_AND_MAGIC,
    java_hash,
    property_value,
    record_struct,
)
from . import records
from .commitlog import CommitLog
from .consumequeue import ConsumeQueue
from .errors import is_disk_full
from .index import Index

#: The fixed fields dispatch reads (the walker's own four come with them).
_HEADER = record_struct("queue_id", "queue_offset", "store_timestamp")
assert _HEADER.names == ("total_size", "magic", "queue_id", "queue_offset", "sysflag",
                         "store_timestamp", "body_length")
_PICK_FROM_FULL = operator.itemgetter(*(RECORD_HEADER.index(name) for name in _HEADER.names))
log = logging.getLogger("rocketq.store")

_MAGICS = (MAGIC_V1, MAGIC_V2)
_TAGS = b"TAGS"
_HAS_TAGS = b"TAGS\x01"
_DELAY = b"DELAY"
_SCHEDULE_TOPIC = SCHEDULE_TOPIC.encode()
_TIMER_TOPIC = TIMER_TOPIC.encode()
_TIMER_OUT = Property.TIMER_OUT_MS.encode()
_KEYS = b"KEYS"
_HAS_KEYS = b"KEYS\x01"
_UNIQ = b"UNIQ_KEY"
_HAS_UNIQ = b"UNIQ_KEY\x01"
_HIDDEN = (SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK)


_PLAIN, _SCHEDULED, _TIMED = 0, 1, 2


def _topic_info(raw_topic: bytes) -> tuple[str, bytes, int]:
    kind = (_SCHEDULED if raw_topic == _SCHEDULE_TOPIC else
            _TIMED if raw_topic == _TIMER_TOPIC else _PLAIN)
    return raw_topic.decode(), raw_topic + b"#", kind


class Dispatcher:
    """Builds ConsumeQueue units and index entries from CommitLog records."""

    def __init__(self, commitlog: CommitLog, index: Index | None,
                 get_queue: Callable[[str, int], ConsumeQueue],
                 delay_levels_ms: list[int] | None = None) -> None:
        self.commitlog = commitlog
        self.delay_levels_ms = delay_levels_ms or [1000]
        self.index = index
        self.get_queue = get_queue
        self.reput_offset = 0
        #: Where a validating run met bytes that are not a sound record (None: it did not).
        self.bad_record_at: int | None = None
        #: Records at or before this CommitLog offset are indexed already: a run writes no
        #: index entry for them again (recovery sets it when it moves dispatch back behind
        #: what it indexed, to hold at controller mode's confirm offset).
        self.indexed_to = -1
        #: Units already in the ConsumeQueues are written again where they differ (recovery
        #: after a crash: the run being copied when the process died may be torn anywhere).
        self.rewrite_units = False
        #: Per topic (as stored): its name, its index key prefix and its kind.
        self._topics: dict[bytes, tuple[str, bytes, int]] = {}
        #: Per topic (as stored): its name (the compiled scan's runs).
        self.topic_names: dict[bytes, str] = {}
        #: The compiled scan when installed (None: this class's own loop does every record).
        self.compiled = (records.CompiledDispatch(records.impl) if records.COMPILED
                         else None)
        self._tag_codes: dict[bytes, int] = {}
        #: Told when index entries could not be written for want of room (they are skipped:
        #: the messages stay consumable, only a query by key misses them).
        self.on_index_failure: Callable[[OSError], None] | None = None
        self._index_errors = RateLimited()

    def _tag_code(self, tags: bytes) -> int:
        code = self._tag_codes.get(tags)
        if code is None:
            code = java_hash(tags.decode("utf-8", "replace"))
            if len(self._tag_codes) < 65536:
                self._tag_codes[tags] = code
        return code

    def _deliver_at(self, props: bytes, store_ts: int) -> int:
        raw = property_value(props, _DELAY) if props else None
        levels = self.delay_levels_ms
        try:
            level = min(max(int(raw or b"0"), 1), len(levels))
        except ValueError:
            return store_ts + 1000
        return store_ts + levels[level - 1]

    def run(self, end: int, index_from: int = -1, limit: int = 8192, *,
            validate: bool = False) -> tuple[int, dict[tuple[str, int], int]]:
        """Dispatch records from ``reput_offset`` up to ``end`` (at most ``limit``).

        Index entries are written only for records after ``index_from`` (recovery passes the
        offset the index already covers). Returns the number of records and, per queue that
        grew, its new max offset. Bytes that are not a record raise ValueError, unless
        ``validate``: then body CRCs are checked too and dispatch stops at the first record
        that is not sound, leaving its offset in ``bad_record_at`` (recovery after a crash
        finds the torn tail and rebuilds the queues in one pass).

        The compiled scan (``records``) does the work when installed; this class's loop,
        :meth:`run_python`, is the reference and takes the records the scan leaves to it.
        """
        if self.compiled is not None:
            return self.compiled.run(self, end, index_from, limit, validate)
        return self.run_python(end, index_from, limit, validate=validate)

    def run_python(self, end: int, index_from: int = -1, limit: int = 8192, *,
                   validate: bool = False) -> tuple[int, dict[tuple[str, int], int]]:
        """:meth:`run` in Python, one record at a time."""
        commitlog = self.commitlog
        index_from = max(index_from, self.indexed_to)
        file_size = commitlog.config.mappedFileSizeCommitLog
        walk = walk_records
        # The fields dispatch reads, in _HEADER's order; a validating run reads them all
        # (the CRC check needs the full header) and picks these out.
        header, pick = (RECORD_HEADER, _PICK_FROM_FULL) if validate else (_HEADER, None)
        self.bad_record_at = None
        error: ValueError | None = None
        topics = self._topics
        tag_codes = self._tag_codes
        runs: dict[tuple[str, int], list] = {}
        index = self.index
        index_keys: list[bytes] = []
        index_offsets: list[int] = []
        index_times: list[int] = []
        count = 0
        offset = self.reput_offset
        # Module constants as locals: the loop below runs once per record.
        tran_mask, hidden, plain, scheduled = SysFlag.TRANSACTION_MASK, _HIDDEN, _PLAIN, _SCHEDULED
        has_tags, has_uniq, has_keys = _HAS_TAGS, _HAS_UNIQ, _HAS_KEYS
        add_key, add_offset, add_time = (index_keys.append, index_offsets.append,
                                         index_times.append)
        while offset < end and count < limit:
            f = commitlog.files.find(offset)
            if f is None:
                break
            base = f.from_offset
            mm = f.mm
            nxt = offset - base  # where the next record starts
            stop = min(f.wrote_position, end - base)
            try:
                for pos, fields, topic_at, topic_len, props_at in walk(
                        mm, nxt, stop, header=header, check_crc=validate):
                    size, _magic, queue_id, queue_offset, sysflag, store_ts, _body_len = (
                        fields if pick is None else pick(fields))
                    nxt = pos + size
                    raw_topic = mm[topic_at:topic_at + topic_len]
                    props = mm[props_at:nxt]
                    info = topics.get(raw_topic)
                    if info is None:
                        info = topics[raw_topic] = _topic_info(raw_topic)
                    topic, prefix, kind = info
                    phys = base + pos
                    if sysflag & tran_mask not in hidden:
                        code = 0
                        if kind == plain:
                            if has_tags in props:
                                tags = property_value(props, _TAGS)
                                if tags:
                                    code = tag_codes.get(tags)
                                    if code is None:
                                        code = self._tag_code(tags)
                        elif kind == scheduled:
                            # Delayed messages: the unit carries the delivery time, not a tag.
                            code = self._deliver_at(props, store_ts)
                        else:
                            due = property_value(props, _TIMER_OUT) if props else None
                            code = int(due) if due and due.isdigit() else store_ts
                        key = (topic, queue_id)
                        run = runs.get(key)
                        if run is None:
                            runs[key] = [queue_offset, queue_offset + 1, [phys, size, code]]
                        elif run[1] == queue_offset:
                            run[1] += 1
                            run[2] += (phys, size, code)
                        else:
                            self._write_run(key, run)
                            runs[key] = [queue_offset, queue_offset + 1, [phys, size, code]]
                    if index is not None and props and phys > index_from:
                        # UNIQ_KEY is on nearly every record: found inline, not by a call.
                        i = props.find(has_uniq)
                        if i > 0 and props[i - 1] != 2:  # inside another value: parse properly
                            uniq = property_value(props, _UNIQ)
                        elif i >= 0:
                            j = props.find(b"\x02", i + 9)
                            uniq = props[i + 9:j] if j >= 0 else props[i + 9:]
                        else:
                            uniq = None
                        if uniq:
                            add_key(prefix + uniq)
                            add_offset(phys)
                            add_time(store_ts)
                        if has_keys in props:
                            keys = property_value(props, _KEYS)
                            if keys:
                                for k in keys.split(b" "):
                                    if k:
                                        add_key(prefix + k)
                                        add_offset(phys)
                                        add_time(store_ts)
                    count += 1
                    if count >= limit:
                        break
            except MessageFormatError as exc:
                size, magic = (SIZE_AND_MAGIC.unpack_from(mm, nxt) if nxt + 8 <= file_size
                               else (0, 0))
                if not validate and (nxt + 8 > stop or (
                        magic in _MAGICS and RECORD_OVERHEAD <= size <= file_size - nxt
                        and nxt + size > stop)):
                    # A record not whole yet: a slave receives the log in chunks that do not
                    # follow records. The rest comes with the next chunk.
                    offset = base + nxt
                    break
                if magic != BLANK_MAGIC or (validate and nxt + size != file_size):
                    # The records before it are dispatched all the same (below).
                    if validate:
                        self.bad_record_at = base + nxt
                    else:
                        error = ValueError(f"no record at CommitLog offset {base + nxt}: {exc}")
                    offset = base + nxt
                    break
                nxt = file_size  # the filler that closes a file: go on in the next one
            offset = base + nxt
            if nxt < file_size and nxt >= f.wrote_position:
                break
        grown = {}
        for key, run in runs.items():
            if self._write_run(key, run):
                grown[key] = run[1]
        if index_keys:
            self._indexing(offset, len(index_keys), index.put_many, index_keys,
                           index_offsets, index_times)
        if index is not None and index.files and not index.ready:
            self.make_index_spare()
        self.reput_offset = offset
        if error is not None:
            raise error
        return count, grown

    def write_index(self, hashes: Sequence[int], offsets: Sequence[int],
                    times: Sequence[int], n: int, offset: int, put: Callable) -> None:
        """Write ``n`` index entries hashed already (the compiled scan's) with ``put``."""
        assert self.index is not None
        self._indexing(offset, n, self.index.put_hashed, hashes, offsets, times, n, put)

    def _indexing(self, offset: int, n: int, write: Callable, *args: object) -> None:
        try:
            write(*args)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            # As RocketMQ's IndexService does when it gets no index file: the messages go on
            # to consumers without these entries, and the store refuses puts.
            self._index_errors.log(
                "no room for index entries: %d key(s) up to CommitLog offset %d are not "
                "indexed (a query by key will not find them): %s", n, offset, exc)
            if self.on_index_failure is not None:
                self.on_index_failure(exc)

    def make_index_spare(self) -> None:
        """Make the next index file ahead (see ``Index.make_spare``); a failure is told."""
        assert self.index is not None
        try:
            self.index.make_spare()
        except OSError as exc:
            # The entries so far are written; the store refuses puts until a spare can be
            # made, so what was acknowledged fits in the file being written.
            self._index_errors.log("cannot make the next index file ahead: %s", exc)
            if self.on_index_failure is not None and is_disk_full(exc):
                self.on_index_failure(exc)

    def _write_run(self, key: tuple[str, int], run: list) -> bool:
        cq = self.get_queue(*key)
        return cq.put_run(run[0], run[2], rewrite=self.rewrite_units)


class RateLimited:
    """Logs an error at once, then the same error again only after ``every`` seconds (a
    full disk makes every retry fail the same way)."""

    def __init__(self, every: float = 30.0) -> None:
        self.every = every
        self._last = ""
        self._at = 0.0

    def log(self, msg: str, *args: object, exc_info: BaseException | None = None) -> None:
        text = msg % args
        now = time.monotonic()
        if text == self._last and now - self._at < self.every:
            return
        self._last, self._at = text, now
        log.error(msg, *args, exc_info=exc_info)
