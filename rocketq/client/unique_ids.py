"""Client message ids (UNIQ_KEY): the id every sent message carries, made as RocketMQ's
MessageClientIDSetter makes them, fast enough to be made for each message of a batch."""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
import time

_HEX2 = [f"{i:02X}" for i in range(256)]


class UniqueIdGenerator:
    """Client message ids (UNIQ_KEY) as RocketMQ's MessageClientIDSetter makes them:
    hex of ip(4) pid(2) random(4) ms-since-month-start(4) counter(2)."""

    def __init__(self) -> None:
        try:
            ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            ip = b"\x7f\x00\x00\x01"
        self._prefix = (ip + struct.pack(">H", os.getpid() & 0xFFFF)
                        + os.urandom(4)).hex().upper()
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._month_start = 0.0
        self._next_month = 0.0
        #: The current millisecond, from and until (seconds since the epoch), and the id up
        #: to it: one tuple, so threads agree.
        self._head = (0.0, 0.0, "")

    def _roll_month(self, now: float) -> None:
        t = time.localtime(now)
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        self._month_start = start
        self._next_month = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))

    def _renew(self, now: float) -> tuple[float, float, str]:
        """The head for the millisecond of ``now``."""
        if now >= self._next_month or now < self._month_start:
            with self._lock:
                if now >= self._next_month or now < self._month_start:
                    self._roll_month(now)
        since = int((now - self._month_start) * 1000)
        start = self._month_start + since / 1000
        head = self._head = (min(start, now), min(start + 0.001, self._next_month),
                             f"{self._prefix}{since & 0xFFFFFFFF:08X}")
        return head

    def next(self) -> str:
        """A new id."""
        now = time.time()
        counter = next(self._counter) & 0xFFFF  # itertools.count is atomic under the GIL
        head = self._head
        # Within the millisecond of the last id, only the counter changes: no arithmetic.
        if not head[0] <= now < head[1]:
            head = self._renew(now)
        return head[2] + _HEX2[counter >> 8] + _HEX2[counter & 0xFF]


unique_ids = UniqueIdGenerator()
