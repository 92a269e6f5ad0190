"""How mapped files get their disk blocks: made sparse at their full size, with blocks
reserved ahead of the writes in bounded steps.

A write through a mapping into a block the filesystem cannot allocate is a SIGBUS, which
kills the broker; ``posix_fallocate`` of the same block is a plain ENOSPC, which the store
turns into its refusal of puts (:class:`DiskFullError`). So every byte is reserved with
``posix_fallocate`` before anything writes it through a mapping. Reserving a whole file when
it is made (1 GiB of CommitLog, two index files of 420 MB, 6 MB per ConsumeQueue) keeps
that promise at the cost of gigabytes for a store that holds one message; Apache RocketMQ
makes its files sparse (``RandomAccessFile.setLength``). Here a file is made sparse with
``ftruncate`` at its full logical size (the size checks at load still hold) and its blocks
are reserved a step at a time, just ahead of the writes: :func:`reserve_step` says how much.

On tmpfs even a read through the mapping of a block never reserved allocates it, and is a
SIGBUS when the filesystem is full: readers keep to what was written or reserved.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os

from .errors import DiskFullError

log = logging.getLogger("rocketq.store")

#: Steps are between these bounds (and never more than the file).
MIN_RESERVE_STEP = 64 << 10
MAX_RESERVE_STEP = 4 << 20
_PAGE = mmap.PAGESIZE
_ZERO_CHUNK = bytes(1 << 20)
#: Errors of a filesystem that cannot reserve blocks at all.
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL)


def reserve_step(file_size: int) -> int:
    """How many bytes are reserved at a time ahead of the writes to a file of ``file_size``
    bytes: a 64th of the file, in whole pages, from 64 KiB to 4 MiB (4 MiB for a 1 GiB
    CommitLog file, 92 KiB for a ConsumeQueue file of 300,000 units), at most the file."""
    step = -(-(file_size // 64) // _PAGE) * _PAGE
    return min(file_size, max(MIN_RESERVE_STEP, min(MAX_RESERVE_STEP, step)))


def disk_full(exc: OSError, path: str, what: str) -> DiskFullError:
    """The store's refusal for a reservation of ``what`` in ``path`` that found no room."""
    return DiskFullError(
        exc.errno, f"the broker's disk is full: no space left to {what} in {path}; free disk "
        "space or lower the retention time")


def allocate(fd: int, start: int, end: int, path: str) -> bool:
    """Reserve the blocks of bytes ``[start, end)`` of an open file. Returns False when the
    filesystem cannot reserve blocks (the bytes are then written as on any filesystem);
    raises DiskFullError when it has no room for them (some of them may be reserved)."""
    if end <= start:
        return True
    try:
        os.posix_fallocate(fd, start, end - start)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(exc, path, f"reserve {end - start} bytes at {start}") from exc
        if exc.errno in _UNSUPPORTED:
            return False
        raise
    return True


def create_sparse(path: str, tmp: str, file_size: int, reserve: int) -> tuple[int, int]:
    """Make ``tmp`` a file of ``file_size`` bytes whose first ``reserve`` are reserved, and
    rename it to ``path``; return its descriptor and how many leading bytes are reserved.

    A process killed meanwhile leaves no short file under the real name (which the next
    start would refuse), only a ``tmp`` that loading removes. On a filesystem that cannot
    reserve blocks the whole file is written with zeros, as every block then must exist."""
    if os.path.exists(path):
        raise FileExistsError(errno.EEXIST, f"{path} exists already")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, file_size)
        reserved = min(reserve, file_size)
        if not allocate(fd, 0, reserved, path):
            _write_zeros(fd, file_size, path)
            reserved = file_size
        os.rename(tmp, path)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, reserved


def _write_zeros(fd: int, file_size: int, path: str) -> None:
    """Write zeros over a whole file, so that every block of it exists."""
    pos = 0
    try:
        while pos < file_size:
            pos += os.pwrite(fd, _ZERO_CHUNK[:min(file_size - pos, len(_ZERO_CHUNK))], pos)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise disk_full(exc, path, f"create it ({file_size} bytes)") from exc
        raise


def allocated_prefix(fd: int, file_size: int) -> int:
    """How many leading bytes of a file on disk hold data (where its first hole starts):
    those blocks exist. 0 when the filesystem cannot tell (the first reservation then
    reserves the blocks again, which costs nothing for blocks that exist)."""
    try:
        return min(file_size, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:
        return 0


def data_segments(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` of a file that hold data (``SEEK_DATA``/``SEEK_HOLE``):
    their blocks exist, the rest reads as zeros. The whole range when the filesystem cannot
    tell."""
    segments = []
    pos = start
    while pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                break  # only holes from pos on
            return [(start, end)]
        if data >= end:
            break
        hole = min(end, os.lseek(fd, data, os.SEEK_HOLE))
        segments.append((data, hole))
        pos = hole
    return segments


def unsupported_once(path: str) -> None:
    """Say (once per process) that a filesystem cannot reserve blocks."""
    if not _warned:
        _warned.append(True)
        log.warning("the filesystem of %s cannot reserve blocks (posix_fallocate); a full "
                    "disk may then stop the broker with SIGBUS rather than refuse sends", path)


_warned: list[bool] = []
