"""The fuzzer's connections: malformed frames, the sessions that send them and hostile
requests at a server's remoting or HA port, floods of connections, and ``fuzz``, which runs
them all. Used by ``fuzz_servers.py``."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fuzz_requests import HELD, hostile_request

from rocketq.protocol import FLAG_ONEWAY, FrameDecoder, ProtocolError, RequestCode
from rocketq.protocol.command import encode

# ---------------------------------------------------------------------------- malformed frames


def _frame(rng: random.Random, codes: dict[int, Any]) -> bytes:
    cmd = hostile_request(rng, codes)
    try:
        return encode(cmd)
    except (struct.error, UnicodeEncodeError):  # a binary header with a value out of range
        cmd.serialize_type = 0
        return encode(cmd)


def _raw(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) \
        + header + body


def _binary_header(rng: random.Random) -> bytes:
    fixed = struct.pack(">hbhii", RequestCode.GET_BROKER_RUNTIME_INFO, 3, 479, 1, 0)
    choice = rng.randrange(6)
    if choice == 0:
        return fixed + struct.pack(">i", 1 << 20) + b"x"  # remark past the end
    if choice == 1:
        return fixed + struct.pack(">i", -5)
    if choice == 2:
        return fixed + struct.pack(">ii", 0, 100) + b"\x00\x05ab"  # fields past the end
    if choice == 3:
        return fixed + struct.pack(">ii", 0, 8) + b"\x00\x02\xff\xfe" + b"\x00\x00\x00\x00"
    if choice == 4:
        return fixed[:5]
    return fixed + struct.pack(">ii", 0, 9) + b"\x00\x01k" + struct.pack(">i", -1) + b"\x00"


def malformed(rng: random.Random, codes: dict[int, Any]) -> tuple[str, bytes, bool]:
    """One frame (or bytes) that is not a valid request. The flag says whether the server
    must close the connection (a frame it can never complete it may instead wait on)."""
    kind = rng.randrange(14)
    valid = _frame(rng, codes)
    if kind == 0:
        return "random_bytes", rng.randbytes(rng.randint(1, 2048)), False
    if kind == 1:
        return "truncated", valid[:rng.randint(1, len(valid) - 1)], False
    if kind == 2:
        return "length_huge", struct.pack(">i", rng.choice([1 << 30, 0x7FFFFFFF,
                                                            (16 << 20) + 1])) + valid[4:], True
    if kind == 3:
        return "length_negative", struct.pack(">i", rng.choice([-1, -(1 << 31), -4])) \
            + valid[4:], True
    if kind == 4:
        return "length_short", struct.pack(">i", rng.choice([0, 1, 2, 3])) + valid[4:], True
    if kind == 5:
        body = len(valid) - 8
        return "header_past_frame", struct.pack(">ii", len(valid) - 4, body + 50) + valid[8:], \
            True
    if kind == 6:
        return "serialize_type", struct.pack(">iI", len(valid) - 4, (rng.randint(2, 255) << 24)
                                             | struct.unpack(">i", valid[4:8])[0] & 0xFFFFFF) \
            + valid[8:], True
    if kind == 7:
        bad = rng.choice([b"{", b"[1,2]", b"null", b'"x"', b"\xff\xfe", b"{}x",
                          b'{"code": "10"}', b'{"code": 10, "extFields": [1]}',
                          b'{"code": 1e400}', b'{"code": 10, "opaque": 1.5}',
                          b'{"code": 99999999999999999999999}', b'{"code": 10, "flag": null}',
                          b'{"code": 10, "extFields": {"a": {"b": 1}}}',
                          b'{"code": 28, "extFields": {"a": [' + b"1," * 1000 + b'1]}}',
                          b'{"code": 28, "language": {"x": 1}, "remark": 5}',
                          b"[" * 5000 + b"]" * 5000])
        # Some of these are JSON the server can read: it answers them; only the framing
        # matters here, so they count as malformed that need not close.
        return "bad_json_header", _raw(bad), bad[:1] not in b"{" or bad in (
            b"{", b"{}x")
    if kind == 8:
        return "bad_binary_header", _raw(_binary_header(rng), kind=1), True
    if kind == 9:
        return "oversized_frame", struct.pack(">ii", 17 << 20, 200) + rng.randbytes(4096), True
    if kind == 10:
        return "cut_then_close", valid[:max(1, len(valid) // 2)], False
    if kind == 11:
        return "empty_header", _raw(b""), True
    if kind == 12:
        return "zero_frame", struct.pack(">i", 0), True
    return "garbage_after_valid", valid + rng.randbytes(rng.randint(1, 64)), False


# ---------------------------------------------------------------------------- the fuzzing side


@dataclass
class Target:
    name: str
    host: str
    port: int
    kind: str  # "remoting" or "ha"
    codes: dict[int, Any] = field(default_factory=dict)
    server: str = ""  # which process serves it


@dataclass
class Tally:
    frames: int = 0
    valid: int = 0
    malformed: int = 0
    ha: int = 0
    answered: int = 0
    connections: int = 0
    connect_failed: int = 0
    unanswered: Counter = field(default_factory=Counter)
    not_closed: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    bad_answers: int = 0
    floods: int = 0


class Peer(asyncio.Protocol):
    """A fuzzing connection: decodes whatever the server answers and matches opaques."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(64 << 20)
        #: opaque -> request code of the requests not answered yet
        self.waiting: dict[int, int] = {}
        self.answered = 0
        self.bad = 0
        self.raw = 0
        self.closed = asyncio.get_running_loop().create_future()
        self.all_answered = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.raw += len(data)
        if self.decoder is None:
            return
        try:
            commands = self.decoder.feed(data)
        except ProtocolError:
            self.bad += 1
            self.decoder = None  # type: ignore[assignment]
            return
        for cmd in commands:
            if self.waiting.pop(cmd.opaque, None) is not None:
                self.answered += 1
        if not self.waiting:
            self.all_answered.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        self.all_answered.set()


