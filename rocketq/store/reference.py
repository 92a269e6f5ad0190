"""Readers' holds on a mapped file (RocketMQ's ReferenceResource): a reader holds a file while
it slices it, and a file being deleted refuses new holds and is unmapped only once the last
holder has let go, or after :data:`DESTROY_INTERVAL_FORCIBLY` seconds, so that a read racing
a deletion gets the bytes or a clean "gone", never a slice of an unmapped file."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("rocketq.store")

#: Seconds a deleted file waits for its readers to give back their holds before it is unmapped
#: anyway (RocketMQ's ``destroyMapedFileIntervalForcibly`` default, 120 s): a hold never given
#: back must not keep a deleted file forever.
DESTROY_INTERVAL_FORCIBLY = 120.0


class ReferenceResource:
    """Holds counted under a lock, and the file's availability. Subclasses have ``view``
    (the mapping's memoryview) and ``path``."""

    __slots__ = ("_holds", "_available", "_hold_lock", "_shutdown_at")

    view: memoryview
    path: str

    def __init__(self) -> None:
        self._holds = 0
        self._available = True
        self._hold_lock = threading.Lock()
        #: When :meth:`shutdown` first found holders (monotonic seconds; 0: not yet).
        self._shutdown_at = 0.0

    def hold(self) -> bool:
        """Count a reader in, so the file is not unmapped under it, and return True; False
        once the file is shut down (the reader then treats its bytes as gone). Each hold
        taken is given back with :meth:`release`."""
        with self._hold_lock:
            if not self._available:
                return False
            self._holds += 1
            return True

    def release(self) -> None:
        """Give back a :meth:`hold`. A file shut down meanwhile is unmapped by the next
        close (its queue retries the files it is closing)."""
        with self._hold_lock:
            self._holds -= 1

    def slice(self, pos: int, end: int) -> memoryview | None:
        """A view of bytes ``[pos, end)`` taken under a hold; None once the file is shut
        down."""
        if not self.hold():
            return None
        try:
            return self.view[pos:end]
        finally:
            self.release()

    def shutdown(self) -> bool:
        """Refuse new holds from now on; True when the file may be unmapped: no reader holds
        it, or they have held it :data:`DESTROY_INTERVAL_FORCIBLY` seconds since the first
        call that found them."""
        with self._hold_lock:
            self._available = False
            if self._holds <= 0:
                return True
            now = time.monotonic()
            self._shutdown_at = self._shutdown_at or now
            if now - self._shutdown_at < DESTROY_INTERVAL_FORCIBLY:
                return False
            log.warning("unmapping %s although %d reader(s) still hold it after %.0f s",
                        self.path, self._holds, now - self._shutdown_at)
            return True
