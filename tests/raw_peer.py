"""A raw client connection for tests: frames go out exactly as given, and what comes back is
sorted into answers (by opaque) and requests the server starts."""

from __future__ import annotations

import asyncio
import contextlib

from rocketq.protocol.command import FrameDecoder, RemotingCommand


class RawPeer:
    """A client connection that writes frames exactly as given and sorts what comes back:
    answers by opaque, and requests the broker starts (which it can answer)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()
        self.answers: dict[int, list[RemotingCommand]] = {}  # by opaque, in arrival order
        self.requests: list[RemotingCommand] = []

    @classmethod
    async def open(cls, addr: str) -> RawPeer:
        host, port = addr.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    def write(self, *frames_: bytes) -> None:
        self.writer.write(b"".join(frames_))  # one write: the broker reads them together

    async def _read(self) -> None:
        data = await self.reader.read(1 << 16)
        if not data:
            raise ConnectionError("the broker closed the connection")
        for cmd in self.decoder.feed(data):
            if cmd.is_response:
                self.answers.setdefault(cmd.opaque, []).append(cmd)
            else:
                self.requests.append(cmd)

    async def answer(self, opaque: int, timeout: float = 5) -> RemotingCommand:
        async with asyncio.timeout(timeout):
            while not self.answers.get(opaque):
                await self._read()
        return self.answers[opaque].pop(0)

    async def request(self, timeout: float = 5) -> RemotingCommand:
        async with asyncio.timeout(timeout):
            while not self.requests:
                await self._read()
        return self.requests.pop(0)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
