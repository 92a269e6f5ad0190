"""One IndexFile in RocketMQ's on-disk layout: its header, hash slots and entries, the
entries' puts (one, in bulk, or hashed already by the compiled scan), queries by key hash,
the walk that finds where a crash stopped the writes, and cutting entries of records gone.

One file is a 40-byte header, ``maxHashSlotNum`` 4-byte hash slots, then ``maxIndexNum`` 20-byte
entries ``[key hash i32][commitlog offset i64][seconds since the file began i32][previous
entry i32]``. A slot holds the newest entry of its hash; entries chain back through "previous".

A file is sparse (see ``allocation``): its header and hash slots (written anywhere) are
reserved when it is made, its entries (written in order) :data:`ENTRY_STEP` at a time ahead of
the writes, and half a step more is kept in hand (:meth:`IndexFile.reserve_in_hand`, which
``Index.make_spare`` asks for) so that the keys of messages acknowledged before the disk
filled still find room. The files of a store, and which one is written, are :mod:`.index`'s.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import numpy as np

from .mapped_file import MappedFile

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT = struct.Struct(">i")
SLOT_SIZE = 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
_MAX_INT = 0x7FFFFFFF
#: Bytes of entries reserved at a time ahead of the writes (52,428 entries).
ENTRY_STEP = 1 << 20
_ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("time_diff", ">i4"),
                         ("prev", ">i4")])


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
