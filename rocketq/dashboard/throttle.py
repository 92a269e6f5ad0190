"""Keeping password checks from swamping the dashboard, and guessing slow.

A login checks a password against an scrypt hash: tens of ms of CPU on purpose, and asked for
by anyone who reaches the login form. Run on the event loop, a burst of logins would stall
every page and, under ``rocketq standalone``, the broker sharing that loop. So each check runs
in a worker thread, at most ``concurrency`` at a time, with at most ``queue`` more waiting
(past that the login is answered 429 at once); and an address that failed ``failures`` times
within ``window`` seconds is answered 429 for ``backoff`` seconds, without a check.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Password checks run at once (each holds a worker thread and about 16 MiB).
CONCURRENCY = 2
#: Checks that may wait for one of those; a login past them is refused at once.
QUEUE = 32
#: Failed logins from one address within WINDOW seconds that start a backoff.
FAILURES = 5
WINDOW = 60.0
#: Seconds an address is refused after FAILURES failures.
BACKOFF = 60.0
#: Addresses whose failures are remembered (the oldest are forgotten past this).
MAX_ADDRESSES = 4096


class Busy(Exception):
    """Too many password checks are waiting: the login is refused without one."""


class LoginThrottle:
    """Runs password checks off the event loop, a few at a time, and remembers recent
    failures per client address."""

    def __init__(self, *, concurrency: int = CONCURRENCY, queue: int = QUEUE,
                 failures: int = FAILURES, window: float = WINDOW,
                 backoff: float = BACKOFF, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.failures = failures
        self.window = window
        self.backoff = backoff
        self.queue = queue
        self.clock = clock
        self._semaphore = asyncio.Semaphore(concurrency)
        self._waiting = 0
        #: address -> times of its recent failures, oldest address first.
        self._failed: OrderedDict[str, list[float]] = OrderedDict()
        #: address -> when its backoff ends.
        self._refused: OrderedDict[str, float] = OrderedDict()

    def refused_for(self, address: str) -> int:
        """Seconds (rounded up) ``address`` is still refused, 0 if it may try."""
        until = self._refused.get(address)
        if until is None:
            return 0
        left = until - self.clock()
        if left <= 0:
            del self._refused[address]
            return 0
        return max(1, math.ceil(left))

    def failed(self, address: str) -> None:
        """A failed login from ``address``; the one that makes ``failures`` within
        ``window`` starts its backoff."""
        now = self.clock()
        recent = [t for t in self._failed.pop(address, []) if now - t < self.window]
        recent.append(now)
        if len(recent) >= self.failures:
            self._refused.pop(address, None)
            self._refused[address] = now + self.backoff
            _trim(self._refused)
        else:
            self._failed[address] = recent
            _trim(self._failed)

    async def check(self, call: Callable[[], T]) -> T:
        """``call()`` (a password check) in a worker thread once a slot is free. The slot is
        held until the thread is done, even if the request is dropped meanwhile, so that no
        more than ``concurrency`` checks ever run.

        Raises:
            Busy: ``queue`` checks are waiting already.
        """
        if self._waiting >= self.queue:
            raise Busy
        self._waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self._waiting -= 1
        task = asyncio.ensure_future(asyncio.to_thread(call))
        task.add_done_callback(self._done)
        return await asyncio.shield(task)

    def _done(self, task: asyncio.Future[object]) -> None:
        self._semaphore.release()
        if not task.cancelled():
            task.exception()  # retrieved here when nobody awaits it any more


def _trim(table: OrderedDict[str, T]) -> None:
    while len(table) > MAX_ADDRESSES:
        table.popitem(last=False)
