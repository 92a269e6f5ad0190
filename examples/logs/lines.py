"""Log lines as services write them, one format for every writer (this module imports nothing
of rocketq, so the C++ client's script can use it too)::

    2026-11-26T12:00:00.125Z ERROR payments card declined (req r-17)

The time is the event time (UTC, milliseconds), then the level, the service and the text.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

LOG_TOPIC = "AppLogs"
#: Share of ERROR lines per service: payments fails often enough to raise alerts.
ERROR_RATE = {"checkout": 0.1, "payments": 0.3, "search": 0.02, "inventory": 0.2}
TEXTS = {"INFO": ["request served", "cache hit", "user signed in"],
         "WARN": ["slow upstream", "retrying"],
         "ERROR": ["upstream timeout", "card declined", "connection reset"]}


def stamp(ms: int) -> str:
    """``ms`` since the epoch as the lines write it: ISO 8601 in UTC with milliseconds."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + \
        f"{ms % 1000:03d}Z"


def line(ms: int, level: str, service: str, text: str) -> str:
    return f"{stamp(ms)} {level} {service} {text}"


class LogSource:
    """The lines of one service: random levels (its ERROR_RATE of errors), seeded by name."""

    def __init__(self, service: str, seed: int = 7) -> None:
        self.service = service
        self.rnd = random.Random(f"{service}-{seed}")
        self.n = 0

    def next(self, ms: int) -> tuple[str, str]:
        """The next line, stamped ``ms``, and its level."""
        self.n += 1
        r = self.rnd.random()
        level = "ERROR" if r < ERROR_RATE.get(self.service, 0.1) else (
            "WARN" if r < 0.4 else "INFO")
        text = f"{self.rnd.choice(TEXTS[level])} (req r-{self.n})"
        return line(ms, level, self.service, text), level


def live(service: str, seconds: float, rate: float, send: object) -> int:
    """Write ``rate`` lines per second for ``seconds``, stamped with the time they are sent,
    through ``send(line, level)``; returns how many."""
    source = LogSource(service)
    began = time.monotonic()
    n = 0
    while time.monotonic() - began < seconds:
        text, level = source.next(int(time.time() * 1000))
        send(text, level)  # type: ignore[operator]
        n += 1
        time.sleep(max(0.0, began + n / rate - time.monotonic()))
    return n
