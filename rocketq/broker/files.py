"""Files the broker keeps its tables in (topics, offsets, subscription groups, delay and
timer progress, runtime config)."""

from __future__ import annotations

import os


def write_atomically(path: str, data: bytes) -> None:
    """Write ``path`` so that a crash leaves the old or the new file, never half of one: the
    data goes to a temporary file, is fsynced, and replaces ``path`` in one rename."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
