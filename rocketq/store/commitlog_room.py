"""The room an append needs before it writes anything, so that a full disk refuses it there
and never half-way through: disk blocks at the end of the CommitLog file appends go to
(``MappedFile.reserve``), with room for the blank filler that closes a full file, and
ConsumeQueue files for the units of the queue offsets it assigns (``make_room``), so that the
dispatcher always finds room for a message acknowledged.

``AppendRoom`` is a part of ``commitlog.CommitLog``; its methods run under the CommitLog's
lock, on the state the CommitLog keeps.
"""

from __future__ import annotations

from collections.abc import Callable

from ..protocol import SysFlag
from ..protocol.message import BLANK_MAGIC, SIZE_AND_MAGIC
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .messages import BatchMessage, StoreMessage

#: A file's tail needs room for at least the blank filler's size and magic.
END_FILE_MIN_BLANK_LENGTH = 8
_BLANK = SIZE_AND_MAGIC
#: Half and rollback records get no queue offset.
UNCOUNTED_FLAGS = (SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK)


class AppendRoom:
    """Room for an append, found before it writes: a part of :class:`CommitLog`, over its
    files, its queue offsets and its ``make_room`` (see ``CommitLog.__init__``)."""

    files: MappedFileQueue
    queue_offsets: dict[tuple[str, int], int]
    make_room: Callable[[str, int, int, int], int] | None
    queue_room: dict[tuple[str, int], int]

    def _ensure_room(self, key: tuple[str, int], count: int) -> None:
        """Raise DiskFullError unless ConsumeQueue files exist for ``count`` more units of
        queue ``key`` (``make_room`` creates them if it can). Under the lock."""
        first = self.queue_offsets.get(key, 0)
        end = first + count
        if end > self.queue_room.get(key, 0) and self.make_room is not None:
            self.queue_room[key] = self.make_room(key[0], key[1], first, end)

    def _trailer_room(self, batch: BatchMessage, n: int,
                      trailer: list[tuple[StoreMessage, bytes, int]]) -> None:
        """Before a batch of ``n`` elements is written: room for its trailer's units too
        (DiskFullError otherwise), so the trailer cannot fail once the batch is written."""
        if not trailer or self.make_room is None:
            return
        counts: dict[tuple[str, int], int] = {}
        for m, _part, _size in trailer:
            if m.sysflag & SysFlag.TRANSACTION_MASK not in UNCOUNTED_FLAGS:
                key = (m.topic, m.queue_id)
                counts[key] = counts.get(key, 0) + 1
        mine = (batch.topic, batch.queue_id)
        for key, count in counts.items():
            self._ensure_room(key, count + (n if key == mine else 0))

    def _seal(self, f: MappedFile, free: int, parts: list[bytes], need: int
              ) -> tuple[MappedFile, int, int]:
        """Write ``parts`` and the blank filler that closes ``f``; return the next file, its
        first offset and its free space (see :meth:`_tail` for ``need``)."""
        parts.append(_BLANK.pack(free, BLANK_MAGIC))
        f.append(b"".join(parts))
        f.wrote_position = f.file_size
        parts.clear()
        return self._tail(need)

    def _tail(self, need: int) -> tuple[MappedFile, int, int]:
        """The file appends go to, the CommitLog offset of its end and its free space, with
        the blocks of its next ``need`` bytes and a blank filler reserved
        (``MappedFile.reserve``): an append that finds no room on the disk is refused here,
        before it assigns a queue offset, not half-way through writing."""
        f = self.files.last_for_write()
        end = f.wrote_position + need + END_FILE_MIN_BLANK_LENGTH
        if end > f.reserved_to:
            f.reserve(min(end, f.file_size))
        return f, f.from_offset + f.wrote_position, f.free_space
