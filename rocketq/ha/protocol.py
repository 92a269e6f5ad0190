"""RocketMQ's HA stream, byte for byte (``HAService``, ``HAConnection``): sans-IO.

Raw TCP, big-endian, no frames of the remoting protocol:

- slave → master: an int64, the slave's max CommitLog offset. The first says where to start
  (0: at the master's last CommitLog file); each later one acknowledges what arrived. The
  master uses the last whole 8 bytes it has read.
- master → slave: ``[phyOffset i64][size i32]`` then ``size`` bytes of the master's CommitLog
  from ``phyOffset``: not aligned to records, never across two files. ``size`` 0 is a
  heartbeat.

So a slave's CommitLog is the master's, byte for byte, and a RocketMQ 4.x slave can follow
a rocketq master (and the other way round).

In controller mode a rocketq slave opens with a hello, ``[-1 i64][brokerId i64]``, so the
master knows which member of its SyncStateSet each link is. No 4.x slave sends it (a report is
never negative), and a master reads a stream without one as 4.x's. On such a link each header
also carries the master's confirmOffset, ``[phyOffset i64][size i32][confirmOffset i64]``
(RocketMQ 5's own HA stream carries it too): the slave dispatches no further, so a consumer
reading from it never sees a message a failover could take back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

REPORT = struct.Struct(">q")
TRANSFER_HEADER = struct.Struct(">qi")
TRANSFER_HEADER_SIZE = TRANSFER_HEADER.size  # 12
CONFIRM_HEADER = struct.Struct(">qiq")  # controller mode: and the confirmOffset


class HAProtocolError(ValueError):
    """Bytes on the HA port that are not RocketMQ's HA stream."""


def encode_report(offset: int) -> bytes:
    """A slave's report: its max CommitLog offset."""
    return REPORT.pack(offset)


#: The first word of a controller-mode slave's hello.
HELLO = -1


def encode_hello(broker_id: int) -> bytes:
    """A controller-mode slave's first bytes: who it is."""
    return REPORT.pack(HELLO) + REPORT.pack(broker_id)


def encode_transfer_header(offset: int, size: int, confirm: int | None = None) -> bytes:
    """The header of ``size`` CommitLog bytes from ``offset`` (0 bytes: a heartbeat); with
    ``confirm``, a controller-mode link's, carrying the master's confirmOffset."""
    if confirm is None:
        return TRANSFER_HEADER.pack(offset, size)
    return CONFIRM_HEADER.pack(offset, size, confirm)


class ReportReader:
    """The master's side: slave reports out of whatever the socket delivers."""

    def __init__(self) -> None:
        self._pending = b""
        self._opening = True
        #: The slave's broker id, if it opened with a hello.
        self.broker_id: int | None = None

    def feed(self, data: bytes) -> int | None:
        """Take bytes; return the newest whole report in them, or None if none completed.
        A negative offset raises HAProtocolError."""
        buf = self._pending + data
        if self._opening:
            if len(buf) < 8 or (REPORT.unpack_from(buf)[0] == HELLO and len(buf) < 16):
                self._pending = buf
                return None
            if REPORT.unpack_from(buf)[0] == HELLO:
                self.broker_id = REPORT.unpack_from(buf, 8)[0]
                buf = buf[16:]
            self._opening = False
        whole = len(buf) - len(buf) % 8
        self._pending = buf[whole:]
        if not whole:
            return None
        offset = REPORT.unpack_from(buf, whole - 8)[0]
        if offset < 0:
            raise HAProtocolError(f"a slave reported a negative offset {offset}")
        return offset


class TransferReader:
    """The slave's side: ``(offset, data)`` chunks out of whatever the socket delivers; on a
    controller-mode link (``confirm``), the master's confirmOffset as each arrives."""

    def __init__(self, max_size: int, confirm: bool = False) -> None:
        #: The largest chunk accepted (a guard against garbage, not RocketMQ's batch size).
        self.max_size = max_size
        self._header = CONFIRM_HEADER if confirm else TRANSFER_HEADER
        #: The master's confirmOffset as last heard (controller mode), else -1.
        self.confirm = -1
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """Take bytes; yield each whole chunk (heartbeats as empty data). Garbage raises
        HAProtocolError."""
        buf = self._buf
        buf += data
        pos = 0
        header = self._header
        head = header.size
        try:
            while len(buf) - pos >= head:
                offset, size, *confirm = header.unpack_from(buf, pos)
                if offset < 0 or size < 0 or size > self.max_size:
                    raise HAProtocolError(
                        f"not an HA transfer header: offset {offset}, size {size}")
                end = pos + head + size
                if len(buf) < end:
                    break
                if confirm:
                    self.confirm = confirm[0]
                yield offset, bytes(buf[pos + head:end])
                pos = end
        finally:
            del buf[:pos]
