"""Files the broker keeps its tables in (topics, offsets, subscription groups, delay and
timer progress, runtime config)."""

from __future__ import annotations

import contextlib
import os
import threading

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_of(path: str) -> threading.Lock:
    """The lock of one file's writers (a broker has a handful of such files)."""
    with _locks_guard:
        lock = _locks.get(path)
        if lock is None:
            lock = _locks[path] = threading.Lock()
        return lock


def write_atomically(path: str, data: bytes) -> None:
    """Write ``path`` so that a crash leaves the old or the new file, never half of one: the
    data goes to a temporary file, is fsynced, and replaces ``path`` in one rename. A write
    that fails (ENOSPC on a full disk) raises OSError, leaves ``path`` as it was and removes
    the partial temporary file, which would otherwise hold on to the little room left."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    # One writer of a path at a time: the loop and the housekeeping thread may save the same
    # table at once, and through the one temporary file a rename took the other's away.
    with _lock_of(path):
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
