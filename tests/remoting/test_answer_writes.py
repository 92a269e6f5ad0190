"""How a connection's answers reach its transport: the answers to what one read brought, a
single request or a burst, go out in one call before data_received returns (not after the
callbacks the handlers scheduled); the bytes are the frames, in request order."""

from __future__ import annotations

import asyncio
from typing import Any

from rocketq.protocol import ResponseCode
from rocketq.protocol.command import FrameDecoder, RemotingCommand, encode
from rocketq.remoting.connection import Connection


class RecordingTransport:
    """Records every write call; asyncio's transport interface as Connection uses it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, chunks: list[Any]) -> None:
        self.calls.append(("writelines", b"".join(bytes(c) for c in chunks)))

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def close(self) -> None:
        self.closing = True

    def answers(self) -> list[RemotingCommand]:
        return FrameDecoder().feed(b"".join(data for _, data in self.calls))


def echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
    if cmd.code == 2:  # an answer no encoder takes: a handler's bug
        answer = cmd.response(0)
        answer.ext_fields["broken"] = object()  # type: ignore[assignment]
        return answer
    return cmd.response(0, {"n": cmd.ext_fields["n"]})


def request(n: int, code: int = 1) -> RemotingCommand:
    return RemotingCommand.request(code, {"n": str(n)})


def served(handler=echo, **attributes: Any) -> tuple[Connection, RecordingTransport]:
    conn = Connection(handler)
    for name, value in attributes.items():
        setattr(conn, name, value)
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def run(check) -> None:
    async def main() -> None:
        check()
    asyncio.run(main())


def test_a_single_request_is_answered_in_one_call_before_the_read_returns():
    def check() -> None:
        conn, transport = served()
        cmd = request(7)
        conn.data_received(encode(cmd))
        assert len(transport.calls) == 1
        [answer] = transport.answers()
        assert (answer.opaque, answer.flag, answer.ext_fields) == (cmd.opaque, 1, {"n": "7"})
        assert transport.calls[0][1] == encode(cmd.response(0, {"n": "7"}))
    run(check)


def test_a_burst_is_answered_in_one_call_in_request_order():
    def check() -> None:
        conn, transport = served()
        cmds = [request(n) for n in range(5)]
        conn.data_received(b"".join(encode(c) for c in cmds))
        assert len(transport.calls) == 1
        assert [a.ext_fields["n"] for a in transport.answers()] == ["0", "1", "2", "3", "4"]
        assert [a.opaque for a in transport.answers()] == [c.opaque for c in cmds]
    run(check)


def test_an_observed_connection_times_the_answer():
    seen = []

    def check() -> None:
        conn, transport = served(observer=lambda *args: seen.append(args))
        conn.data_received(encode(request(1)))
        assert len(transport.answers()) == 1
    run(check)
    [(code, response_code, seconds, held, is_open)] = seen
    assert (code, response_code, held, is_open) == (1, 0, False, True) and seconds >= 0


def test_an_answer_that_cannot_be_encoded_is_answered_system_error():
    def check() -> None:
        conn, transport = served()
        cmd = request(1, code=2)
        conn.data_received(encode(cmd))
        [answer] = transport.answers()
        assert answer.opaque == cmd.opaque
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "could not be encoded" in (answer.remark or "")
    run(check)


def test_nothing_is_written_to_a_closing_transport():
    def check() -> None:
        conn, transport = served()
        transport.closing = True
        conn.data_received(encode(request(1)))
        conn.data_received(b"".join(encode(request(n)) for n in range(3)))
        assert transport.calls == []
    run(check)


def test_a_frame_split_across_reads_is_answered_once_whole():
    def check() -> None:
        conn, transport = served()
        frame = encode(request(3))
        conn.data_received(frame[:5])
        conn.data_received(frame[5:20])
        assert transport.calls == []
        conn.data_received(frame[20:] + encode(request(4))[:9])
        assert [a.ext_fields["n"] for a in transport.answers()] == ["3"]
    run(check)
