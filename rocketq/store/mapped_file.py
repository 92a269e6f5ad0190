"""One fixed-size memory-mapped file of a log (RocketMQ's MappedFile); the ordered queue of
them is :mod:`.mapped_file_queue`'s.

A file is made sparse at its full size; its blocks are reserved with ``posix_fallocate`` a
step at a time ahead of the appends (:mod:`.allocation`), so that a full disk shows up as a
clear ENOSPC before anything is written, never as a SIGBUS in the middle of writing to the
mapping. Writes go to the mapping,
or with ``pwrite`` into the file (readers keep reading the mapping: on Linux both are the page
cache); ``flush`` makes them durable with ``fdatasync``, which releases the GIL. The first
``fdatasync`` after a write into a block that was reserved but never written also commits the
filesystem's journal (to record the block as written): zeros written ahead of the appends
(:meth:`MappedFile.zero_ahead`) take that cost off the SYNC_FLUSH path.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading

from . import allocation
from .errors import DiskFullError, StoreCorruptError, is_disk_full
from .reference import ReferenceResource

_ZERO_CHUNK = bytes(1 << 20)
_ZEROS = memoryview(_ZERO_CHUNK)

#: Zero-ahead works in chunks of this size, aligned to it: one ``fdatasync`` per chunk.
ZERO_AHEAD_CHUNK = 1 << 20
#: Zeros written at a time under the file's write lock (an append waits for one piece at most).
ZERO_AHEAD_PIECE = 256 << 10
_PAGE = mmap.PAGESIZE
#: With ``pwrite``, appends from this size on use it; smaller ones are copied into the mapping
#: (measured with SYNC_FLUSH: the two system calls pay from records of 2-3 KiB, and cost
#: more than the page faults they save for records of 1 KiB and less, many to an fsync).
PWRITE_MIN_SIZE = 2048


#: The name a file has while it is being created.
TMP_SUFFIX = ".tmp"


def _pwrite_all(fd: int, data: memoryview, pos: int) -> None:
    """``os.pwrite`` until every byte of ``data`` is written at ``pos`` (a write to a
    regular file may be short)."""
    while data:
        n = os.pwrite(fd, data, pos)
        data = data[n:]
        pos += n


class MappedFile(ReferenceResource):
    """One memory-mapped file of a MappedFileQueue, sparse, with its blocks reserved ahead of
    its appends; readers hold it while they slice it (:class:`ReferenceResource`).

    ``pwrite``: :meth:`append` writes with ``os.pwrite`` rather than through the mapping
    (appends of :data:`PWRITE_MIN_SIZE` bytes or more).
    ``zero_ahead``: the file may be zeroed ahead of its appends (:meth:`zero_ahead`); appends
    and zeroing then take turns under :attr:`write_lock`.
    ``reserve``: the bytes reserved when the file is made (a step by default; see
    :meth:`reserve`).
    """

    __slots__ = ("path", "from_offset", "file_size", "fd", "mm", "view", "wrote_position",
                 "flushed_position", "_pending_close", "pwrite", "write_lock", "zeroed_to",
                 "reserved_to", "reserve_step")

    def __init__(self, path: str, from_offset: int, file_size: int, *, create: bool,
                 pwrite: bool = False, zero_ahead: bool = False,
                 reserve: int | None = None) -> None:
        ReferenceResource.__init__(self)
        self.path = path
        self.from_offset = from_offset
        self.file_size = file_size
        self._pending_close = False
        self.pwrite = pwrite
        #: Held by appends (writing, moving ``wrote_position``) and by :meth:`zero_ahead`
        #: (writing zeros past it); None when the file is never zeroed ahead.
        self.write_lock: threading.Lock | None = threading.Lock() if zero_ahead else None
        #: Zeros were written up to here (past ``wrote_position`` they are still zeros).
        self.zeroed_to = 0
        #: Bytes reserved ahead of the writes at a time (:func:`allocation.reserve_step`).
        self.reserve_step = allocation.reserve_step(file_size)
        if create:
            fd, self.reserved_to = allocation.create_sparse(
                path, path + TMP_SUFFIX, file_size,
                self.reserve_step if reserve is None else reserve)
        else:
            fd = os.open(path, os.O_RDWR)
            size = os.fstat(fd).st_size
            if size != file_size:
                os.close(fd)
                raise StoreCorruptError(
                    f"{path} is {size} bytes, expected {file_size}: the configured file size "
                    "differs from the one the store was written with")
            #: The blocks of bytes ``[0, reserved_to)`` exist: writes go below it only.
            self.reserved_to = allocation.allocated_prefix(fd, file_size)
        self.fd = fd
        self.mm = mmap.mmap(fd, file_size, access=mmap.ACCESS_WRITE)
        self.view = memoryview(self.mm)
        self.wrote_position = 0
        self.flushed_position = 0

    # ------------------------------------------------------------------ writing
    @property
    def free_space(self) -> int:
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the write position; return the position it was written at.

        The first four bytes (a record's TOTALSIZE) go last, so a reader that finds a non-zero
        size at a position finds the whole record behind it even if the writer dies mid-copy.
        Bytes past :attr:`reserved_to` are reserved first: a full disk raises DiskFullError
        and leaves the write position where it was, nothing written.
        """
        lock = self.write_lock
        if lock is None:
            return self._append(data)
        with lock:
            return self._append(data)

    def _append(self, data: bytes | bytearray | memoryview) -> int:
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.reserved_to:
            self.reserve(pos + n)
        if self.pwrite and n >= PWRITE_MIN_SIZE:
            whole = memoryview(data)
            try:
                _pwrite_all(self.fd, whole[4:], pos + 4)
                _pwrite_all(self.fd, whole[:4], pos)
            except OSError as exc:
                if is_disk_full(exc):
                    raise DiskFullError(
                        exc.errno, f"the broker's disk is full: no room to write {n} bytes at "
                        f"{pos} of {self.path}; free disk space") from exc
                raise
        else:
            if n > 4:
                self.view[pos + 4:pos + n] = memoryview(data)[4:]  # no copy of the tail first
            self.view[pos:pos + min(n, 4)] = data[:4]
        self.wrote_position = pos + n
        return pos

    def write_at(self, pos: int, data: bytes | memoryview) -> None:
        """Write at an absolute position within the file (reserving the blocks up to it)."""
        if pos + len(data) > self.reserved_to:
            self.reserve(pos + len(data))
        self.view[pos:pos + len(data)] = data

    def reserve(self, end: int) -> None:
        """Reserve the blocks of bytes ``[0, end)`` and a step (:attr:`reserve_step`) past
        them, so that the next writes find them and this costs one ``posix_fallocate`` per
        step. DiskFullError when the disk has no room: nothing is written, and
        :attr:`reserved_to` stays where it was.

        Threads may reserve the same file at once (the writer, and a put making room for
        the dispatcher's units): each sets :attr:`reserved_to` only to what it reserved
        itself, so it may lag the blocks that exist (the next call reserves them again, for
        nothing) but never runs ahead of them."""
        start = self.reserved_to
        if end <= start:
            return
        stop = min(self.file_size, end + self.reserve_step)
        if not allocation.allocate(self.fd, start, stop, self.path):
            allocation.unsupported_once(self.path)
            stop = self.file_size
        if stop > self.reserved_to:
            self.reserved_to = stop

    def flush(self) -> int:
        """Make everything written so far durable; return the flushed position."""
        target = self.wrote_position
        if target > self.flushed_position:
            os.fdatasync(self.fd)
            self.flushed_position = target
        return self.flushed_position

    def zero_ahead(self, distance: int) -> int:
        """Write zeros over the next chunk (:data:`ZERO_AHEAD_CHUNK`, aligned to it) that is
        within ``distance`` bytes (at least a chunk) past the write position and not zeroed
        yet, then ``fdatasync`` them; return how many bytes were zeroed (0: nothing to do).

        Zeros go only past ``wrote_position``, under :attr:`write_lock` a piece at a time
        (an append never finds its bytes overwritten, nor waits long); the sync runs outside
        it. DiskFullError when the zeros reach blocks not reserved yet and the disk has no
        room for them: nothing written is touched."""
        lock = self.write_lock
        if lock is None:
            raise ValueError(f"{self.path} was not opened for zeroing ahead")
        distance = max(distance, ZERO_AHEAD_CHUNK)
        done = 0
        fd = -1
        while True:
            with lock:
                fd = self.fd
                if fd < 0:
                    return done
                wrote = self.wrote_position
                start = max(self.zeroed_to, -(-wrote // _PAGE) * _PAGE)
                limit = min(self.file_size, wrote + distance)
                if start >= limit:
                    break
                chunk_end = (start // ZERO_AHEAD_CHUNK + 1) * ZERO_AHEAD_CHUNK
                if chunk_end > limit and limit < self.file_size:
                    break  # only whole chunks (but the file's last): one fdatasync each
                end = min(start + ZERO_AHEAD_PIECE, chunk_end, self.file_size)
                try:
                    _pwrite_all(fd, _ZEROS[:end - start], start)
                except OSError as exc:
                    if is_disk_full(exc):
                        raise DiskFullError(
                            exc.errno, f"the broker's disk is full: no room to write zeros "
                            f"ahead of the appends in {self.path} at {start}; appends go on "
                            "without them (SYNC_FLUSH is slower)") from exc
                    raise
                self.zeroed_to = end
                if start <= self.reserved_to < end:  # zeros written: their blocks exist
                    self.reserved_to = end
            done += end - start
            if end == chunk_end or end == self.file_size:
                break
        if done:
            try:
                os.fdatasync(fd)
            except OSError:
                if self.fd == fd:
                    raise
                # The file was closed meanwhile (deleted or truncated away): nothing to sync.
        return done

    def zero_from(self, pos: int) -> None:
        """Clear bytes from ``pos`` to the end of the file (used to cut a torn tail).

        Only the parts of the file that hold data are looked at (``SEEK_DATA``/``SEEK_HOLE``):
        blocks never written since ``posix_fallocate`` read as zeros already, so cutting the
        tail of a 1 GiB file costs in proportion to what was written past ``pos``, not the
        file's size. Chunks that are already zero are left alone (a comparison, not a write).
        """
        # Find every data segment before reading any: a read's readahead pulls the blocks
        # after it into the page cache, and a filesystem may then report those preallocated
        # blocks as data too (ext4 does), so reading as we go would walk the whole file.
        for start, stop in allocation.data_segments(self.fd, pos, self.file_size):
            self._zero_range(start, stop)

    def _zero_range(self, pos: int, end: int) -> None:
        # Read with pread rather than through the mapping: faulting in pages of a mapping
        # that were never written costs far more than reading the same bytes.
        step = len(_ZERO_CHUNK)
        buf = bytearray(step)
        while pos < end:
            stop = min(end, (pos // step + 1) * step)
            got = os.preadv(self.fd, [memoryview(buf)[:stop - pos]], pos)
            if buf[:got] != _ZERO_CHUNK[:got] or got < stop - pos:
                self.view[pos:stop] = _ZERO_CHUNK[:stop - pos]
            pos = stop

    # ------------------------------------------------------------------ lifecycle
    def last_modified(self) -> float:
        try:
            return os.stat(self.path).st_mtime
        except FileNotFoundError:
            return 0.0

    def close(self) -> bool:
        """Unmap and close. Returns False (and retries on the next call) while readers hold
        the file (:meth:`shutdown`) or still hold memoryviews of the mapping."""
        if not self.shutdown():
            self._pending_close = True
            return False
        with self.write_lock or contextlib.nullcontext():  # not while zeros are written
            if self.fd < 0:
                return True
            self.view.release()
            try:
                self.mm.close()
            except BufferError:
                # A reader still holds a slice; keep the file open until it lets go.
                self.view = memoryview(self.mm)
                self._pending_close = True
                return False
            os.close(self.fd)
            self.fd = -1
            return True

    def destroy(self) -> bool:
        """Delete the file. The mapping stays valid for readers that still hold views."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        return self.close()

    def __repr__(self) -> str:
        return (f"MappedFile({os.path.basename(self.path)}, wrote={self.wrote_position}, "
                f"flushed={self.flushed_position})")
