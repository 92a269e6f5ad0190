"""The ordered queue of a log's mapped files (RocketMQ's MappedFileQueue): loading them
from their directory, finding the one holding an offset, and the changes to the queue, files
created (or made ahead of the writes), cut at an offset, and the oldest ones deleted.

A file is named by the 20-digit offset of its first byte (:func:`offset_to_name`). The lists
of files are replaced, never changed in place, so that readers on other threads use a
snapshot without a lock; one file, its mapping and its writes are :mod:`.mapped_file`'s.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Iterable

from .errors import StoreCorruptError
from .mapped_file import TMP_SUFFIX, MappedFile

log = logging.getLogger("rocketq.store")


def offset_to_name(offset: int) -> str:
    """The 20-digit file name of a file starting at ``offset``."""
    return f"{offset:020d}"


def _drop_unfinished_last(directory: str, names: list[str], file_size: int) -> None:
    """Remove the last file of ``names`` (and from the list) if it is shorter than
    ``file_size`` and holds only zeros: a creation cut short by a crash, before files were
    created under a temporary name. A short file with data is left for the size check."""
    path = os.path.join(directory, names[-1])
    size = os.path.getsize(path)
    if size >= file_size:
        return
    with open(path, "rb") as fh:
        if fh.read(size).strip(b"\x00"):
            return
    log.warning("removing %s: %d of %d bytes, all zero (its creation was cut short)",
                path, size, file_size)
    os.unlink(path)
    names.pop()


class MappedFileQueue:
    """The files of one log, in offset order. Lists are replaced, never mutated, so readers on
    other threads can use a snapshot without locking."""

    def __init__(self, directory: str, file_size: int) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self._starts: list[int] = []
        self._lock = threading.Lock()
        self._closing: list[MappedFile] = []
        #: Files made ahead of time (:meth:`make_ahead`), next after ``files`` and in order;
        #: :meth:`create` takes them over instead of allocating.
        self._ahead: list[MappedFile] = []
        #: How files are written (:meth:`set_write_mode`).
        self.pwrite = False
        self.zero_ahead = False

    def set_write_mode(self, *, pwrite: bool, zero_ahead: bool) -> None:
        """Write appends with ``pwrite`` instead of through the mapping, and open files for
        zeroing ahead (:meth:`MappedFile.zero_ahead`). Called before files are loaded or
        created: a file's mode is set when it is opened."""
        self.pwrite = pwrite
        self.zero_ahead = zero_ahead

    def _open(self, start: int, *, create: bool) -> MappedFile:
        return MappedFile(os.path.join(self.directory, offset_to_name(start)), start,
                          self.file_size, create=create, pwrite=self.pwrite,
                          zero_ahead=self.zero_ahead)

    def load(self) -> None:
        """Open the files already on disk, checking names and sizes."""
        os.makedirs(self.directory, exist_ok=True)
        listed = os.listdir(self.directory)
        for name in listed:
            if name.endswith(TMP_SUFFIX):  # a file whose creation was cut short
                os.unlink(os.path.join(self.directory, name))
        names = sorted(n for n in listed if n.isdigit() and len(n) == 20)
        if names:
            _drop_unfinished_last(self.directory, names, self.file_size)
        files = []
        for name in names:
            start = int(name)
            if start % self.file_size:
                raise StoreCorruptError(
                    f"{os.path.join(self.directory, name)} does not start at a multiple of the "
                    f"file size {self.file_size}")
            if files and files[-1].from_offset + self.file_size != start:
                # A gap means files were lost; the part before the gap is unreachable.
                for f in files:
                    f.close()
                raise StoreCorruptError(f"files missing before {name} in {self.directory}")
            files.append(self._open(start, create=False))
        for f in files:
            # Until recovery says otherwise, loaded files count as written and flushed.
            f.wrote_position = f.flushed_position = self.file_size
        self._set(files)

    def _set(self, files: list[MappedFile]) -> None:
        self._starts = [f.from_offset for f in files]
        self.files = files

    # ------------------------------------------------------------------ lookups
    @property
    def first(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    @property
    def last(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """One past the last written byte."""
        files = self.files
        return files[-1].from_offset + files[-1].wrote_position if files else 0

    @property
    def flushed_offset(self) -> int:
        files = self.files
        if not files:
            return 0
        for f in reversed(files):
            if f.flushed_position:
                return f.from_offset + f.flushed_position
        return files[0].from_offset

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset``, or None if it is outside every file."""
        files, starts = self.files, self._starts
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0 or i >= len(files):
            return None
        f = files[i]
        if f.from_offset != starts[i]:  # the lists were swapped under us; retry consistently
            return self.find(offset)
        return f if offset < f.from_offset + self.file_size else None

    # ------------------------------------------------------------------ changes
    def create(self, start: int) -> MappedFile:
        """Create the file starting at ``start`` (the next one, or the first one), or take
        over the one made ahead of time for it."""
        with self._lock:
            last = self.files[-1] if self.files else None
            if last is not None and start != last.from_offset + self.file_size:
                raise StoreCorruptError(f"cannot create a file at {start} after {last}")
            ahead = self._ahead
            if ahead and ahead[0].from_offset == start:
                f = ahead[0]
                self._ahead = ahead[1:]
            else:
                self._drop_ahead()
                os.makedirs(self.directory, exist_ok=True)
                f = self._open(start, create=True)
            self._set([*self.files, f])
            return f

    def make_ahead(self, first: int, end: int) -> int:
        """Make sure files exist, with their blocks reserved, for every byte in
        ``[first, end)``, ahead of the writes: the files missing after the last one (or, with
        none, from the one holding ``first``) are created now and kept aside until
        :meth:`create` asks for them, and the blocks up to ``end`` (and a step past it) are
        reserved. A writer that must not fail later (the dispatcher, for units of
        acknowledged messages) gets its room here, where a full disk can still refuse the
        put. Returns the offset up to which blocks are reserved (``end`` or more); raises
        DiskFullError when there is no room (the files and blocks made before stay)."""
        with self._lock:
            tail = self._ahead[-1] if self._ahead else self.last
            covered = (tail.from_offset + self.file_size if tail is not None
                       else first - first % self.file_size)
            if covered < end:
                os.makedirs(self.directory, exist_ok=True)
                made = list(self._ahead)
                try:
                    while covered < end:
                        made.append(self._open(covered, create=True))
                        covered += self.file_size
                finally:
                    self._ahead = made
            reserved = covered
            for f in [*self.files[-1:], *self._ahead]:
                if f.from_offset >= end:
                    break
                f.reserve(min(self.file_size, end - f.from_offset))
                reserved = f.from_offset + f.reserved_to
            return reserved

    def _drop_ahead(self) -> None:
        """Delete the files made ahead of time (they no longer follow the last file)."""
        ahead, self._ahead = self._ahead, []
        for f in ahead:
            self._retire(f)

    def drop_ahead(self) -> None:
        """Delete the files made ahead of time (the queue is being deleted)."""
        with self._lock:
            self._drop_ahead()

    def last_for_write(self, start_if_empty: int = 0) -> MappedFile:
        """The file to write into, creating the first or the next one when needed."""
        last = self.last
        if last is None:
            return self.create(start_if_empty - start_if_empty % self.file_size)
        if last.is_full:
            return self.create(last.from_offset + self.file_size)
        return last

    def truncate(self, offset: int) -> None:
        """Forget everything from ``offset`` on: later files are deleted, the file holding it
        is cut there and cleared after it."""
        with self._lock:
            keep = []
            for f in self.files:
                end = f.from_offset + self.file_size
                if end <= offset:
                    keep.append(f)
                elif f.from_offset <= offset:
                    pos = offset - f.from_offset
                    f.zero_from(pos)
                    f.wrote_position = pos
                    f.flushed_position = min(f.flushed_position, pos)
                    keep.append(f)
                else:
                    self._retire(f)
            self._drop_ahead()
            self._set(keep)

    def remove_first(self, files: Iterable[MappedFile]) -> int:
        """Delete the given files, which must be the oldest ones; return how many went."""
        doomed = {id(f) for f in files}
        with self._lock:
            keep = [f for f in self.files if id(f) not in doomed]
            gone = [f for f in self.files if id(f) in doomed]
            for f in gone:
                self._retire(f)
            self._set(keep)
        return len(gone)

    def _retire(self, f: MappedFile) -> None:
        if not f.destroy():
            self._closing.append(f)

    def retry_closing(self) -> None:
        """Close deleted files whose readers have since let go of them."""
        if self._closing:
            self._closing = [f for f in self._closing if not f.close()]

    def flush(self) -> int:
        """Flush every file with unflushed writes; return the flushed offset."""
        for f in self.files:
            if f.wrote_position > f.flushed_position:
                f.flush()
        return self.flushed_offset

    def close(self) -> None:
        for f in [*self.files, *self._ahead]:
            f.close()
        self.retry_closing()

    def expired_files(self, max_age_seconds: float, now: float | None = None,
                      limit: int = 10, force: bool = False) -> list[MappedFile]:
        """Oldest files past their age (or, with ``force``, the oldest regardless), never the
        last file, and only a leading run of them so offsets stay contiguous."""
        now = time.time() if now is None else now
        out = []
        for f in self.files[:-1]:
            if len(out) >= limit:
                break
            if force or f.last_modified() + max_age_seconds <= now:
                out.append(f)
            else:
                break
        return out
