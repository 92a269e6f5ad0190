"""Java properties text, read as ``java.util.Properties.load`` reads it: the form of an
UPDATE_BROKER_CONFIG body (RocketMQ's MixAll.string2Properties) and of the file the broker
keeps its runtime config changes in."""

from __future__ import annotations

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Read Java properties text as ``java.util.Properties.load`` does (what RocketMQ's
    MixAll.string2Properties uses for an UPDATE_BROKER_CONFIG body): ``#`` and ``!``
    comments, ``=``, ``:`` or blanks between key and value, backslash escapes and line
    continuations. A later line wins over an earlier one with the same key."""
    values: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # Join continuation lines: an odd number of trailing backslashes continues.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        key, pos = _unescape_until(line, 0, separators=True)
        while pos < len(line) and line[pos] in " \t\f":
            pos += 1
        if pos < len(line) and line[pos] in "=:":
            pos += 1
            while pos < len(line) and line[pos] in " \t\f":
                pos += 1
        value, _ = _unescape_until(line, pos, separators=False)
        values[key] = value
    return values


def _unescape_until(line: str, pos: int, *, separators: bool) -> tuple[str, int]:
    out: list[str] = []
    while pos < len(line):
        ch = line[pos]
        if separators and ch in "=: \t\f":
            break
        if ch == "\\" and pos + 1 < len(line):
            nxt = line[pos + 1]
            if nxt == "u" and pos + 6 <= len(line):
                try:
                    out.append(chr(int(line[pos + 2:pos + 6], 16)))
                    pos += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            pos += 2
            continue
        if ch != "\\":
            out.append(ch)
        pos += 1
    return "".join(out), pos
