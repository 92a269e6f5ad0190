"""fastjson's non-standard JSON, as Java RocketMQ writes and reads it.

Maps keyed by objects (``Map<MessageQueue, X>`` in ConsumeStats, TopicStatsTable,
ResetOffsetBody) come out with the raw object as the key::

    {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":5}}}

Python's json can neither write nor read that, so this module does both; bare numeric keys
(``{0:"addr"}``) are read too.
"""

from __future__ import annotations

from typing import Any

import orjson


class ObjectKeyMap:
    """A map whose keys are JSON objects, as a list of (key, value) pairs."""

    def __init__(self, items: list[tuple[Any, Any]]) -> None:
        self.items = items


def dumps(value: Any) -> bytes:
    """JSON with ObjectKeyMap values written the fastjson way."""
    return _dump(value).encode()


def _dump(value: Any) -> str:
    if isinstance(value, ObjectKeyMap):
        return "{" + ",".join(f"{_dump(k)}:{_dump(v)}" for k, v in value.items) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{orjson.dumps(str(k)).decode()}:{_dump(v)}"
                              for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return orjson.dumps(value).decode()


#: How deep arrays and objects may nest. The parser recurses once or twice per level, so
#: without a bound a body of a few thousand ``[`` would end in RecursionError instead of the
#: ValueError callers expect (orjson stops at 1024; RocketMQ's bodies nest a few levels).
MAX_DEPTH = 200


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"bad fastjson at {self.pos}: {what}")

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n and text[self.pos] in " \t\r\n":
            self.pos += 1

    def value(self) -> Any:
        self.skip()
        if self.pos >= len(self.text):
            raise self.error("unexpected end")
        ch = self.text[self.pos]
        if ch in "{[":
            if self.depth >= MAX_DEPTH:
                raise self.error(f"nested deeper than {MAX_DEPTH} levels")
            self.depth += 1
            value = self.obj() if ch == "{" else self.array()
            self.depth -= 1  # an error ends the whole parse: no need to count back then
            return value
        if ch == '"':
            return self.string()
        return self.scalar()

    def array(self) -> list[Any]:
        self.pos += 1
        out = []
        self.skip()
        if not self.text.startswith("]", self.pos):
            while True:
                out.append(self.value())
                self.skip()
                if self.text.startswith(",", self.pos):
                    self.pos += 1
                elif self.text.startswith("]", self.pos):
                    break
                else:
                    raise self.error("expected , or ]")
        self.pos += 1
        return out

    def string(self) -> str:
        start = self.pos
        self.pos += 1
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch == "\\":
                self.pos += 2
                continue
            if ch == '"':
                self.pos += 1
                return orjson.loads(text[start:self.pos])
            self.pos += 1
        raise self.error("unterminated string")

    def scalar(self) -> Any:
        start = self.pos
        text = self.text
        while self.pos < len(text) and text[self.pos] not in ",:}] \t\r\n":
            self.pos += 1
        token = text[start:self.pos]
        if not token:
            raise self.error("expected a value")
        try:
            return orjson.loads(token)
        except orjson.JSONDecodeError:
            raise self.error(f"bad token {token!r}") from None

    def obj(self) -> Any:
        self.pos += 1
        plain: dict[Any, Any] = {}
        pairs: list[tuple[Any, Any]] = []
        object_keys = False
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return plain
        while True:
            key = self.value()
            self.skip()
            if not self.text.startswith(":", self.pos):
                raise self.error("expected :")
            self.pos += 1
            val = self.value()
            if isinstance(key, dict):
                object_keys = True
            pairs.append((key, val))
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif self.text.startswith("}", self.pos):
                self.pos += 1
                break
            else:
                raise self.error("expected , or }")
        if object_keys:
            return ObjectKeyMap(pairs)
        for key, val in pairs:
            plain[key if isinstance(key, str) else str(key)] = val
        return plain


def loads(data: bytes | str) -> Any:
    """Parse fastjson output; object-keyed maps come back as ObjectKeyMap."""
    text = data.decode() if isinstance(data, (bytes, bytearray, memoryview)) else data
    parser = _Parser(text)
    value = parser.value()
    parser.skip()
    if parser.pos != len(text):
        raise parser.error("trailing data")
    return value
