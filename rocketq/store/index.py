"""IndexFile: look messages up by key, unique id or time, in RocketMQ's on-disk layout.

One file is a 40-byte header, ``maxHashSlotNum`` 4-byte hash slots, then ``maxIndexNum`` 20-byte
entries ``[key hash i32][commitlog offset i64][seconds since the file began i32][previous
entry i32]``. A slot holds the newest entry of its hash; entries chain back through "previous".
Files are named by their creation time (``yyyyMMddHHmmssSSS``) under ``index/``. The key of an
entry is ``topic#key`` for every KEYS entry and for UNIQ_KEY.

A file is sparse (see ``allocation``): its header and hash slots (written anywhere) are
reserved when it is made, its entries (written in order) :data:`ENTRY_STEP` at a time ahead of
the writes, and half a step more is kept in hand (:meth:`Index.make_spare`) so that the keys
of messages acknowledged before the disk filled still find room.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from ..protocol import codec
from ..protocol.message import java_hash
from .mapped_file import MappedFile

log = logging.getLogger("rocketq.store")

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT = struct.Struct(">i")
SLOT_SIZE = 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
_MAX_INT = 0x7FFFFFFF
#: Below this many keys, index entries are written one by one.
_BULK_MIN = 24
#: Bytes of entries reserved at a time ahead of the writes (52,428 entries).
ENTRY_STEP = 1 << 20


_ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("time_diff", ">i4"),
                         ("prev", ">i4")])
_POWERS = np.zeros(0, dtype=np.uint64)


def index_key_hash(key: str) -> int:
    """RocketMQ's index hash: ``abs(String.hashCode(key))``, with MIN_VALUE mapped to 0."""
    h = java_hash(key)
    return 0 if h == -0x80000000 else abs(h)


def _key_hash(key: bytes) -> int:
    return index_key_hash(key.decode("utf-8", "replace"))


def _powers_of_31(n: int) -> np.ndarray:
    """``31**k mod 2**32`` for k in ``range(n)`` (or more), cached."""
    global _POWERS
    if len(_POWERS) < n:
        size = max(n, 2 * len(_POWERS), 256)
        _POWERS = np.array([pow(31, k, 1 << 32) for k in range(size)], dtype=np.uint64)
    return _POWERS


def index_key_hashes(keys: list[bytes] | list[str]) -> np.ndarray:
    """:func:`index_key_hash` of many keys (UTF-8 bytes or str) at once.

    Java's hash is a polynomial in 31 over the characters: for ASCII keys every byte is
    weighted by 31 to the power of its distance from its key's end and the weights are summed
    per key (``np.add.reduceat``), modulo 2**32, all keys in one pass. Keys with other
    characters (hashed over UTF-16 units) and empty keys go one by one.
    """
    # The dispatcher's keys are bytes already (a list is all bytes or all str).
    encoded = keys if not keys or type(keys[0]) is bytes else [k.encode() for k in keys]
    if codec.COMPILED:  # one C loop over the characters beats the array set-up
        return np.array(codec.index_hashes(encoded), dtype=np.int64)
    n = len(encoded)
    out = np.zeros(n, dtype=np.int64)
    if not n:
        return out
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    joined = b"".join(encoded)
    if joined:
        width = int(lengths.max())
        nonempty = lengths > 0
        if int(lengths.min()) == width:
            # Keys of one length (a topic's UNIQ_KEYs): one row each, one product with the
            # powers; uint64 products wrap modulo 2**64, which keeps them right modulo 2**32.
            rows = np.frombuffer(joined, dtype=np.uint8).reshape(n, width).astype(np.uint64)
            sums = (rows @ _powers_of_31(width)[width - 1::-1]) & 0xFFFFFFFF
        else:
            ends = np.cumsum(lengths)
            starts = ends - lengths
            chars = np.frombuffer(joined, dtype=np.uint8).astype(np.uint64)
            exponents = np.repeat(ends - 1, lengths) - np.arange(len(joined))
            weighted = chars * _powers_of_31(width)[exponents]
            sums = np.add.reduceat(weighted, starts[nonempty]) & 0xFFFFFFFF
        signed = sums.astype(np.int64)
        signed[signed >= 1 << 31] -= 1 << 32
        signed = np.abs(signed)
        signed[signed == 1 << 31] = 0  # abs(Integer.MIN_VALUE) stays negative in Java: use 0
        out[nonempty] = signed
    if not joined.isascii():
        for i, raw in enumerate(encoded):
            if not raw.isascii():
                out[i] = index_key_hash(raw.decode("utf-8", "replace"))
    return out


