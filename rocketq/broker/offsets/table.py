"""Consumer offsets of clustering consumer groups (RocketMQ's ConsumerOffsetManager),
persisted as ``config/consumerOffset.json`` every few seconds and at shutdown.

With the offset log on (``offsetLogEnable``, broker/offsets/log.py) each change is also a
record in the CommitLog, and this file is a checkpoint: besides RocketMQ's ``offsetTable`` it
keeps ``offsetLogOffset``, how far into the log's queue the table covers, so a start replays
only the records after it.

Locks: ``lock`` guards the table and is never held while the log is written to (an append
may dispatch inline, and the dispatch applies records under ``lock``); changes that write a
record also hold ``order`` from the change to the end of the append, so records are in the
order of the changes. The dispatch never takes ``order``."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from ...protocol import JAVA_INT_MAX, JAVA_LONG_MAX, JAVA_LONG_MIN
from ...protocol.topic import is_system_group
from ..files import write_atomically

#: What the table tells its ``on_change`` hook: an offset committed, or what was forgotten.
COMMIT, REMOVE_GROUP, REMOVE_TOPIC = 0, 1, 2
#: ``on_change(kind, group, topic, queue id, offset, same)``, ``same`` when a commit left
#: the offset as it was; what it returns, ``commit`` returns.
ChangeHook = Callable[[int, str, str, int, int, bool], Any]
#: ``on_copy(table, log offset)``: take a master's table (replication/slave_sync.py); see OffsetLog.
CopyHook = Callable[[dict[str, dict[Any, Any]], int], int]
#: The checkpoint's key for the offset log's queue offset it covers (not RocketMQ's: extra
#: keys are ignored by its readers).
LOG_OFFSET_KEY = "offsetLogOffset"


class ConsumerOffsets:
    """``topic@group`` -> queue id -> next offset to consume."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.lock = threading.Lock()
        #: Held by a change that writes a record, from the change to the end of the append.
        self.order = threading.Lock()
        self.offsets: dict[str, dict[int, int]] = {}
        self._dirty = False
        #: Told of every change, under ``order`` (not ``lock``), so changes reach it in the
        #: order they are made: the offset log appends a record. None: the log is off.
        self.on_change: ChangeHook | None = None
        #: Takes a master's copy when the offset log is on (OffsetLog.take_copy).
        self.on_copy: CopyHook | None = None
        #: The offset log's queue offset up to which this table holds every record.
        self.log_offset = 0
        checkpoint = self.read_checkpoint()
        if checkpoint is not None:
            self.offsets, self.log_offset = checkpoint

    def read_checkpoint(self) -> tuple[dict[str, dict[int, int]], int] | None:
        """The table and log offset of ``consumerOffset.json``, or None when there is none."""
        if not os.path.exists(self.path):
            return None
        with open(self.path, "rb") as fh:
            data = orjson.loads(fh.read())
        table = {str(key): {int(q): int(o) for q, o in queues.items()}
                 for key, queues in (data.get("offsetTable") or {}).items()}
        return table, int(data.get(LOG_OFFSET_KEY) or 0)

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    @property
    def logged(self) -> bool:
        """Whether changes go to the offset log."""
        return self.on_change is not None

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> Any:
        """Set the group's offset in the queue; returns what ``on_change`` returned (the
        offset log's append, or what a commit of the offset already stored waits for; a
        consumer commits its position every few seconds). Raises ValueError, changing
        nothing, for a queue id or offset a record cannot hold (see :func:`check_commit`)."""
        check_commit(queue_id, offset)
        hook = self.on_change
        if hook is None or not logged_group(group):
            with self.lock:
                table = self.offsets.setdefault(self.key(topic, group), {})
                if table.get(queue_id) != offset:
                    table[queue_id] = offset
                    self._dirty = True
            return None
        with self.order:
            with self.lock:
                table = self.offsets.setdefault(self.key(topic, group), {})
                same = table.get(queue_id) == offset
                if not same:
                    table[queue_id] = offset
                    self._dirty = True
            # Outside ``lock``: the append may dispatch inline, which applies under it.
            return hook(COMMIT, group, topic, queue_id, offset, same)

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        table = self.offsets.get(self.key(topic, group))
        return None if table is None else table.get(queue_id)

    def groups_of_topic(self, topic: str) -> list[str]:
        return sorted(k.split("@", 1)[1] for k in self.offsets if k.split("@", 1)[0] == topic)

    def topics_of_group(self, group: str) -> list[str]:
        return sorted(k.split("@", 1)[0] for k in self.offsets if k.split("@", 1)[1] == group)

    def table(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offsets.get(self.key(topic, group), {}))

    def committed(self) -> list[tuple[str, str, int, int]]:
        """``(group, topic, queue id, offset)`` of every committed offset: what the store's
        retention reads to name the groups that lose messages when files go unread."""
        with self.lock:
            out = []
            for key, table in self.offsets.items():
                topic, _, group = key.partition("@")
                out.extend((group, topic, q, o) for q, o in table.items())
            return out

    def wrapper(self) -> dict[str, Any]:
        """ConsumerOffsetSerializeWrapper: what GET_ALL_CONSUMER_OFFSET (43) answers. With the
        offset log on it also says how far the log's records are in it: a slave then leaves
        the offsets it has to the log (replication/slave_sync.py)."""
        with self.lock:
            body: dict[str, Any] = {"offsetTable": {
                k: {str(q): o for q, o in sorted(v.items())} for k, v in self.offsets.items()}}
            if self.on_change is not None:
                body[LOG_OFFSET_KEY] = self.log_offset
            return body

    def put_all(self, table: dict[str, dict[Any, Any]]) -> None:
        """Take a master's offsets over this table (a slave's sync: the master wins)."""
        parsed = {str(k): {int(q): int(o) for q, o in v.items()} for k, v in table.items()}
        with self.lock:
            self.offsets.update(parsed)
            self._dirty = True

    def take_copy(self, table: dict[str, dict[Any, Any]], log_offset: int) -> int:
        """Take a master's table that covers its offset log up to ``log_offset`` (a slave's
        sync, both ends keeping the log): the offset log decides how (``on_copy``); without
        it, only what this table has none of is taken."""
        hook = self.on_copy
        return hook(table, log_offset) if hook is not None else self.fill_missing(table)

    def replace_all(self, table: dict[str, dict[Any, Any]],
                    changes: Iterable[tuple[int, str, str, int, int]] = (),
                    log_offset: int | None = None, keep_unlogged: bool = False) -> int:
        """Make ``table`` this table (what it lacks is forgotten), then apply ``changes`` as
        :meth:`apply_logged` does; ``log_offset``, when given, is the new mark.
        ``keep_unlogged``: the broker's own groups, which the log leaves out, keep their
        offsets here. Returns how many changes were applied."""
        parsed = {str(k): {int(q): int(o) for q, o in v.items()} for k, v in table.items()
                  if not keep_unlogged or logged_group(str(k).partition("@")[2])}
        with self.lock:
            if keep_unlogged:
                parsed.update((k, dict(v)) for k, v in self.offsets.items()
                              if not logged_group(k.partition("@")[2]))
            self.offsets.clear()
            self.offsets.update(parsed)
            applied = self._apply(changes)
            if log_offset is not None:
                self.log_offset = log_offset
            self._dirty = True
        return applied

    def fill_missing(self, table: dict[str, dict[Any, Any]]) -> int:
        """Take a master's offsets only where this table has none (a slave whose offsets
        come from the offset log: the copy may be older than what the log brought, so it
        only fills in what the log cannot, such as offsets committed before this slave's
        log begins); the broker's own groups, which the log leaves out, are taken whole.
        Returns how many were taken."""
        taken = 0
        with self.lock:
            for key, queues in table.items():
                mine = self.offsets.setdefault(str(key), {})
                every = not logged_group(str(key).partition("@")[2])
                for q, o in queues.items():
                    if (every or int(q) not in mine) and mine.get(int(q)) != int(o):
                        mine[int(q)] = int(o)
                        taken += 1
                if not mine:
                    del self.offsets[str(key)]
            if taken:
                self._dirty = True
        return taken

    def apply_logged(self, changes: Iterable[tuple[int, str, str, int, int]],
                     log_offset: int) -> int:
        """Apply offset-log records in log order (the latest per group, topic and queue
        wins) without logging them again, and note that the table now covers the log up to
        ``log_offset``. Returns how many were applied."""
        with self.lock:
            applied = self._apply(changes)
            if applied or log_offset != self.log_offset:
                self._dirty = True
            self.log_offset = log_offset
        return applied

    def _apply(self, changes: Iterable[tuple[int, str, str, int, int]]) -> int:
        applied = 0
        for kind, group, topic, queue_id, offset in changes:
            if kind == COMMIT:
                self.offsets.setdefault(self.key(topic, group), {})[queue_id] = offset
            elif kind == REMOVE_GROUP:
                self._remove(lambda k, g=group: k.split("@", 1)[1] == g)
            elif kind == REMOVE_TOPIC:
                self._remove(lambda k, t=topic: k.split("@", 1)[0] == t)
            applied += 1
        if applied:
            self._dirty = True
        return applied

    def _remove(self, doomed: Callable[[str], bool]) -> bool:
        keys = [k for k in self.offsets if doomed(k)]
        for key in keys:
            del self.offsets[key]
        return bool(keys)

    def remove_topic(self, topic: str) -> None:
        self._forget(REMOVE_TOPIC, "", topic, lambda k: k.split("@", 1)[0] == topic)

    def remove_group(self, group: str) -> None:
        """Forget every offset of ``group`` (a deleted subscription group's removeOffset)."""
        self._forget(REMOVE_GROUP, group, "", lambda k: k.split("@", 1)[1] == group)

    def _forget(self, kind: int, group: str, topic: str, doomed: Callable[[str], bool]) -> None:
        with self.order:
            with self.lock:
                removed = self._remove(doomed)
                if removed:
                    self._dirty = True
            hook = self.on_change
            if removed and hook is not None:  # outside ``lock``, as in ``commit``
                hook(kind, group, topic, 0, 0, False)

    def persist(self, force: bool = False) -> None:
        """Save the table if it changed (or ``force``). A failed write (a full disk) raises
        and leaves the table marked changed, so the next call tries again."""
        with self.lock:
            if not self._dirty and not force:
                return
            data: dict[str, Any] = {"offsetTable": {
                k: {str(q): o for q, o in sorted(v.items())} for k, v in self.offsets.items()},
                LOG_OFFSET_KEY: self.log_offset}
            self._dirty = False
        try:
            write_atomically(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
        except BaseException:
            self._dirty = True
            raise



def check_commit(queue_id: int, offset: int) -> None:
    """Raise ValueError unless the queue id is a Java int of at least 0 and the offset a
    Java long, as a RocketMQ request header carries them (and an offset record holds)."""
    if not 0 <= queue_id <= JAVA_INT_MAX:
        raise ValueError(f"queueId {queue_id} is out of range (0 to {JAVA_INT_MAX})")
    if not JAVA_LONG_MIN <= offset <= JAVA_LONG_MAX:
        raise ValueError(f"commitOffset {offset} is not a 64-bit integer")


def logged_group(group: str) -> bool:
    """Whether the offset log carries the group's commits: not for the broker's own groups
    (``CID_RMQ_SYS_``: the POP revive position, rebuilt by replaying the revive log and
    committed at every revive round), which the metadata copy still brings."""
    return not is_system_group(group)
