"""The store's compiled loops, when the compiled twins are installed, and the dispatch that
drives the record scan.

``_records`` (the scan that dispatches, and index writes) and ``_encode`` (records from
batches and messages) are the pure-Python references; ``_crecords`` and ``_cencode`` are the
same files compiled by Cython, whose loops release the interpreter lock.
``ROCKETQ_NO_EXTENSIONS=1`` forces the pure ones, and then the dispatcher and the CommitLog
keep their own Python loops (faster than the references run by the interpreter).
:data:`COMPILED` says which run: :data:`impl` scans, :data:`encoder` encodes.

:class:`CompiledDispatch` is the dispatcher's fast path: one :func:`_records.scan` per stretch
of a CommitLog file fills flat buffers with ConsumeQueue units, runs and index entries; each
run is copied into its ConsumeQueue with one slice assignment and the entries go to the index
through :func:`_records.index_put`. The records the scan leaves to Python (delayed and timed
topics, non-ASCII tags or keys, the filler that closes a file, a torn or bad record) are
dispatched one at a time by the reference loop, so both paths share every rule.
"""

from __future__ import annotations

import importlib
import mmap
import os
from array import array
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Protocol

from ..protocol import SCHEDULE_TOPIC, TIMER_TOPIC
from . import _encode, _records


def _load(pure: ModuleType, compiled: str) -> ModuleType:
    if os.environ.get("ROCKETQ_NO_EXTENSIONS"):
        return pure
    try:
        return importlib.import_module(f".{compiled}", __package__)
    except ImportError:
        return pure


impl = _load(_records, "_crecords")
encoder = _load(_encode, "_cencode")
#: Both compiled twins are in use (one without the other is a broken build: pure for both).
COMPILED: bool = impl is not _records and encoder is not _encode
if not COMPILED:
    impl, encoder = _records, _encode

_SCHEDULE = SCHEDULE_TOPIC.encode()
_TIMER = TIMER_TOPIC.encode()
_UNIT = _records.UNIT_SIZE
_RUN = _records.RUN_FIELDS
#: After this many records in a row left to the reference dispatcher, it takes
#: :data:`_STRETCH` records at a time.
_HANDED_IN_A_ROW = 4
_STRETCH = 512


class Dispatcher(Protocol):
    """What the fast path reads and moves of the dispatcher that drives it (``dispatch``,
    which sits above the encoders here and the CommitLog that uses them): its CommitLog and
    index (``Any``: they are above this module), its offsets, and the reference loop it hands
    records to."""

    commitlog: Any
    index: Any
    reput_offset: int
    bad_record_at: int | None
    indexed_to: int
    rewrite_units: bool
    topic_names: dict[bytes, str]
    get_queue: Callable[[str, int], Any]

    def run_python(self, end: int, index_from: int = -1, limit: int = 8192, *,
                   validate: bool = False) -> tuple[int, dict[tuple[str, int], int]]: ...

    def write_index(self, hashes: Sequence[int], offsets: Sequence[int],
                    times: Sequence[int], n: int, offset: int, put: Callable) -> None: ...

    def make_index_spare(self) -> None: ...


class CompiledDispatch:
    """The scratch buffers of one dispatcher and the loop that drives the scan."""

    def __init__(self, module: ModuleType, capacity: int = 8192) -> None:
        self.module = module
        self.capacity = capacity
        self.units = bytearray(capacity * _UNIT)
        self.runs = array("q", bytes(8 * _RUN * capacity))
        keys = 4 * capacity
        self.hashes = array("q", bytes(8 * keys))
        self.offsets = array("q", bytes(8 * keys))
        self.times = array("q", bytes(8 * keys))
        self.tmp = bytearray(capacity * _UNIT)
        self.work = array("q", bytes(8 * module.work_size(capacity)))

    def run(self, d: Dispatcher, end: int, index_from: int, limit: int,
            validate: bool) -> tuple[int, dict[tuple[str, int], int]]:
        """:meth:`Dispatcher.run`, the same contract and results."""
        scan = self.module.scan
        commitlog = d.commitlog
        index = d.index
        index_from = max(index_from, d.indexed_to)
        d.bad_record_at = None
        grown: dict[tuple[str, int], int] = {}
        count = 0
        offset = d.reput_offset
        units = memoryview(self.units)
        handed = 0  # records handed to the reference in a row
        while offset < end and count < limit:
            f = commitlog.files.find(offset)
            if f is None:
                break
            base = f.from_offset
            pos = offset - base
            stop = min(f.wrote_position, end - base)
            if pos >= stop:
                break  # the file's end so far: nothing to read yet
            room = min(limit - count, self.capacity)
            # The mapping itself (see IndexFile.put_hashed): the scan holds an export of it.
            new_pos, n, nruns, nkeys, status = scan(
                f.mm, pos, stop, base, validate, index is not None, index_from, _SCHEDULE,
                _TIMER, units[:room * _UNIT], self.runs, self.hashes, self.offsets, self.times,
                self.tmp, self.work)
            if nruns:
                self._write_runs(d, f.mm, nruns, grown)
            if nkeys:
                d.write_index(self.hashes, self.offsets, self.times, nkeys, base + new_pos,
                              self.module.index_put)
            count += n
            offset = base + new_pos
            if status == _records.DONE or status == _records.FULL or count >= limit:
                handed = 0
                continue
            # Records the reference dispatcher takes: one at a time, or, after a few in a row
            # (a stream of delayed messages, non-ASCII keys), a stretch of them at once, so
            # such a stream is dispatched as fast as by the Python loop alone.
            handed = handed + 1 if status == _records.NEEDS_PYTHON else 0
            d.reput_offset = offset
            done, more = d.run_python(
                end, index_from, min(limit - count, _STRETCH) if handed > _HANDED_IN_A_ROW else 1,
                validate=validate)
            for key, max_offset in more.items():
                if max_offset > grown.get(key, -1):
                    grown[key] = max_offset
            count += done
            if d.bad_record_at is not None or d.reput_offset == offset:
                offset = d.reput_offset
                break  # a bad record (recovery), or one not whole yet
            offset = d.reput_offset
        if index is not None and index.files and not index.ready:
            d.make_index_spare()
        d.reput_offset = offset
        return count, grown

    def _write_runs(self, d: Dispatcher, view: mmap.mmap, nruns: int,
                    grown: dict[tuple[str, int], int]) -> None:
        runs = self.runs
        units = memoryview(self.units)
        topics = d.topic_names
        at = 0
        for r in range(0, nruns * _RUN, _RUN):
            topic_at, topic_len, queue_id, first, n, end_phys = runs[r:r + _RUN]
            raw = bytes(view[topic_at:topic_at + topic_len])
            topic = topics.get(raw)
            if topic is None:
                topic = topics[raw] = raw.decode()
            cq = d.get_queue(topic, queue_id)
            if cq.put_units(first, n, units[at:at + n * _UNIT], end_phys,
                            rewrite=d.rewrite_units):
                key = (topic, queue_id)
                if first + n > grown.get(key, -1):
                    grown[key] = first + n
            at += n * _UNIT