class IndexFile:
    """One index file; single writer (the dispatcher), many readers."""

    def __init__(self, path: str, slot_num: int, index_num: int, *, create: bool) -> None:
        self.slot_num = slot_num
        self.index_num = index_num
        size = HEADER_SIZE + slot_num * SLOT_SIZE + index_num * ENTRY_SIZE
        self._entries_at = HEADER_SIZE + slot_num * SLOT_SIZE
        self.file = MappedFile(path, 0, size, create=create,
                               reserve=self._entries_at + ENTRY_STEP)
        self.file.reserve_step = min(ENTRY_STEP, size)
        self.path = path
        if create:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
            self.index_count = 1
            self._write_header()
        else:
            (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
             self.end_phy_offset, self.hash_slot_count, self.index_count) = HEADER.unpack_from(
                self.file.view, 0)
            self.index_count = max(1, self.index_count)
            self._recount()
        self.file.wrote_position = size

    def _recount(self) -> None:
        """After a crash the header may lag the entries; walk forward over written entries.

        Entries are written in CommitLog order, so their offsets never go down: one whose
        offset is lower than the one before was being written when the process died (the
        bulk path writes a run's fields column by column), and the walk stops there. The
        entries of the last record walked are dropped too (its keys may have been cut short):
        recovery indexes that record again, whole, from the offset before it."""
        view = self.file.view
        header_count = self.index_count
        count = header_count

        def phys_at(n: int) -> int:
            return ENTRY.unpack_from(view, self._entries_at + n * ENTRY_SIZE)[1]

        last = phys_at(count - 1) if count > 1 else -1
        while count < self.index_num:
            key_hash, phys, time_diff, prev = ENTRY.unpack_from(
                view, self._entries_at + count * ENTRY_SIZE)
            if key_hash == 0 and phys == 0 and time_diff == 0 and prev == 0:
                break
            if phys < last:
                break  # torn
            last = phys
            count += 1
        if count > header_count:
            while count > max(header_count, 1) and phys_at(count - 1) == last:
                count -= 1
        self.index_count = count
        if count > 1:
            self.end_phy_offset = phys_at(count - 1)

    def _write_header(self) -> None:
        HEADER.pack_into(self.file.view, 0, self.begin_timestamp, self.end_timestamp,
                         self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count,
                         self.index_count)

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def _reserve_entries(self, n: int) -> None:
        """Reserve the blocks of the next ``n`` entries (and of the one after them, which
        recovery reads) before any is written; DiskFullError when there is no room."""
        end = self._entries_at + (self.index_count + n + 1) * ENTRY_SIZE
        if end > self.file.reserved_to:
            self.file.reserve(min(end, self.file.file_size))

    def _in_hand_end(self) -> int:
        end = self._entries_at + (self.index_count + 1) * ENTRY_SIZE + ENTRY_STEP // 2
        return min(end, self.file.file_size)

    @property
    def has_room_in_hand(self) -> bool:
        """Whether half a step of entries past the last one is reserved (or the file's end
        is)."""
        return self._in_hand_end() <= self.file.reserved_to

    def reserve_in_hand(self) -> None:
        """Reserve half a step of entries past the last one, and a step more; DiskFullError
        when there is no room."""
        self.file.reserve(self._in_hand_end())

    def put(self, key_hash: int, commitlog_offset: int, store_timestamp: int) -> bool:
        """Add one entry; False when the file is full."""
        if self.index_count >= self.index_num:
            return False
        self._reserve_entries(1)
        view = self.file.view
        slot_at = HEADER_SIZE + (key_hash % self.slot_num) * SLOT_SIZE
        prev = SLOT.unpack_from(view, slot_at)[0]
        if prev <= 0 or prev > self.index_count:
            prev = 0
        if self.index_count <= 1:
            self.begin_timestamp = store_timestamp
            self.begin_phy_offset = commitlog_offset
        time_diff = (store_timestamp - self.begin_timestamp) // 1000
        time_diff = 0 if time_diff < 0 else min(time_diff, _MAX_INT)
        ENTRY.pack_into(view, self._entries_at + self.index_count * ENTRY_SIZE, key_hash,
                        commitlog_offset, time_diff, prev)
        SLOT.pack_into(view, slot_at, self.index_count)
        if prev == 0:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset = commitlog_offset
        self.end_timestamp = store_timestamp
        return True

    def put_many(self, hashes: np.ndarray, phys: np.ndarray, timestamps: np.ndarray) -> int:
        """Add as many of the given entries as fit, in order; return how many were added.

        The same as calling :meth:`put` for each, done with array operations: entries that
        share a slot chain to each other in order, the first to the slot's previous head.
        """
        n = min(len(hashes), self.index_num - self.index_count)
        if n <= 0:
            return 0
        hashes, phys, timestamps = hashes[:n], phys[:n], timestamps[:n]
        self._reserve_entries(n)
        if self.index_count <= 1:
            self.begin_timestamp = int(timestamps[0])
            self.begin_phy_offset = int(phys[0])
        slots = np.frombuffer(self.file.mm, dtype=">i4", count=self.slot_num,
                              offset=HEADER_SIZE)
        entries = np.frombuffer(self.file.mm, dtype=_ENTRY_DTYPE, count=self.index_num,
                                offset=self._entries_at)
        try:
            numbers = np.arange(self.index_count, self.index_count + n, dtype=np.int64)
            slot_of = hashes % self.slot_num
            order = np.argsort(slot_of, kind="stable")
            sorted_slots = slot_of[order]
            prev = np.empty(n, dtype=np.int64)
            first = np.ones(n, dtype=bool)
            first[1:] = sorted_slots[1:] != sorted_slots[:-1]
            heads = slots[sorted_slots[first]].astype(np.int64)
            heads[(heads <= 0) | (heads > self.index_count)] = 0
            prev_sorted = np.empty(n, dtype=np.int64)
            prev_sorted[first] = heads
            prev_sorted[~first] = numbers[order][:-1][~first[1:]]
            prev[order] = prev_sorted
            last = np.ones(n, dtype=bool)
            last[:-1] = first[1:]
            slots[sorted_slots[last]] = numbers[order][last]
            time_diff = (timestamps - self.begin_timestamp) // 1000
            np.clip(time_diff, 0, _MAX_INT, out=time_diff)
            block = entries[self.index_count:self.index_count + n]
            block["hash"] = hashes
            block["phys"] = phys
            block["time_diff"] = time_diff
            block["prev"] = prev
            self.hash_slot_count += int(np.count_nonzero(heads == 0))
        finally:
            del slots, entries
        self.index_count += n
        self.end_phy_offset = int(phys[-1])
        self.end_timestamp = int(timestamps[-1])
        return n

    def put_hashed(self, hashes: Sequence[int], offsets: Sequence[int], times: Sequence[int],
                   start: int, n: int, put: Callable) -> int:
        """Add entries ``start .. start + n`` of hashed keys with ``put`` (the compiled
        ``index_put``), as :meth:`put` adds one; return how many fit."""
        if self.index_count >= self.index_num or n <= 0:
            return 0
        self._reserve_entries(min(n, self.index_num - self.index_count))
        if self.index_count <= 1:
            self.begin_timestamp = times[start]
            self.begin_phy_offset = offsets[start]
        # The mapping itself, not its memoryview: a compiled ``put`` holds a buffer export
        # while it runs without the interpreter lock, and closing a mapping that is exported
        # is a pending close, where releasing an exported memoryview would be an error.
        written, new_slots = put(self.file.mm, self.slot_num, self.index_num,
                                 self.index_count, self.begin_timestamp, hashes, offsets,
                                 times, start, n)
        if written:
            self.hash_slot_count += new_slots
            self.index_count += written
            self.end_phy_offset = offsets[start + written - 1]
            self.end_timestamp = times[start + written - 1]
        return written

    def query(self, key_hash: int, max_num: int, begin: int, end: int) -> list[int]:
        """CommitLog offsets of entries with ``key_hash`` stored in ``[begin, end]`` (ms),
        newest first. The file is held while it is read (``ReferenceResource``): retention
        deleting it meanwhile waits for the query; once deleted it has nothing."""
        file = self.file
        if not file.hold():
            return []
        try:
            return self._query(file.view, key_hash, max_num, begin, end)
        finally:
            file.release()

    def _query(self, view: memoryview, key_hash: int, max_num: int, begin: int,
               end: int) -> list[int]:
        out: list[int] = []
        slot_at = HEADER_SIZE + (key_hash % self.slot_num) * SLOT_SIZE
        current = SLOT.unpack_from(view, slot_at)[0]
        count = self.index_count
        seen = 0
        while 0 < current < count and len(out) < max_num and seen < count:
            seen += 1
            h, phys, time_diff, prev = ENTRY.unpack_from(
                view, self._entries_at + current * ENTRY_SIZE)
            stored = self.begin_timestamp + time_diff * 1000
            # Entries keep whole seconds; the caller checks the exact store time.
            if h == key_hash and begin <= stored + 999 and stored <= end:
                out.append(phys)
            if prev <= 0 or prev >= current:
                break
            current = prev
        return out

    def overlaps(self, begin: int, end: int) -> bool:
        return self.begin_timestamp <= end + 999 and begin <= self.end_timestamp + 999

    def truncate(self, cut: int) -> int:
        """Drop the entries of records at or after CommitLog offset ``cut`` (a cut tail):
        entries are in CommitLog order, so they are the last ones. Each goes from the newest
        back, its slot given back the entry before it in its chain, and its bytes cleared
        (so that the walk over entries after a crash does not count it again). Returns how
        many were dropped."""
        view = self.file.view
        count = self.index_count
        while count > 1:
            at = self._entries_at + (count - 1) * ENTRY_SIZE
            key_hash, phys, _, prev = ENTRY.unpack_from(view, at)
            if phys < cut:
                break
            slot_at = HEADER_SIZE + (key_hash % self.slot_num) * SLOT_SIZE
            if SLOT.unpack_from(view, slot_at)[0] == count - 1:
                SLOT.pack_into(view, slot_at, prev if 0 < prev < count - 1 else 0)
                if not 0 < prev < count - 1:
                    self.hash_slot_count = max(0, self.hash_slot_count - 1)
            ENTRY.pack_into(view, at, 0, 0, 0, 0)
            count -= 1
        dropped = self.index_count - count
        if dropped:
            self.index_count = count
            if count > 1:
                _, phys, time_diff, _ = ENTRY.unpack_from(
                    view, self._entries_at + (count - 1) * ENTRY_SIZE)
                self.end_phy_offset = phys
                self.end_timestamp = self.begin_timestamp + time_diff * 1000
            else:
                self.begin_timestamp = self.end_timestamp = 0
                self.begin_phy_offset = self.end_phy_offset = 0
            self._write_header()
        return dropped

    def flush(self) -> None:
        self._write_header()
        self.file.wrote_position = self.file.file_size
        self.file.flushed_position = 0
        self.file.flush()

    def close(self) -> None:
        self._write_header()
        self.file.close()

    def destroy(self) -> bool:
        """Delete the file; False while a query still holds it (closed by a later
        :meth:`Index.retry_closing`)."""
        return self.file.destroy()


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
