"""ConsumeQueue: per topic and queue id, one 20-byte unit per message pointing into the
CommitLog: ``[commitlog offset i64][size i32][tag code i64]``.

Units live at ``queue_offset * 20``, in files of ``mappedFileSizeConsumeQueue`` bytes under
``consumequeue/<topic>/<queueId>/``. Only the dispatcher writes them.
"""

from __future__ import annotations

import os
import shutil
import struct
import threading
from collections.abc import Iterable

from .allocation import data_segments
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue

UNIT_SIZE = 20
#: Bytes read at a time when the end of a file is searched for.
_SCAN_CHUNK = 1 << 16
UNIT = struct.Struct(">qiq")
_RUN_STRUCTS: dict[int, struct.Struct] = {}


def _units(n: int) -> struct.Struct:
    """A compiled struct for ``n`` consecutive units."""
    s = _RUN_STRUCTS.get(n)
    if s is None:
        s = struct.Struct(">" + "qiq" * n)
        if len(_RUN_STRUCTS) < 4096:
            _RUN_STRUCTS[n] = s
    return s


class ConsumeQueue:
    """The units of one (topic, queue id)."""

    def __init__(self, root: str, topic: str, queue_id: int, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = MappedFileQueue(os.path.join(root, topic, str(queue_id)), file_size)
        self.file_size = file_size
        #: Logical offset of the first unit that still points into the CommitLog.
        self.min_logic_offset = 0
        #: One past the highest CommitLog byte referenced (for recovery and truncation).
        self.max_physic_offset = 0

    # ------------------------------------------------------------------ offsets
    @property
    def max_offset(self) -> int:
        """The next queue offset to be written (the count of units, holes included)."""
        return self.files.max_offset // UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return max(self.min_logic_offset, self.files.min_offset // UNIT_SIZE)

    # ------------------------------------------------------------------ writing
    def put(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """Write the unit for ``queue_offset``; see :meth:`put_run`."""
        return self.put_run(queue_offset, [commitlog_offset, size, tags_code])

    def put_run(self, first_offset: int, flat: list[int], *, rewrite: bool = False) -> bool:
        """Write consecutive units from ``first_offset``; ``flat`` holds (commitlog offset,
        size, tag code) triples back to back. See :meth:`put_units`."""
        count = len(flat) // 3
        return self.put_units(first_offset, count, _units(count).pack(*flat),
                              flat[-3] + flat[-2], rewrite=rewrite)

    def put_units(self, first_offset: int, count: int, data: bytes | bytearray | memoryview,
                  end_phys: int, *, rewrite: bool = False) -> bool:
        """Write ``count`` consecutive encoded units (``data``) from ``first_offset``;
        ``end_phys`` is one past the CommitLog end of the last one's record. Idempotent:
        units already present are kept, so recovery can re-dispatch a stretch of the
        CommitLog safely; with ``rewrite`` (recovery after a crash) they are written again
        where they differ, since a process killed while copying a run of units may have
        left any of them unwritten or torn, not only the last. Returns True if anything
        was appended. DiskFullError when the blocks for them cannot be reserved (a put
        reserves them before it is acknowledged, see ``MappedFileQueue.make_ahead``; a
        slave's dispatch of its master's log does not): the units of the files before stay
        written."""
        pos = first_offset * UNIT_SIZE
        files = self.files
        last = files.last
        if last is None:
            files.last_for_write(pos)
            self.min_logic_offset = first_offset
        else:
            end = last.from_offset + last.wrote_position
            if pos < end:
                skip = (end - pos) // UNIT_SIZE
                if rewrite:
                    self._rewrite(pos, memoryview(data)[:min(skip, count) * UNIT_SIZE])
                if skip >= count:
                    return False  # already dispatched
                data = memoryview(data)[skip * UNIT_SIZE:]
                count -= skip
                pos = end
        # A position past the end leaves a hole of zero units (a queue started mid-way).
        done = 0
        while done < count:
            f = self._file_for(pos)
            rel = pos - f.from_offset
            n = min(count - done, (self.file_size - rel) // UNIT_SIZE)
            if rel + n * UNIT_SIZE > f.reserved_to:  # reserved by the put, unless a replica's
                f.reserve(rel + n * UNIT_SIZE)
            f.view[rel:rel + n * UNIT_SIZE] = data[done * UNIT_SIZE:(done + n) * UNIT_SIZE]
            f.wrote_position = rel + n * UNIT_SIZE
            pos += n * UNIT_SIZE
            done += n
        if end_phys > self.max_physic_offset:
            self.max_physic_offset = end_phys
        return True

    def _rewrite(self, pos: int, data: memoryview) -> None:
        """Write units below the write position again where the bytes differ (a run torn by
        a crash); units in files deleted since are left alone. A record's unit is written
        only for a record still in the CommitLog, so the min offset may move back to it."""
        done = 0
        while done < len(data):
            f = self.files.find(pos + done)
            rel = (pos + done) % self.file_size
            n = min(len(data) - done, self.file_size - rel)
            part = data[done:done + n]
            if f is not None and f.view[rel:rel + n].tobytes() != part.tobytes():
                f.view[rel:rel + n] = part
                # A queue's first units, torn, were taken for the zeros it may begin with.
                self.min_logic_offset = min(self.min_logic_offset, (pos + done) // UNIT_SIZE)
            done += n

    def _file_for(self, pos: int) -> MappedFile:
        files = self.files
        while True:
            last = files.last
            assert last is not None
            if pos < last.from_offset + self.file_size:
                return last
            # Skipped over (a queue that resumed further on): its unwritten end still reads
            # as units, so its blocks must exist (reads through a mapping on tmpfs allocate).
            last.reserve(self.file_size)
            last.wrote_position = self.file_size
            files.create(last.from_offset + self.file_size)

    # ------------------------------------------------------------------ reading
    def units(self, queue_offset: int, max_count: int) -> memoryview | None:
        """A view of up to ``max_count`` units from ``queue_offset``, within one file."""
        pos = queue_offset * UNIT_SIZE
        f = self.files.find(pos)
        if f is None:
            return None
        rel = pos - f.from_offset
        stop = min(f.wrote_position, rel + max_count * UNIT_SIZE)
        if stop <= rel:
            return None
        return f.slice(rel, stop)

    def unit(self, queue_offset: int) -> tuple[int, int, int] | None:
        """``(commitlog offset, size, tag code)`` of one unit, or None."""
        pos = queue_offset * UNIT_SIZE
        f = self.files.find(pos)
        if f is None or pos - f.from_offset + UNIT_SIZE > f.wrote_position or not f.hold():
            return None
        try:
            return UNIT.unpack_from(f.view, pos - f.from_offset)
        finally:
            f.release()

    # ------------------------------------------------------------------ recovery
    def recover(self) -> None:
        """Find the write position and the min offset from the files.

        The queue ends after its last unit with a size, wherever it is: units are written in
        order, but a run may leave a hole of zero units in the middle (a queue that resumed
        further on), so the end is searched for from the back of the last file, and files
        holding nothing after the last unit are dropped. A unit torn by a crash (written in
        part, size still 0) is cleared. The min offset is the first unit after the leading
        run of zero units of the first file (a queue whose first files were deleted, or that
        began mid-way)."""
        files = self.files.files
        if not files:
            return
        for f in files[:-1]:
            f.wrote_position = f.flushed_position = self.file_size
        first = files[0]
        end = first.from_offset
        for f in reversed(files):
            units = _units_up_to_last(f)
            if units:
                end = f.from_offset + units * UNIT_SIZE
                break
        # Drops the empty files after the end and clears a torn unit; sets the last file's
        # write position. Bytes already zero are compared, not written.
        self.files.truncate(end)
        last = self.files.last
        assert last is not None
        last.flushed_position = last.wrote_position
        lead = _leading_zero_units(first) if end > first.from_offset else 0
        self.min_logic_offset = first.from_offset // UNIT_SIZE + lead
        unit = self.unit(self.max_offset - 1) if self.max_offset > self.min_logic_offset else None
        self.max_physic_offset = unit[0] + unit[1] if unit else 0

    def truncate_to_commitlog(self, commitlog_max: int) -> None:
        """Drop units that point at or past ``commitlog_max`` (a cut CommitLog tail)."""
        if self.max_physic_offset <= commitlog_max:
            return
        offset = self.max_offset
        floor = self.files.min_offset // UNIT_SIZE
        while offset > floor:
            unit = self.unit(offset - 1)
            if unit is None or unit[0] + unit[1] <= commitlog_max:
                break
            offset -= 1
        self.files.truncate(offset * UNIT_SIZE)
        unit = self.unit(offset - 1) if offset > floor else None
        self.max_physic_offset = unit[0] + unit[1] if unit else 0

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Move the min offset past units whose messages retention deleted."""
        offset = self.min_offset
        end = self.max_offset
        # Binary search: units are in CommitLog order.
        lo, hi = offset, end
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.unit(mid)
            if unit is None or unit[1] == 0 or unit[0] < commitlog_min:
                lo = mid + 1
            else:
                hi = mid
        self.min_logic_offset = lo

    def delete_expired(self, commitlog_min: int) -> int:
        """Delete whole files whose units all point below ``commitlog_min``."""
        doomed = []
        files = self.files.files
        for f in files[:-1]:
            phys, size, _ = UNIT.unpack_from(f.view, self.file_size - UNIT_SIZE)
            if size and phys + size <= commitlog_min:
                doomed.append(f)
            else:
                break
        removed = self.files.remove_first(doomed) if doomed else 0
        self.correct_min_offset(commitlog_min)
        return removed

    def flush(self) -> None:
        self.files.flush()

    def close(self) -> None:
        self.files.close()


class ConsumeQueueTable:
    """Every ConsumeQueue of a store by ``(topic, queue id)``, created when the dispatcher
    first writes to one. ``queues`` is replaced, never changed in place, so readers use it
    without a lock."""

    def __init__(self, root: str, file_size: int) -> None:
        self.root = root
        self.file_size = file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is not None:
            return cq
        with self._lock:
            cq = self.queues.get((topic, queue_id))
            if cq is None:
                cq = ConsumeQueue(self.root, topic, queue_id, self.file_size)
                self.queues = {**self.queues, (topic, queue_id): cq}
            return cq

    def load(self) -> None:
        """Open the queues found on disk and find where each ends."""
        os.makedirs(self.root, exist_ok=True)
        queues = {}
        for topic in sorted(os.listdir(self.root)):
            topic_dir = os.path.join(self.root, topic)
            if not os.path.isdir(topic_dir):
                continue
            for qid in os.listdir(topic_dir):
                if not qid.isdigit():
                    continue
                cq = ConsumeQueue(self.root, topic, int(qid), self.file_size)
                cq.files.load()
                cq.recover()
                queues[(topic, int(qid))] = cq
        self.queues = queues

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def max_offsets(self) -> dict[tuple[str, int], int]:
        """The next queue offset of every queue (the CommitLog's counters at start)."""
        return {key: cq.max_offset for key, cq in self.queues.items()}

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for t, q in self.queues if t == topic)

    def topics(self) -> set[str]:
        return {t for t, _ in self.queues}

    def delete_topics(self, topics: Iterable[str]) -> int:
        """Drop the queues of ``topics`` and their files; returns how many went."""
        doomed = set(topics)
        with self._lock:
            gone = [cq for key, cq in self.queues.items() if key[0] in doomed]
            self.queues = {k: v for k, v in self.queues.items() if k[0] not in doomed}
        for cq in gone:
            cq.files.drop_ahead()
            cq.files.remove_first(cq.files.files)
            shutil.rmtree(cq.files.directory, ignore_errors=True)
        for topic in doomed:
            shutil.rmtree(os.path.join(self.root, topic), ignore_errors=True)
        return len(gone)

    def truncate_to_commitlog(self, commitlog_end: int) -> None:
        for cq in self.queues.values():
            cq.truncate_to_commitlog(commitlog_end)

    def correct_min_offsets(self, commitlog_min: int) -> None:
        for cq in self.queues.values():
            cq.correct_min_offset(commitlog_min)

    def delete_expired(self, commitlog_min: int) -> None:
        """Delete files whose units all point below ``commitlog_min`` (retention)."""
        for cq in list(self.queues.values()):
            cq.delete_expired(commitlog_min)
            cq.files.retry_closing()

    def flush(self) -> None:
        for cq in list(self.queues.values()):
            cq.flush()

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()

    def __len__(self) -> int:
        return len(self.queues)


def _units_up_to_last(f: MappedFile) -> int:
    """How many units of ``f`` come up to and including its last unit with a size (0: none).

    Read backwards in chunks with ``pread``, so the zeros after a queue's end cost a
    comparison each, and a file that holds data to its end costs one chunk."""
    pos = f.file_size
    buf = bytearray(_SCAN_CHUNK)
    while pos > 0:
        start = max(0, pos - _SCAN_CHUNK)
        view = memoryview(buf)[:pos - start]
        got = os.preadv(f.fd, [view], start)
        data = bytes(view[:got])
        stripped = len(data.rstrip(b"\x00"))
        if stripped:
            # The last non-zero byte's unit, then back over units without a size (a unit
            # torn between its offset and its size fields).
            index = (start + stripped - 1) // UNIT_SIZE
            while index >= 0:
                if UNIT.unpack_from(f.view, index * UNIT_SIZE)[1] > 0:
                    return index + 1
                index -= 1
            return 0
        pos = start
    return 0


def _leading_zero_units(f: MappedFile) -> int:
    """How many whole zero units open a file. Only the parts holding data are read, with
    ``pread``: through the mapping, every page up to the first unit would be faulted in, and
    on tmpfs a page of the file's unreserved end allocated (a SIGBUS on a full one)."""
    segments = data_segments(f.fd, 0, f.file_size)
    buf = bytearray(_SCAN_CHUNK)
    for start, stop in segments:
        pos = start
        while pos < stop:
            view = memoryview(buf)[:min(_SCAN_CHUNK, stop - pos)]
            got = os.preadv(f.fd, [view], pos)
            if not got:
                break
            data = bytes(view[:got])
            stripped = data.lstrip(b"\x00")
            if stripped:
                return (pos + got - len(stripped)) // UNIT_SIZE
            pos += got
    return f.file_size // UNIT_SIZE