async def _connect(target: Target, tally: Tally) -> Peer | None:
    loop = asyncio.get_running_loop()
    tally.connections += 1
    try:
        async with asyncio.timeout(5):
            _, peer = await loop.create_connection(Peer, target.host, target.port)
    except (OSError, TimeoutError):
        tally.connect_failed += 1
        return None
    return peer


def _close(peer: Peer, rng: random.Random) -> None:
    if peer.transport is None:
        return
    if rng.random() < 0.5:
        # RST instead of FIN: no TIME_WAIT left on this side, and the server sees a reset.
        sock = peer.transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        peer.transport.abort()
    else:
        peer.transport.close()


async def remoting_session(target: Target, rng: random.Random, tally: Tally, budget: int,
                           answer_timeout: float, malformed_share: float) -> None:
    """One connection: a burst of ``budget`` hostile but well-framed requests, every answer
    waited for; then (with chance ``malformed_share``) one malformed frame, after which
    the server must close the connection if the frame can never be whole."""
    peer = await _connect(target, tally)
    if peer is None:
        await asyncio.sleep(0.2)
        return
    assert peer.transport is not None
    try:
        frames = []
        for _ in range(budget):
            cmd = hostile_request(rng, target.codes)
            try:
                data = encode(cmd)
            except (struct.error, UnicodeEncodeError, OverflowError):
                cmd.serialize_type = 0
                data = encode(cmd)
            if not (cmd.flag & (FLAG_ONEWAY | 1)) and cmd.code not in HELD:
                peer.waiting[cmd.opaque] = cmd.code
            frames.append(data)
        expected = bool(peer.waiting)
        peer.transport.writelines(frames)
        tally.frames += len(frames)
        tally.valid += len(frames)
        if expected:
            try:
                async with asyncio.timeout(answer_timeout):
                    await peer.all_answered.wait()
            except TimeoutError:
                pass
            tally.answered += peer.answered
            if peer.waiting:
                closed = " (closed)" if peer.closed.done() else ""
                for code in peer.waiting.values():
                    tally.unanswered[f"{target.name} {code}{closed}"] += 1
        tally.bad_answers += peer.bad
        if peer.closed.done() or rng.random() >= malformed_share:
            return
        name, data, must_close = malformed(rng, target.codes)
        tally.kinds[name] += 1
        tally.frames += 1
        tally.malformed += 1
        if name == "oversized_frame" or len(data) > 65536:
            for i in range(0, len(data), 65536):
                peer.transport.write(data[i:i + 65536])
        else:
            peer.transport.write(data)
        if must_close:
            try:
                async with asyncio.timeout(answer_timeout):
                    await asyncio.shield(peer.closed)
            except TimeoutError:
                tally.not_closed[name] += 1
        else:
            await asyncio.sleep(rng.choice([0, 0, 0.01, 0.05]))
    finally:
        _close(peer, rng)


