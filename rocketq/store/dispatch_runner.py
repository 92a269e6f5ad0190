"""The dispatch runner (RocketMQ's ReputMessageService): when the dispatcher runs, and who
learns what it wrote.

It runs on its own thread, woken by every append, or inline on the thread that appends when
that thread hands it a scheduling callable (an event loop's ``call_soon``: handing the
interpreter lock to the dispatcher thread and back costs more than a small dispatch), and
tells listeners (long polling) which queues grew. The work of a run, records into units and
index entries, is :mod:`.dispatch`'s ``Dispatcher``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

from .commitlog import CommitLog
from .dispatch import Dispatcher, RateLimited

log = logging.getLogger("rocketq.store")


#: A listener learns that ``(topic, queue_id)`` now holds units up to ``max_offset``.
DispatchListener = Callable[[str, int, int], None]
#: Runs a callable soon on the thread that owns it (an event loop's ``call_soon``).
Schedule = Callable[[Callable[[], None]], object]


class DispatchRunner:
    """Runs the Dispatcher (RocketMQ's ReputMessageService): on its own thread, woken by
    every append, and inline for the appends of one thread that hands it a scheduling
    callable (:meth:`dispatch_via`). Tells listeners which queues grew."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self._listeners: list[DispatchListener] = []
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._dispatched = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._schedule: Schedule | None = None
        self._schedule_thread = 0
        self._inline_pending = False
        #: Stretches of the CommitLog at least this long are dispatched on the thread even
        #: for a thread that dispatches inline (see :meth:`on_append`); a batch of 16
        #: messages of 128 bytes is about this long.
        self.thread_bytes = 4096
        #: Where dispatch stops (controller mode's confirmOffset); None: the CommitLog's end.
        self.limit: Callable[[], int] | None = None
        #: The error of the last round if it failed (cleared by one that does not).
        self.failure: BaseException | None = None
        #: Told of each failed round (the store refuses puts when a disk is full).
        self.on_failure: Callable[[BaseException], None] | None = None
        self._errors = RateLimited()

    @property
    def reput_offset(self) -> int:
        """How far the dispatcher has read the CommitLog."""
        return self.dispatcher.reput_offset

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rocketq-store-dispatcher",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, then dispatch what is left."""
        self._stop.set()
        self._event.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.dispatch()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._event.wait(0.5)
            self._event.clear()
            try:
                if self.dispatch():
                    # Like RocketMQ's reput service, pause a moment after a round so records
                    # that arrive meanwhile are dispatched together, not one wake-up each.
                    time.sleep(0.001)
            except Exception as exc:  # keep dispatching later records; say what went wrong
                self._failed(exc)
                self._stop.wait(0.1)

    def _failed(self, exc: Exception) -> None:
        self.failure = exc
        self._errors.log("dispatch failed at CommitLog offset %d: %s", self.reput_offset, exc,
                         exc_info=exc)
        if self.on_failure is not None:
            try:
                self.on_failure(exc)
            except Exception:
                log.exception("dispatch failure callback failed")

    # ------------------------------------------------------------------ waking
    def on_append(self, end: int) -> None:
        """The CommitLog grew to ``end``: dispatch inline if the appending thread gave a
        scheduling callable, otherwise wake the thread.

        With the compiled scan, a stretch of at least :attr:`thread_bytes` goes to the
        thread even then: the scan runs without the interpreter lock, on the core the event
        loop leaves idle, and the handoff costs less than the stretch. Smaller ones (single
        sends) stay inline, where the handoff would cost more than the dispatch."""
        if self._schedule is not None and threading.get_ident() == self._schedule_thread:
            if (self.dispatcher.compiled is not None
                    and end - self.dispatcher.reput_offset >= self.thread_bytes):
                if not self._event.is_set():
                    self._event.set()
                return
            if not self._inline_pending:
                self._inline_pending = True
                self._schedule(self._dispatch_inline)
            return
        if not self._event.is_set():
            self._event.set()

    def dispatch_via(self, schedule: Schedule | None) -> None:
        """Dispatch the appends made on the calling thread through ``schedule`` (a broker's
        ``loop.call_soon``: once per loop iteration, after the callbacks that appended)
        instead of waking the dispatcher thread: handing the interpreter lock to that thread
        and back for every small append costs more than the dispatch itself. Appends from
        other threads still wake the thread; ``None`` sends everything back to it."""
        self._schedule_thread = threading.get_ident() if schedule is not None else 0
        self._schedule = schedule

    def end(self) -> int:
        """How far dispatch may go: the CommitLog's end, or the limit if lower."""
        end = self.commitlog.max_offset
        limit = self.limit
        return end if limit is None else min(end, limit())

    def _dispatch_inline(self) -> None:
        self._inline_pending = False
        if self.dispatcher.reput_offset >= self.end():
            return
        try:
            self.dispatch(wait=0)
        except Exception as exc:
            self._failed(exc)
        if self.dispatcher.reput_offset < self.end():
            self._event.set()  # the thread was busy, or failed: let it finish

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No dispatch runs while inside (the log is being cut under it)."""
        with self._lock:
            yield

    # ------------------------------------------------------------------ dispatching
    def add_listener(self, listener: DispatchListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: DispatchListener) -> None:
        self._listeners.remove(listener)

    def dispatch(self, wait: float | None = None) -> int:
        """Dispatch every record not yet dispatched; return how many. ``wait`` bounds the
        seconds to wait for a busy dispatcher (which is dispatching those records anyway)."""
        total = 0
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            return 0
        try:
            while True:
                end = self.end()
                if self.dispatcher.reput_offset >= end:
                    break
                count, grown = self.dispatcher.run(end)
                total += count
                if grown:
                    self._notify(grown)
                if not count:
                    break
            self.failure = None
        finally:
            self._lock.release()
        if total:
            with self._dispatched:
                self._dispatched.notify_all()
        return total

    def _notify(self, grown: dict[tuple[str, int], int]) -> None:
        for listener in self._listeners:
            for (topic, queue_id), max_offset in grown.items():
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("dispatch listener %r failed", listener)

    def catch_up(self) -> None:
        """Dispatch what the CommitLog holds beyond the ConsumeQueues, unless the dispatcher
        is at it: a read right after a write then sees the write. A failure is the
        dispatcher's to report and retry; the read goes on with what is dispatched."""
        if self.dispatcher.reput_offset < self.end():
            try:
                self.dispatch(wait=0.05)
            except Exception as exc:
                self._failed(exc)

    def wait_dispatched(self, offset: int | None = None, timeout: float = 5.0) -> bool:
        """Block until everything up to ``offset`` (default: the CommitLog end) is dispatched."""
        target = self.end() if offset is None else offset
        deadline = time.monotonic() + timeout
        with self._dispatched:
            while self.reput_offset < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._event.set()
                self._dispatched.wait(min(remaining, 0.05))
        return True
