"""The process behind ``rocketq.testing.broker()``: a NameServer and a Broker (and the
broker's gRPC port, when asked) on free loopback ports, which goes away with its parent.

``python -m rocketq._testing_server SETTINGS``, SETTINGS a JSON object (``root``, the
directory it owns; ``parent``, the pid it belongs to; ``grpc``; ``conf``, broker.conf keys),
prints one JSON line on stdout once it serves (or one with ``error`` if it cannot), then
runs until:

- its stdin reaches its end: the parent closed it, or died, which closes it too;
- SIGTERM;
- on Linux, its parent dies (``prctl(PR_SET_PDEATHSIG)``), which covers a parent whose
  stdin pipe is held open by a process it forked.

It then stops the servers and deletes ``root``, so a test process killed with SIGKILL
leaves neither a process nor files behind (after a failed start the parent deletes it, once
it has read the log there). It is a module of its own, apart from ``rocketq.testing``,
because that one imports pytest, which would add a tenth of a second to a start that is
mostly imports already.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import threading
from typing import Any

#: What the test broker's store is given unless the caller's ``conf`` says otherwise: small
#: files (no gigabyte preallocated per test run), and a nearly full disk that neither
#: refuses sends nor deletes a test's messages early.
DEFAULT_CONF: dict[str, Any] = {
    "mappedFileSizeCommitLog": 8 << 20,
    "mappedFileSizeConsumeQueue": 60_000,
    "maxHashSlotNum": 4096,
    "maxIndexNum": 16384,
    "diskMaxUsedSpaceRatio": 95,
    "diskSpaceCleanForciblyRatio": 95,
    "diskSpaceWarningLevelRatio": 99,
    "cleanFileForciblyEnable": False,
}

#: How long a stop may take before the process leaves without finishing it.
STOP_DEADLINE = 10.0

#: The signal the kernel sends when the parent dies (PR_SET_PDEATHSIG). Not SIGTERM: a
#: thread of the parent that started this process and then ended sends it too, and only
#: the parent's death (seen in ``getppid``) should stop the broker.
PARENT_DIED = signal.SIGHUP


def _die_with_parent(parent: int) -> bool:
    """Ask Linux for PARENT_DIED when the parent dies; False if it has died already."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(PARENT_DIED), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # not glibc, say: stdin's end still stops it
    return os.getppid() == parent


class _Stop:
    """Why and when to stop: set from a signal handler, the stdin watcher's thread, or
    before the event loop runs at all."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def request(self) -> None:
        if self.requested.is_set():
            return
        self.requested.set()
        # A stop that hangs (a server that does not close) must not keep the process.
        timer = threading.Timer(STOP_DEADLINE, self._leave)
        timer.daemon = True
        timer.start()
        loop, event = self._loop, self._event
        if loop is not None and event is not None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass  # the loop is closed: the servers are stopping already

    def _leave(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        os._exit(1)

    async def wait(self) -> None:
        self._loop, self._event = asyncio.get_running_loop(), asyncio.Event()
        if not self.requested.is_set():
            await self._event.wait()


def _watch(parent: int, stop: _Stop) -> None:
    """Stop on SIGTERM, on the parent's death, and when stdin ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, lambda *_: stop.request())

    def parent_died(*_: object) -> None:
        if os.getppid() != parent:
            stop.request()

    signal.signal(PARENT_DIED, parent_died)

    def read_stdin() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stop.request()

    threading.Thread(target=read_stdin, name="parent-watch", daemon=True).start()


def _conf(settings: dict[str, Any], namesrv: str) -> dict[str, Any]:
    """The broker.conf: DEFAULT_CONF, the caller's keys, then the addresses and the store,
    which are this process's to choose."""
    return {**DEFAULT_CONF, **settings.get("conf", {}),
            "storePathRootDir": os.path.join(settings["root"], "store"),
            "namesrvAddr": namesrv, "brokerIP1": "127.0.0.1", "listenPort": 0,
            "haListenPort": 0, "grpcServerPort": 0}


async def _serve(settings: dict[str, Any], stop: _Stop) -> None:
    from .broker import Broker, load_broker_conf
    from .broker.unknown_keys import unknown_key_warnings
    from .namesrv import NameServer

    ns = NameServer("127.0.0.1", 0)
    await ns.start()
    broker = grpc = None
    try:
        config, store_config = load_broker_conf(_conf(settings, ns.address))
        if config.unknown:
            raise ValueError("; ".join(line.replace(", ignored", "") for line in
                                       unknown_key_warnings(config.unknown, "conf")))
        broker = Broker(config, store_config)
        await broker.start()
        if settings.get("grpc"):
            from .grpc import GrpcServer

            grpc = GrpcServer(broker, "127.0.0.1", 0)
            await grpc.start()
        _say({"namesrv": ns.address, "broker": broker.address,
              "broker_name": config.brokerName, "grpc_port": grpc.port if grpc else None,
              "data_dir": store_config.storePathRootDir, "pid": os.getpid()})
        await stop.wait()
    finally:
        if grpc is not None:
            await grpc.stop(0)
        if broker is not None:
            await broker.stop()
        await ns.stop()


_said: list[bool] = []


def _say(answer: dict[str, Any]) -> None:
    """The one line the parent reads; anything printed later goes to the log (stderr)."""
    _said.append(True)
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    os.dup2(2, 1)


def main(argv: list[str]) -> int:
    settings = json.loads(argv[0])
    parent = int(settings["parent"])
    stop = _Stop(settings["root"])
    _watch(parent, stop)  # first: PARENT_DIED must find its handler
    if not _die_with_parent(parent):
        shutil.rmtree(settings["root"], ignore_errors=True)
        return 0
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        asyncio.run(_serve(settings, stop))
    except Exception as exc:
        if not isinstance(exc, ValueError):  # a bad conf value says all in its message
            logging.getLogger("rocketq.testing").exception("the test broker failed")
        if not _said and not stop.requested.is_set():
            try:
                _say({"error": f"{type(exc).__name__}: {exc}"})
                # The parent quotes the log in its error, then deletes the directory.
                return 1
            except OSError:
                pass
        shutil.rmtree(settings["root"], ignore_errors=True)
        return 1
    shutil.rmtree(settings["root"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
