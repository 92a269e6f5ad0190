"""The exclusive lock on a data directory, as RocketMQ's DefaultMessageStore takes on the
``lock`` file of its store root ("Lock failed,MQ already started").

Two processes writing one CommitLog, ConsumeQueue or Raft journal lose messages and corrupt
the files: each takes the other's appends for a crash to recover from. So whatever opens such
a directory first takes a non-blocking ``flock`` on ``<directory>/lock``, before it reads or
writes anything else there, and holds it while it runs; a second opener is refused with
:class:`DirectoryLockedError` (the store's StoreLockedError is one), naming the process that
holds it. It sits below every layer, beside ``errors``: the store and the controller both
lock their directories with it.

``flock`` (not ``fcntl``/``lockf`` record locks) because it belongs to the open file: a second
open in the same process conflicts too, so two stores in one process are refused as well,
and the lock goes with the last descriptor, so a process killed with SIGKILL leaves nothing
held. The descriptor is close-on-exec: child processes started with ``subprocess`` do not
inherit it. The file is never deleted (deleting it would let two openers each lock a
different file); it says who holds it, and is emptied on release.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import time

log = logging.getLogger("rocketq")

LOCK_FILE = "lock"

__all__ = ["LOCK_FILE", "DirectoryLock", "DirectoryLockedError"]


class DirectoryLockedError(OSError):
    """Another process (or another open in this one) holds the directory's ``lock`` file: it
    runs on these files, and a second writer would corrupt them. Nothing was touched.

    ``directory``, ``pid`` (None when the holder wrote none) and ``owner`` (what the holder
    said it is) name the other side; ``what`` is the directory's kind."""

    def __init__(self, directory: str, pid: int | None = None, owner: str = "",
                 what: str = "data directory") -> None:
        self.directory = directory
        self.pid = pid
        self.owner = owner
        who = f"process {pid}" if pid is not None else "another process"
        if owner:
            who += f" ({owner})"
        super().__init__(f"the {what} in {directory} is in use by {who}: stop it first, or "
                         f"give this one another data directory")


class DirectoryLock:
    """An exclusive lock on one directory, held until :meth:`release` (or the process ends).

    >>> lock = DirectoryLock.acquire(root, "broker broker-a")   # doctest: +SKIP
    >>> lock.release()                                           # doctest: +SKIP
    """

    #: The directory's kind, in the refusal's message.
    what = "data directory"
    #: What a refused opener raises.
    error: type[DirectoryLockedError] = DirectoryLockedError

    def __init__(self, directory: str, path: str, fd: int) -> None:
        self.directory = directory
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: str, owner: str = "", *, what: str | None = None
                ) -> DirectoryLock:
        """Lock ``directory`` (made if missing) for this process and write ``owner`` (what
        runs here: a broker's name and address) with this process's id into the lock file.

        Raises :attr:`error` (a DirectoryLockedError) when another process, or another open
        in this one, holds it; ``what`` names the directory's kind in that message."""
        directory = os.path.abspath(directory)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd) if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
            os.close(fd)
            if holder is None:
                raise
            pid, description = holder
            raise cls.error(directory, pid, description, what or cls.what) from None
        except BaseException:
            os.close(fd)
            raise
        lock = cls(directory, path, fd)
        lock.describe(owner)
        return lock

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._fd is not None

    def describe(self, owner: str) -> None:
        """Write who holds the lock now (``owner``, e.g. a broker's name and address once
        known) so that a refused opener can name it. Best effort: a full disk does not stop
        the holder."""
        if self._fd is None:
            return
        text = f"pid={os.getpid()}\nhost={socket.gethostname()}\nowner={owner}\n".encode()
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text, 0)
        except OSError as exc:
            log.warning("cannot write the owner into %s: %s", self.path, exc)

    def release(self) -> None:
        """Empty the file and let the lock go (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the only descriptor releases the flock

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        # An abandoned lock object must not keep the directory locked, nor leak its fd.
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _holder(fd: int, tries: int = 5) -> tuple[int | None, str]:
    """Who holds the lock, as the file says; read again for a little while when it names no
    process yet (the holder has locked, not yet written)."""
    for _ in range(tries - 1):
        pid, owner = _read_holder(fd)
        if pid is not None:
            return pid, owner
        time.sleep(0.02)
    return _read_holder(fd)


def _read_holder(fd: int) -> tuple[int | None, str]:
    """The pid and owner the holder wrote (None and "" for what cannot be read: the holder
    may be between locking and writing)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
    except OSError:
        return None, ""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    pid_text = fields.get("pid", "").strip()
    pid = int(pid_text) if pid_text.isdigit() else None
    owner = fields.get("owner", "").strip()
    host = fields.get("host", "").strip()
    if host and host != socket.gethostname():
        owner = f"{owner} on host {host}" if owner else f"on host {host}"
    return pid, owner
