"""Pops waiting for messages (RocketMQ's PopLongPollingService): a pop that finds nothing
waits, up to its poll time, until the dispatcher says its topic grew, a revival stored one
of its messages again in the pop retry topic, or a FIFO queue of it opened again.

``PopWaiting`` is a part of ``service.PopService``, which sets the event loop it serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class PopWaiting:
    """The pops waiting per topic, and what wakes them: a part of :class:`service.PopService`."""

    loop: asyncio.AbstractEventLoop | None
    _loop_thread: int
    _waiters: dict[str, set[asyncio.Future[None]]]

    async def _wait(self, topic: str, timeout: float) -> None:
        assert self.loop is not None
        fut: asyncio.Future[None] = self.loop.create_future()
        waiters = self._waiters.setdefault(topic, set())
        waiters.add(fut)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(timeout, 1.0)):
                    await fut
        finally:
            waiters.discard(fut)
            if not waiters:
                self._waiters.pop(topic, None)

    def _notify(self, topic: str) -> None:
        for fut in self._waiters.get(topic, ()):
            if not fut.done():
                fut.set_result(None)

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Runs where the store dispatches: wake the pops waiting on ``topic``."""
        if topic.startswith("%RETRY%") and "_" in topic:
            # A revived message: wake pops of its origin topic (group names may hold "_").
            for waiting in list(self._waiters):
                if topic.endswith("_" + waiting):
                    self._wake_soon(waiting)
            return
        if topic in self._waiters:
            self._wake_soon(topic)

    def _wake_soon(self, topic: str) -> None:
        if self.loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._notify(topic)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self.loop.call_soon_threadsafe(self._notify, topic)

    def _wake_all(self) -> None:
        """The service stops: every pop waiting answers with what it has."""
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._waiters.clear()


__all__ = ["PopWaiting"]
