"""Remoting commands and their frames (RocketMQ's RemotingCommand, NettyEncoder/Decoder).

Sans-IO, in the manner of h11: :class:`FrameDecoder` takes bytes as they arrive and returns
whole commands; :func:`encode` turns a command into frame bytes. Nothing here touches a socket.

A frame is ``[length i32][type<<24 | header length i32][header][body]`` where ``length``
counts everything after itself. The header is JSON (type 0) or RocketMQ's binary form
(type 1). Lengths from the wire are never trusted: every inconsistency is a ProtocolError,
after which the connection must be closed, as RocketMQ closes it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from itertools import count
from typing import Any

import orjson

from .codec import CodecError, frame_spans
from .codes import CURRENT_VERSION, LanguageCode

MAX_FRAME_SIZE = 16 * 1024 * 1024
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
FLAG_RESPONSE = 1
FLAG_ONEWAY = 2

_LENGTHS = struct.Struct(">ii")
_LENGTH = struct.Struct(">i")
_BINARY_FIXED = struct.Struct(">hbhii")
_LANGUAGE_NAMES = {c.value: c.name for c in LanguageCode}
_LANGUAGE_VALUES = {c.name: c.value for c in LanguageCode}
_opaque_counter = count(1)

#: Java's int and long: the types of RocketMQ's header and record fields. A value outside
#: them is a bad request, whatever Python can hold.
JAVA_INT_MIN, JAVA_INT_MAX = -(1 << 31), (1 << 31) - 1
JAVA_LONG_MIN, JAVA_LONG_MAX = -(1 << 63), (1 << 63) - 1


class ProtocolError(Exception):
    """Bytes that are not a valid remoting frame; the connection should be closed."""


def next_opaque() -> int:
    """A request id, unique within this process (wraps within the int32 range)."""
    return next(_opaque_counter) & 0x7FFFFFFF


def _text(value: Any) -> str:
    """extFields values are strings on the wire; C++ and Go read nothing else."""
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def int_value(fields: dict[str, str], name: str, default: int | None = None) -> int:
    """The integer ``fields[name]`` (an extFields map); ``default`` when absent or empty.
    Raises ProtocolError naming the field when it is absent without a default, or bad."""
    value = fields.get(name)
    if value is None or value == "":
        if default is None:
            raise ProtocolError(f"the request lacks the field {name!r}")
        return default
    try:
        number = int(value)
    except ValueError:
        raise ProtocolError(f"field {name!r} is not an integer: {value!r}") from None
    if not JAVA_LONG_MIN <= number <= JAVA_LONG_MAX:
        # Every integer field is a Java int or long: a bigger one would be kept and then
        # fail wherever it is written out again (offsets, answers).
        raise ProtocolError(f"field {name!r} is outside Java's long range: {value!r}")
    return number


class RemotingCommand:
    """One request or response: a code, string-valued ``ext_fields``, a body."""

    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields",
                 "body", "serialize_type", "body_parts")

    def __init__(self, code: int, ext_fields: Mapping[str, Any] | None = None,
                 body: bytes = b"", *, opaque: int | None = None, flag: int = 0,
                 remark: str | None = None, language: str = "PYTHON",
                 version: int = CURRENT_VERSION, serialize_type: int = SERIALIZE_JSON) -> None:
        self.code = code
        self.ext_fields: dict[str, str] = (
            {k: _text(v) for k, v in ext_fields.items() if v is not None}
            if ext_fields else {})
        self.body = body
        self.opaque = next_opaque() if opaque is None else opaque
        self.flag = flag
        self.remark = remark
        self.language = language
        self.version = version
        self.serialize_type = serialize_type
        #: When set, the body is these buffers back to back (sent without joining them).
        self.body_parts: list[bytes | memoryview] | None = None

    # ------------------------------------------------------------------ constructors
    @classmethod
    def request(cls, code: int, ext_fields: Mapping[str, Any] | None = None,
                body: bytes = b"", *, oneway: bool = False) -> RemotingCommand:
        return cls(code, ext_fields, body, flag=FLAG_ONEWAY if oneway else 0)

    def response(self, code: int = 0, ext_fields: Mapping[str, Any] | None = None,
                 body: bytes = b"", remark: str | None = None) -> RemotingCommand:
        """The response to this request: same opaque, RESPONSE flag, JSON header."""
        return RemotingCommand(code, ext_fields, body, opaque=self.opaque, flag=FLAG_RESPONSE,
                               remark=remark)

    @classmethod
    def request_text(cls, code: int, ext_fields: dict[str, str], body: bytes = b"", *,
                     flag: int = 0) -> RemotingCommand:
        """A request whose extFields are already all strings (the hot paths' shortcut)."""
        return _text_command(code, ext_fields, body, next_opaque(), flag)

    def response_text(self, code: int, ext_fields: dict[str, str]) -> RemotingCommand:
        """A response whose extFields are already all strings (the hot paths' shortcut)."""
        return _text_command(code, ext_fields, b"", self.opaque, FLAG_RESPONSE)

    # ------------------------------------------------------------------ properties
    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def field(self, name: str, default: str | None = None) -> str | None:
        return self.ext_fields.get(name, default)

    def int_field(self, name: str, default: int | None = None) -> int:
        """An integer extField; raises ProtocolError naming the field if absent or bad."""
        return int_value(self.ext_fields, name, default)

    def bool_field(self, name: str, default: bool = False) -> bool:
        """A boolean extField: ``true``/``1`` (any case) is true, as C++ sends ``"1"``."""
        value = self.ext_fields.get(name)
        if value is None or value == "":
            return default
        return value.strip().lower() in ("true", "1")

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return (f"RemotingCommand({kind} code={self.code} opaque={self.opaque} "
                f"flag={self.flag} ext={self.ext_fields} body={len(self.body)}B"
                f"{' remark=' + repr(self.remark) if self.remark else ''})")


#: A command without __init__: the decoders and shortcuts set every slot themselves.
_new_command = RemotingCommand.__new__


def _text_command(code: int, ext_fields: dict[str, str], body: bytes, opaque: int,
                  flag: int) -> RemotingCommand:
    cmd = _new_command(RemotingCommand)
    cmd.code = code
    cmd.ext_fields = ext_fields
    cmd.body = body
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = None
    cmd.language = "PYTHON"
    cmd.version = CURRENT_VERSION
    cmd.serialize_type = SERIALIZE_JSON
    cmd.body_parts = None
    return cmd


# ---------------------------------------------------------------------------- encoding


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == SERIALIZE_ROCKETMQ:
        return _encode_binary_header(cmd)
    header: dict[str, Any] = {
        "code": cmd.code, "extFields": cmd.ext_fields, "flag": cmd.flag,
        "language": cmd.language, "opaque": cmd.opaque, "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    return orjson.dumps(header)


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included."""
    header = encode_header(cmd)
    body = cmd.body
    return b"".join((_LENGTHS.pack(4 + len(header) + len(body),
                                   (cmd.serialize_type << 24) | len(header)), header, body))


def encode_prefix(cmd: RemotingCommand, body_length: int) -> bytes:
    """Length prefix and header of a frame whose body (``body_length`` bytes) is sent
    separately, e.g. with ``sendfile`` or as a list of memoryviews."""
    header = encode_header(cmd)
    return _LENGTHS.pack(4 + len(header) + body_length,
                         (cmd.serialize_type << 24) | len(header)) + header


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    remark = (cmd.remark or "").encode()
    fields = b"".join(
        struct.pack(">h", len(k := key.encode())) + k + struct.pack(">i", len(v := value.encode()))
        + v for key, value in cmd.ext_fields.items())
    language = _LANGUAGE_VALUES.get(cmd.language, LanguageCode.OTHER)
    return (_BINARY_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag)
            + struct.pack(">i", len(remark)) + remark + struct.pack(">i", len(fields)) + fields)


# ---------------------------------------------------------------------------- decoding


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its 4-byte length prefix."""
    frame = bytes(frame)
    if len(frame) < 4:
        raise ProtocolError("frame shorter than its header length field")
    return _decode(frame, 0, len(frame))


def _decode(data: bytes, start: int, end: int) -> RemotingCommand:
    """The command in ``data[start:end]`` (a frame after its length prefix)."""
    type_and_length = _LENGTH.unpack_from(data, start)[0]
    header_end = start + 4 + (type_and_length & 0xFFFFFF)
    if header_end > end:
        raise ProtocolError(f"header length {type_and_length & 0xFFFFFF} exceeds the frame "
                            f"({end - start - 4} bytes)")
    serialize_type = (type_and_length >> 24) & 0xFF
    if serialize_type == SERIALIZE_JSON:
        cmd = _decode_json_header(data[start + 4:header_end])
    elif serialize_type == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(memoryview(data)[start + 4:header_end])
        cmd.serialize_type = SERIALIZE_ROCKETMQ
    else:
        raise ProtocolError(f"unknown serialize type {serialize_type}")
    if header_end < end:
        cmd.body = data[header_end:end]
    return cmd


def _decode_json_header(header: memoryview | bytes) -> RemotingCommand:
    try:
        data = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    if type(data) is not dict:
        raise ProtocolError("header is not a JSON object")
    get = data.get
    cmd = _new_command(RemotingCommand)
    cmd.code = code = get("code")
    cmd.opaque = opaque = get("opaque", 0)
    cmd.flag = flag = get("flag", 0)
    cmd.version = version = get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int
            and type(version) is int):
        for name, value in (("code", code), ("opaque", opaque), ("flag", flag),
                            ("version", version)):
            if type(value) is not int:
                raise ProtocolError(f"header field {name!r} is not an integer")
    ext = get("extFields")
    if ext:
        if type(ext) is not dict:
            raise ProtocolError("extFields is not an object")
        try:
            "".join(ext.values())  # the one check of all values at once: are they str?
        except TypeError:
            # C++ clients send some numbers bare; everything is a string from here on.
            ext = {k: _text(v) for k, v in ext.items() if v is not None}
        cmd.ext_fields = ext
    else:
        cmd.ext_fields = {}
    language = get("language", "OTHER")
    if type(language) is not str:
        language = _LANGUAGE_NAMES.get(language, "OTHER") if type(language) is int \
            else str(language)
    cmd.language = language
    remark = get("remark")
    cmd.remark = remark if type(remark) is str else None
    cmd.body = b""
    cmd.serialize_type = SERIALIZE_JSON
    cmd.body_parts = None
    return cmd


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        p = _BINARY_FIXED.size
        remark_length = int.from_bytes(header[p:p + 4], "big", signed=True)
        p += 4
        if remark_length < 0 or p + remark_length > len(header):
            raise ProtocolError("bad remark length in binary header")
        remark = header[p:p + remark_length].tobytes().decode() if remark_length else None
        p += remark_length
        fields_length = int.from_bytes(header[p:p + 4], "big", signed=True)
        p += 4
        if fields_length < 0 or p + fields_length > len(header):
            raise ProtocolError("bad extFields length in binary header")
        end = p + fields_length
        ext: dict[str, str] = {}
        while p < end:
            key_length = int.from_bytes(header[p:p + 2], "big", signed=True)
            p += 2
            if key_length < 0 or p + key_length > end:
                raise ProtocolError("bad key length in binary header")
            key = header[p:p + key_length].tobytes().decode()
            p += key_length
            value_length = int.from_bytes(header[p:p + 4], "big", signed=True)
            p += 4
            if value_length < 0 or p + value_length > end:
                raise ProtocolError("bad value length in binary header")
            value = header[p:p + value_length].tobytes().decode()
            p += value_length
            if key and value:
                ext[key] = value
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"bad binary header: {exc}") from None
    cmd = RemotingCommand(code, None, opaque=opaque, flag=flag, remark=remark,
                          language=_LANGUAGE_NAMES.get(language, "OTHER"), version=version)
    cmd.ext_fields = ext
    return cmd


