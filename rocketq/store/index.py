"""The index (RocketMQ's IndexService): look messages up by key, unique id or time.

The key of an entry is ``topic#key`` for every KEYS entry and for UNIQ_KEY, hashed as
RocketMQ does (:mod:`.index_hash`). Entries go into IndexFiles (:mod:`.index_file`, the
on-disk layout), newest last, named by their creation time (``yyyyMMddHHmmssSSS``) under
``index/``; a full one rolls over to the next, which is made ahead of time
(:meth:`Index.make_spare`) with entries kept in hand in the one being written, so that the
keys of messages acknowledged before the disk filled still find room.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from ..protocol import codec
from .index_file import IndexFile
from .index_hash import _key_hash, index_key_hash, index_key_hashes

log = logging.getLogger("rocketq.store")

#: Below this many keys, index entries are written one by one.
_BULK_MIN = 24


class Index:
    """The index files of a store, newest last."""

    def __init__(self, directory: str, slot_num: int, index_num: int) -> None:
        self.directory = directory
        self.slot_num = slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self.lock = threading.Lock()
        #: The next file, made ahead of time (:meth:`make_spare`): rolling over takes it, so
        #: entries of messages already acknowledged do not wait on a disk that may be full.
        self.spare: IndexFile | None = None
        self._spare_lock = threading.Lock()
        #: Deleted files that queries still held: closed once they let go.
        self._closing: list[IndexFile] = []

    def load(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit())
        self.files = [IndexFile(os.path.join(self.directory, n), self.slot_num, self.index_num,
                                create=False) for n in names]

    @property
    def end_phy_offset(self) -> int:
        """Offset of the newest indexed record; records after it still need indexing. A last
        file without entries (a spare made ahead of time) does not count."""
        for f in reversed(self.files):
            if f.index_count > 1:
                return f.end_phy_offset
        return -1

    @property
    def ready(self) -> bool:
        """Whether the next file is made and the file being written has a step of entries
        reserved in hand (:meth:`make_spare` otherwise)."""
        files = self.files
        return self.spare is not None and (not files or files[-1].has_room_in_hand)

    def make_spare(self) -> None:
        """Make the next file now unless one is ready, and reserve entries in hand in the
        file being written (:meth:`IndexFile.reserve_in_hand`): the store refuses puts while
        it cannot (OSError, ENOSPC on a full disk), so that the entries of messages already
        acknowledged always find room (in the entries in hand, or in the next file)."""
        with self._spare_lock:
            if self.spare is None:
                self.spare = self._new_file()
        files = self.files
        if files and not files[-1].has_room_in_hand:
            files[-1].reserve_in_hand()

    def _new_file(self) -> IndexFile:
        now = time.time()
        name = time.strftime("%Y%m%d%H%M%S", time.localtime(now)) + f"{int(now * 1000) % 1000:03d}"
        path = os.path.join(self.directory, name)
        while os.path.exists(path):
            name = str(int(name) + 1)
            path = os.path.join(self.directory, name)
        return IndexFile(path, self.slot_num, self.index_num, create=True)

    def _writable(self) -> IndexFile:
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        if self.files:
            self.files[-1].flush()
        with self._spare_lock:
            f, self.spare = self.spare, None
            if f is None:
                f = self._new_file()
        with self.lock:
            self.files = [*self.files, f]
        return f

    def put_many(self, keys: list[bytes] | list[str], phys: list[int],
                 timestamps: list[int]) -> None:
        """Index entries in order: full keys (``topic#key``, bytes or str), CommitLog offsets
        and store timestamps, rolling to a new file when one fills up."""
        if len(keys) < _BULK_MIN:
            # Array set-up costs more than it saves on a handful of keys.
            f = self._writable()
            encoded = keys if type(keys[0]) is bytes else [k.encode() for k in keys]
            for h, offset, ts in zip(codec.index_hashes(encoded) if codec.COMPILED else
                                     map(_key_hash, encoded), phys, timestamps, strict=True):
                if not f.put(h, offset, ts):
                    f = self._writable()
                    f.put(h, offset, ts)
            return
        hashes = index_key_hashes(keys)
        offsets = np.array(phys, dtype=np.int64)
        times = np.array(timestamps, dtype=np.int64)
        done = 0
        while done < len(keys):
            f = self._writable()
            done += f.put_many(hashes[done:], offsets[done:], times[done:])

    def put_hashed(self, hashes: Sequence[int], offsets: Sequence[int], times: Sequence[int],
                   n: int, put: Callable) -> None:
        """Index the first ``n`` entries of hashed keys in order, rolling to a new file
        when one fills up (see :meth:`IndexFile.put_hashed`)."""
        done = 0
        while done < n:
            done += self._writable().put_hashed(hashes, offsets, times, done, n - done, put)

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """CommitLog offsets for ``key`` of ``topic`` stored in ``[begin, end]`` ms."""
        h = index_key_hash(f"{topic}#{key}")
        out: list[int] = []
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if f.overlaps(begin, end):
                out.extend(f.query(h, max_num - len(out), begin, end))
        return out

    def truncate(self, cut: int) -> int:
        """Drop every entry of a record at or after CommitLog offset ``cut``: the CommitLog
        was cut there (a demoted master's tail), or recovery holds at controller mode's
        confirm offset, so those records were never confirmed and a query by key must not
        find them, nor, later, whatever record reuses their offsets. Returns how many went.
        The dispatcher must not be writing entries meanwhile."""
        dropped = 0
        for f in reversed(self.files):
            if f.index_count > 1 and f.end_phy_offset < cut:
                break
            dropped += f.truncate(cut)
        if dropped:
            log.warning("index: %d entries of records at or after CommitLog offset %d dropped",
                        dropped, cut)
        return dropped

    def delete_before(self, commitlog_min: int) -> int:
        """Delete index files whose entries all point below ``commitlog_min``. A query
        reading one keeps it mapped until it is done (see :meth:`IndexFile.query`)."""
        self.retry_closing()
        with self.lock:
            doomed = [f for f in self.files[:-1] if f.end_phy_offset < commitlog_min]
            if not doomed:
                return 0
            self.files = [f for f in self.files if f not in doomed]
        for f in doomed:
            if not f.destroy():
                self._closing.append(f)
        return len(doomed)

    def retry_closing(self) -> None:
        """Close deleted files whose queries have since let go of them."""
        if self._closing:
            self._closing = [f for f in self._closing if not f.file.close()]

    def flush(self) -> None:
        if self.files:
            self.files[-1].flush()

    def close(self) -> None:
        for f in self.files:
            f.close()
        with self._spare_lock:
            if self.spare is not None:
                self.spare.close()
        self.retry_closing()
