"""Consumer offsets of clustering consumer groups (RocketMQ's ConsumerOffsetManager),
persisted as ``config/consumerOffset.json`` every few seconds and at shutdown."""

from __future__ import annotations

import os
import threading
from typing import Any

import orjson

from .files import write_atomically


class ConsumerOffsets:
    """``topic@group`` -> queue id -> next offset to consume."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.lock = threading.Lock()
        self.offsets: dict[str, dict[int, int]] = {}
        self._dirty = False
        if os.path.exists(self.path):
            with open(self.path, "rb") as fh:
                data = orjson.loads(fh.read())
            for key, table in (data.get("offsetTable") or {}).items():
                self.offsets[key] = {int(q): int(o) for q, o in table.items()}

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self.lock:
            self.offsets.setdefault(self.key(topic, group), {})[queue_id] = offset
            self._dirty = True

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
        """ConsumerOffsetSerializeWrapper: what GET_ALL_CONSUMER_OFFSET (43) answers."""
        with self.lock:
            return {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())}
                                    for k, v in self.offsets.items()}}

    def put_all(self, table: dict[str, dict[Any, Any]]) -> None:
        """Take a master's offsets over this table (a slave's sync: the master wins)."""
        parsed = {str(k): {int(q): int(o) for q, o in v.items()} for k, v in table.items()}
        with self.lock:
            self.offsets.update(parsed)
            self._dirty = True

    def remove_topic(self, topic: str) -> None:
        with self.lock:
            for key in [k for k in self.offsets if k.split("@", 1)[0] == topic]:
                del self.offsets[key]
                self._dirty = True

    def remove_group(self, group: str) -> None:
        """Forget every offset of ``group`` (a deleted subscription group's removeOffset)."""
        with self.lock:
            for key in [k for k in self.offsets if k.split("@", 1)[1] == group]:
                del self.offsets[key]
                self._dirty = True

    def persist(self, force: bool = False) -> None:
        """Save the table if it changed (or ``force``). A failed write (a full disk) raises
        and leaves the table marked changed, so the next call tries again."""
        with self.lock:
            if not self._dirty and not force:
                return
            data: dict[str, Any] = {"offsetTable": {
                k: {str(q): o for q, o in sorted(v.items())} for k, v in self.offsets.items()}}
            self._dirty = False
        try:
            write_atomically(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
        except BaseException:
            self._dirty = True
            raise