class FrameDecoder:
    """Incremental frame decoder: feed bytes, get whole commands.

    A length that is negative, smaller than the header length field, or over ``max_frame``
    raises ProtocolError before any buffering, so a peer cannot make us hold 2 GiB.
    """

    def __init__(self, max_frame: int = MAX_FRAME_SIZE) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[RemotingCommand]:
        if type(data) is not bytes:
            data = bytes(data)
        buf = self._buffer
        if not buf:
            # The usual read of a request-at-a-time peer: one whole frame, decoded at once.
            size = len(data)
            if size >= 8 and _LENGTH.unpack_from(data)[0] == size - 4 <= self.max_frame:
                return [_decode(data, 4, size)]
        else:
            buf += data
            if len(buf) < 4:
                return []
            length = _LENGTH.unpack_from(buf)[0]
            if length < 4 or length > self.max_frame:
                raise ProtocolError(f"frame length {length} outside 4..{self.max_frame}")
            if len(buf) - 4 < length:
                return []  # the frame is still incomplete: no copy until it is whole
            data = bytes(buf)
            buf.clear()
        try:
            spans, pos = frame_spans(data, self.max_frame)
        except CodecError as exc:
            raise ProtocolError(str(exc)) from None
        out = [_decode(data, start, stop) for start, stop in spans]
        end = len(data)
        if pos < end:
            buf += memoryview(data)[pos:]
        return out
