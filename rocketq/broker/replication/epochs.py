"""The epoch file (RocketMQ's EpochFileCache, ``epochFileCheckpoint``): for each master epoch
this log has had, the CommitLog offset it started at; and ``consistent_point``, where two
brokers' logs stop agreeing by their epoch files, which a demoted master cuts its CommitLog
back to before it follows the new master. The file and the comparison are a concept of their
own beside the controller talk of ``replicas.py``."""

from __future__ import annotations

import contextlib
import os
import zlib

from ..files import write_atomically


class EpochFile:
    """``epochFileCheckpoint`` as RocketMQ writes it: the entry count, a CRC32 of the entry
    lines, then one ``epoch-startOffset`` line per epoch this log has had a master for."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = []
        self._load()

    def _load(self) -> None:
        for path in (self.path, self.path + ".bak"):
            try:
                with open(path) as fh:
                    lines = fh.read().splitlines()
                count, crc = int(lines[0]), int(lines[1])
                body = "".join(line + "\n" for line in lines[2:2 + count])
                if crc and zlib.crc32(body.encode()) & 0x7FFFFFFF != crc:
                    continue
                self.entries = [(int(e), int(o)) for e, o in
                                (line.split("-") for line in lines[2:2 + count])]
                return
            except (OSError, ValueError, IndexError):
                continue

    def _save(self) -> None:
        body = "".join(f"{e}-{o}\n" for e, o in self.entries)
        text = f"{len(self.entries)}\n{zlib.crc32(body.encode()) & 0x7FFFFFFF}\n{body}"
        if os.path.exists(self.path):
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path + ".bak")
        write_atomically(self.path, text.encode())

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def append(self, epoch: int, start: int) -> None:
        """A new epoch starts at ``start`` (entries of later epochs are replaced). The epoch
        held already keeps its start: a master that restarts keeps its epoch."""
        if epoch == self.last_epoch:
            return
        self.entries = [(e, o) for e, o in self.entries if e < epoch and o <= start]
        self.entries.append((epoch, start))
        self._save()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        self.entries = sorted(entries)
        self._save()


def consistent_point(mine: list[tuple[int, int]], my_end: int,
                     theirs: list[tuple[int, int]], their_end: int) -> int:
    """Where two logs stop agreeing (RocketMQ's findConsistentPoint): the newest epoch both
    started at the same offset, up to the smaller of the two ends of that epoch. 0 when they
    share none."""
    their_starts = dict(theirs)
    for i in range(len(mine) - 1, -1, -1):
        epoch, start = mine[i]
        if their_starts.get(epoch) != start:
            continue
        j = [e for e, _ in theirs].index(epoch)
        mine_end = mine[i + 1][1] if i + 1 < len(mine) else my_end
        theirs_end = theirs[j + 1][1] if j + 1 < len(theirs) else their_end
        return min(mine_end, theirs_end)
    return 0