async def ha_session(target: Target, rng: random.Random, tally: Tally) -> None:
    """One connection to the HA port: garbage, a hello, reports good and bad."""
    peer = await _connect(target, tally)
    if peer is None:
        await asyncio.sleep(0.2)
        return
    peer.decoder = None  # type: ignore[assignment]  # the HA stream is not framed
    assert peer.transport is not None
    try:
        kind = rng.randrange(7)
        tally.kinds[f"ha_{kind}"] += 1
        q = struct.Struct(">q")
        if kind == 0:
            data = rng.randbytes(rng.randint(1, 256))
        elif kind == 1:
            data = q.pack(rng.choice([-5, -(1 << 63), -2]))
        elif kind == 2:
            data = q.pack(-1) + q.pack(rng.choice([-1, 1 << 62, 7])) + q.pack(-7)
        elif kind == 3:
            data = q.pack(1 << 60)  # past the master's end
        elif kind == 4:
            data = q.pack(0) + b"".join(q.pack(rng.randint(0, 4096)) for _ in range(20))
        elif kind == 5:
            data = b"\x00" * rng.randint(1, 7)  # a report never finished
        else:
            data = q.pack(-1) + q.pack(2) + q.pack(0)
        peer.transport.write(data)
        tally.frames += 1
        tally.ha += 1
        await asyncio.sleep(rng.choice([0, 0.01, 0.1, 0.3]))
    finally:
        _close(peer, rng)


async def flood(target: Target, rng: random.Random, tally: Tally, count: int) -> None:
    """``count`` connections at once, held a moment, half of them sending a little."""
    tally.floods += 1
    peers = await asyncio.gather(*(_connect(target, tally) for _ in range(count)))
    for p in peers:
        if p is not None and p.transport is not None and rng.random() < 0.5:
            p.transport.write(rng.randbytes(rng.randint(1, 16)))
    await asyncio.sleep(rng.choice([0, 1.0]))
    for p in peers:
        if p is not None:
            _close(p, rng)


async def fuzz(targets: list[Target], frames: int, seconds: float, workers: int, seed: int,
               tally: Tally, warm: threading.Event, on_warm: Any) -> None:
    """Run ``workers`` fuzzing connections until ``frames`` frames went out or ``seconds``
    passed; call ``on_warm`` once a tenth of either is done."""
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    remoting = [t for t in targets if t.kind == "remoting"]
    ha = [t for t in targets if t.kind == "ha"]

    def done() -> bool:
        return tally.frames >= frames or time.monotonic() >= deadline

    def check_warm() -> None:
        if not warm.is_set() and (tally.frames >= frames / 10
                                  or time.monotonic() - started >= seconds / 10):
            warm.set()
            on_warm()

    async def worker(n: int) -> None:
        rng = random.Random(seed * 1000 + n)
        for _ in range(10_000_000):
            if done():
                return
            check_warm()
            r = rng.random()
            if ha and r < 0.1:
                await ha_session(rng.choice(ha), rng, tally)
            elif r < 0.4:  # a malformed frame, after a request or none
                await remoting_session(rng.choice(remoting), rng, tally, rng.randint(0, 1),
                                       5.0, 1.0)
            else:
                burst = min(rng.choice([1, 10, 50, 200, 400]), max(1, frames - tally.frames))
                await remoting_session(rng.choice(remoting), rng, tally, burst, 5.0, 0.3)

    async def flooder() -> None:
        rng = random.Random(seed)
        for _ in range(20):  # at most 20 floods
            await asyncio.sleep(min(10.0, max(1.0, seconds / 40)))
            if done():
                return
            await flood(rng.choice(remoting + ha), rng, tally, rng.randint(20, 200))

    await asyncio.gather(flooder(), *(worker(n) for n in range(workers)))
