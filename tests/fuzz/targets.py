"""Fuzz targets: one function per decoder of bytes from the network or from disk.

Each target takes arbitrary bytes and holds the decoder to its contract: it returns a value,
or raises the one kind of error it documents (``ProtocolError`` for frames,
``MessageFormatError`` for records and batches, ``HAProtocolError`` for the HA stream,
``ValueError`` for fastjson, ``SqlError`` for selectors, ``AclConfigError`` for
``plain_acl.yml``, ``ValueError`` naming the file for ``broker.conf`` and
``ConfigUpdateError`` for a config change). Any other exception escapes the target, and that
is what the fuzzer reports as a crash. Where a second reading of the same bytes exists (a
frame fed in two pieces, an element encoded again, the compiled and pure property hash),
the target also checks the two agree.

The targets run the codec that ``rocketq.protocol.codec`` loaded: the compiled twin, or the
pure one under ``ROCKETQ_NO_EXTENSIONS=1``. With the compiled one loaded, the pure one runs
on the same bytes as well and must agree (:func:`twins`): its Python is what gives the fuzzer
coverage to follow through the codec's loops.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from typing import Any

import orjson

from rocketq.acl.plain import AclConfigError, load_plain_acl
from rocketq.broker.config import load_broker_conf
from rocketq.broker.config_updates import ConfigUpdateError, check_settings
from rocketq.broker.properties import parse_properties
from rocketq.controller import Controller, ControllerConfig, ControllerState
from rocketq.ha.protocol import HAProtocolError, ReportReader, TransferReader
from rocketq.protocol import RemotingCommand, RequestCode, _codec, codec, fastjson
from rocketq.protocol.command import (
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    FrameDecoder,
    ProtocolError,
    decode_frame,
    encode,
)
from rocketq.protocol.message import (
    RECORD_HEADER,
    MessageFormatError,
    decode_offset_msg_id,
    decode_properties,
    decode_records,
    encode_batch,
    encode_properties,
    java_hash,
    property_value,
    record_properties,
    split_batch,
    walk_records,
)
from rocketq.protocol.sql92 import SqlError, compile_selector

Target = Callable[[bytes], None]


# ------------------------------------------------------------------------ the codec twins


def _run(impl: Any, name: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        out = getattr(impl, name)(*args)
        return "value", list(out) if name == "walk" else out
    except impl.CodecError as exc:
        return "error", str(exc)


def twins(name: str, *args: Any) -> tuple[str, Any]:
    """``codec.name(*args)`` of the loaded codec as ``("value", result)`` or ``("error",
    message)``; when that is the compiled twin, the pure one (``_codec``) runs too and must
    give the same. The pure twin is Python, so its branches are what guide the fuzzer even
    when the compiled one, whose C the fuzzer cannot see, is what the rest of rocketq runs."""
    loaded = _run(codec.impl, name, args)
    if codec.impl is not _codec:
        pure = _run(_codec, name, args)
        assert loaded == pure, (name, loaded, pure)
    return loaded


# ------------------------------------------------------------------------ remoting frames


def _fields(cmd: RemotingCommand) -> tuple[Any, ...]:
    return (cmd.code, cmd.opaque, cmd.flag, cmd.version, cmd.language, cmd.remark,
            cmd.ext_fields, bytes(cmd.body), cmd.serialize_type)


def _check_command(cmd: RemotingCommand) -> None:
    """A decoded command can be answered and written out again, and reads back the same:
    whatever the decoder let in, the rest of the server can hand on without failing."""
    again = decode_frame(encode(cmd)[4:])
    assert _fields(again) == _fields(cmd), (_fields(again), _fields(cmd))
    encode(cmd.response(0, {"k": "v"}, b"body", remark="ok"))


def frames(data: bytes) -> None:
    """``FrameDecoder.feed``: the bytes at once, then in two pieces cut where the first byte
    says. Both give the same commands, or both raise ProtocolError."""
    twins("frame_spans", data, 1 << 16)
    try:
        whole: list[RemotingCommand] | None = FrameDecoder(1 << 16).feed(data)
    except ProtocolError:
        whole = None
    cut = data[0] % (len(data) + 1) if data else 0
    decoder = FrameDecoder(1 << 16)
    try:
        pieces: list[RemotingCommand] | None = (decoder.feed(data[:cut])
                                                + decoder.feed(data[cut:]))
    except ProtocolError:
        pieces = None
    assert (whole is None) == (pieces is None), (whole, pieces)
    if whole is not None and pieces is not None:
        assert [_fields(c) for c in whole] == [_fields(c) for c in pieces]
        for cmd in whole:
            _check_command(cmd)


def _header(data: bytes, serialize_type: int) -> None:
    frame = struct.pack(">i", (serialize_type << 24) | len(data)) + data
    try:
        cmd = decode_frame(frame)
    except ProtocolError:
        return
    assert cmd.serialize_type == serialize_type
    _check_command(cmd)


def header_json(data: bytes) -> None:
    """A JSON header (serialize type 0): a command, or ProtocolError."""
    _header(data, SERIALIZE_JSON)


def header_rocketmq(data: bytes) -> None:
    """A ROCKETMQ binary header (serialize type 1): a command, or ProtocolError."""
    _header(data, SERIALIZE_ROCKETMQ)


# ------------------------------------------------------------------------ records, batches


def records(data: bytes) -> None:
    """Records back to back (a pull answer, a CommitLog stretch): the walker, the decoder,
    the consumer's ``pulled`` and ``record_properties`` each return or raise
    MessageFormatError, and the decoder and ``pulled`` agree on what they read."""
    twins("walk", data, 0, len(data), RECORD_HEADER.unpack_from,
          RECORD_HEADER.index("sysflag"), True)
    twins("pulled", data)
    try:
        decoded = decode_records(data, decompress=True)
    except MessageFormatError:
        decoded = None
    try:
        pulled = codec.pulled(data)
    except MessageFormatError:
        pulled = None
    # pulled leaves topics as bytes (the consumer decodes them when asked), so it reads a
    # record with a topic that is not UTF-8, which decode_records refuses.
    if pulled is None:
        assert decoded is None, decoded
    if decoded is not None and pulled is not None:
        assert [r.store_size for r in decoded] == [p[-1] for p in pulled]
        assert [r.topic.encode() for r in decoded] == [bytes(p[0]) for p in pulled]
    try:
        for _record in walk_records(data, check_crc=True):
            pass
    except MessageFormatError:
        pass
    try:
        record_properties(data)
    except MessageFormatError:
        pass


def batch(data: bytes) -> None:
    """A batch body (SEND_BATCH_MESSAGE): ``split_batch`` returns elements inside the body
    or raises MessageFormatError; the elements encoded again split the same way."""
    twins("split_batch", data)
    try:
        elements = split_batch(data)
    except MessageFormatError:
        return
    parts = []
    for flag, body_at, body_len, props_at, props_len in elements:
        assert 0 <= body_at and body_at + body_len <= len(data)
        assert 0 <= props_at and props_at + props_len <= len(data)
        parts.append((flag, data[body_at:body_at + body_len],
                      data[props_at:props_at + props_len]))
    assert split_batch(encode_batch(parts)) == elements


def properties(data: bytes) -> None:
    """A property string (a record's, a send's ``properties`` field): never refused (bad
    segments are skipped, as RocketMQ skips them); what it gives encodes and reads back the
    same, and ``property_value`` finds each value. Also the index hash of the bytes as a key
    (Java's ``String.hashCode``), and the offset message id parser on them as text."""
    twins("decode_properties", data.decode("utf-8", "replace"))
    twins("property_value", data, b"KEYS")
    twins("index_hashes", [data])
    props = decode_properties(data)
    encoded = encode_properties(props).encode()
    assert decode_properties(encoded) == props
    for name, value in list(props.items())[:8]:
        assert property_value(encoded, name.encode()) == value.encode()
    property_value(data, b"KEYS")
    (h,) = codec.index_hashes([data])
    expected = abs(java_hash(data.decode("utf-8", "replace")))
    assert h == (0 if expected == 1 << 31 else expected), (h, expected)
    try:
        decode_offset_msg_id(data.decode("utf-8", "replace"))
    except MessageFormatError:
        pass


# ------------------------------------------------------------------------ HA stream


def ha(data: bytes) -> None:
    """The HA stream, both ways: the master reads slave reports, the slave reads transfer
    headers and CommitLog bytes (4.x's, and controller mode's with the confirmOffset). Fed at
    once and in pieces of the size the first byte says, the readers give the same, or raise
    HAProtocolError."""
    if not data:
        return
    step = data[0] % 17 + 1
    confirm = bool(data[0] & 0x80)
    pieces = [data[i:i + step] for i in range(1, len(data), step)]
    rest = data[1:]

    def reports(chunks: list[bytes]) -> list[int | None] | None:
        reader = ReportReader()
        try:
            out = [reader.feed(c) for c in chunks]
        except HAProtocolError:
            return None
        return [x for x in out if x is not None][-1:] + [reader.broker_id]

    def transfers(chunks: list[bytes]) -> tuple[list[tuple[int, bytes]], int] | None:
        reader = TransferReader(4096, confirm=confirm)
        out = []
        try:
            for c in chunks:
                out.extend(reader.feed(c))
        except HAProtocolError:
            return None
        return out, reader.confirm

    # Reports are read only to the newest whole one per read, so a bad report that the
    # bytes at once skip over is refused when it arrives in a read of its own: compared only
    # when both readings are accepted.
    whole, split = reports([rest]), reports(pieces)
    if whole is not None and split is not None:
        assert whole == split, (whole, split)
    whole_t, split_t = transfers([rest]), transfers(pieces)
    if whole_t is not None and split_t is not None:
        assert whole_t == split_t
    else:
        assert whole_t is None and split_t is None, (whole_t, split_t)


# ------------------------------------------------------------------------ controller

_CONTROLLER_CODES = (
    RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_REGISTER_BROKER,
    RequestCode.CONTROLLER_ELECT_MASTER, RequestCode.CONTROLLER_GET_REPLICA_INFO,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, RequestCode.CONTROLLER_GET_METADATA_INFO,
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
)


class _MemoryEngine:
    """A one-node engine that commits at once, keeping its state as etcd keeps it: written
    out as JSON after every event and read back (so an event whose result cannot be stored
    fails here as it would there)."""

    def __init__(self) -> None:
        self.state = ControllerState()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def is_leader(self) -> bool:
        return True

    def leader(self) -> str | None:
        return "127.0.0.1:9878"

    async def propose(self, event: dict[str, Any]) -> dict[str, Any]:
        result = self.state.apply(event)
        self.state = ControllerState.from_json(orjson.loads(orjson.dumps(self.state.to_json())))
        return result


_loop: asyncio.AbstractEventLoop | None = None


def controller_requests(data: bytes) -> list[RemotingCommand]:
    """The controller requests in ``data``: records separated by ``\\x1e``, each a byte
    choosing the request code, ``name=value`` header lines, ``\\x00``, the body."""
    out = []
    for record in data.split(b"\x1e")[:8]:
        if not record:
            continue
        code = _CONTROLLER_CODES[record[0] % len(_CONTROLLER_CODES)]
        head, _, body = record[1:].partition(b"\x00")
        fields = {}
        for line in head.decode("utf-8", "replace").split("\n"):
            name, _, value = line.partition("=")
            if name:
                fields[name] = value
        out.append(RemotingCommand.request(code, fields, body))
    return out


def controller(data: bytes) -> None:
    """Controller requests (heartbeats, registrations, elections, SyncStateSet changes,
    queries) with fuzzed header fields and bodies, in order, to a fresh controller node: each
    is answered with a response that can be written out, or refused with ProtocolError (a
    bad header field, answered as a bad request). Nothing else may escape a handler."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
    node = Controller(_MemoryEngine(), "127.0.0.1", 0,  # type: ignore[arg-type]
                      ControllerConfig(notifyBrokerRoleChanged=False, masterLeaseMillis=0))
    for cmd in controller_requests(data):
        try:
            answer = node.handle(None, cmd)  # type: ignore[arg-type]
            if asyncio.iscoroutine(answer):
                answer = _loop.run_until_complete(answer)
        except ProtocolError:
            continue
        assert isinstance(answer, RemotingCommand), answer
        encode(answer)
        for name, value in answer.ext_fields.items():
            # Brokers read every number of an answer as a Java long (ids, epochs, offsets).
            if value.lstrip("-").isdigit():
                assert JAVA_LONG_MIN <= int(value) <= JAVA_LONG_MAX, (name, value)


# ------------------------------------------------------------------------ bodies, selectors


def _plain(value: Any) -> bool:
    if isinstance(value, fastjson.ObjectKeyMap):
        return False
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return True


def fastjson_body(data: bytes) -> None:
    """A fastjson body (HeartbeatData, ConsumeStats, ResetOffsetBody): a value, or
    ValueError. A value without object-keyed maps is written and read back the same."""
    try:
        value = fastjson.loads(data)
    except ValueError:
        return
    if _plain(value):
        assert fastjson.loads(fastjson.dumps(value)) == value


_SELECTOR_PROPERTIES: tuple[dict[str, str], ...] = (
    {}, {"a": "1", "b": "x", "region": "eu", "amount": "150", "flag": "true"},
    {"a": "-2.5e3", "b": "", "TAGS": "TagA", "KEYS": "k1 k2", "x": "NaN", "y": "1e400"},
)


def sql92(data: bytes) -> None:
    """A SQL92 selector (a consumer's ``subString``): compiles or raises SqlError; a
    compiled one answers True or False for any properties, never raises."""
    text = data.decode("utf-8", "replace")
    try:
        selector = compile_selector(text)
    except SqlError:
        return
    for props in _SELECTOR_PROPERTIES:
        assert selector(props) in (True, False)


# ------------------------------------------------------------------------ files

_scratch: str | None = None


def _file(name: str, data: bytes) -> str:
    """``data`` written to ``name`` in this process's scratch directory."""
    global _scratch
    if _scratch is None:
        # A fuzzing process (run.py) is given one beside its working corpus: libFuzzer ends
        # the process without Python's exit handlers. In-process, a temporary one, removed
        # at exit.
        _scratch = os.environ.get("ROCKETQ_FUZZ_SCRATCH")
        if _scratch:
            os.makedirs(_scratch, exist_ok=True)
        else:
            _scratch = tempfile.mkdtemp(prefix="rocketq-fuzz-")
            atexit.register(shutil.rmtree, _scratch, True)
    path = os.path.join(_scratch, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def plain_acl(data: bytes) -> None:
    """A ``plain_acl.yml`` on disk: ``load_plain_acl`` returns the accounts or raises
    AclConfigError; the accounts it returns answer address and permission checks."""
    path = _file("plain_acl.yml", data)
    try:
        acl = load_plain_acl(path)
    except AclConfigError as exc:
        assert str(exc)
        return
    for pattern in acl.global_white:
        pattern.matches("127.0.0.1")
        pattern.matches("::1")
    for account in acl.accounts.values():
        account.white_remote_address.matches("10.0.0.1")
        account.perm("topicA", False)
        account.perm("groupA", True)
    acl.first_admin()


def broker_conf(data: bytes) -> None:
    """A ``broker.conf`` on disk and an UPDATE_BROKER_CONFIG body: ``load_broker_conf``
    returns the two configs or raises ValueError naming the file; ``parse_properties`` never
    refuses text; ``check_settings`` returns typed values or raises ConfigUpdateError."""
    path = _file("broker.conf", data)
    try:
        load_broker_conf(path)
    except ValueError as exc:
        assert type(exc) is ValueError and str(exc).startswith(path), repr(exc)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # the broker answers such a body INVALID_PARAMETER before parsing it
    values = parse_properties(text)
    assert all(type(k) is str and type(v) is str for k, v in values.items())
    try:
        check_settings(values)
    except ConfigUpdateError:
        pass
    try:
        load_broker_conf(dict(values))
    except ValueError as exc:
        assert type(exc) is ValueError, repr(exc)


#: Every target by name, as ``python -m tests.fuzz.run NAME`` and ``corpus/NAME`` know it.
TARGETS: dict[str, Target] = {
    "frames": frames,
    "header_json": header_json,
    "header_rocketmq": header_rocketmq,
    "records": records,
    "batch": batch,
    "properties": properties,
    "ha": ha,
    "controller": controller,
    "fastjson": fastjson_body,
    "sql92": sql92,
    "plain_acl": plain_acl,
    "broker_conf": broker_conf,
}
