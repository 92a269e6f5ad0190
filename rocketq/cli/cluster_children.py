"""The children of ``rocketq cluster``: each a ``rocketq <command>`` process, started and
awaited until it listens (:func:`spawn`), reported when it exits (:func:`exit_text`), and,
for a broker, started again after an exit with a back-off that doubles while it keeps exiting
soon after its start (:meth:`Child.restart_delay`), until the cluster stops
(:func:`supervise`)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import dataclass
from typing import Protocol

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]
#: A broker that exits is started again after RESTART_FIRST seconds (longer than a failover
#: takes: a master started again sooner could be elected again), doubling to
#: RESTART_MOST while each run lasts under STEADY seconds; after RESTART_LIMIT such short
#: runs in a row it is left down.
RESTART_FIRST = 5.0
RESTART_MOST = 30.0
STEADY = 60.0
RESTART_LIMIT = 5


async def spawn(args: list[str], log_path: str, timeout: float = 30
                 ) -> asyncio.subprocess.Process:
    """Start ``rocketq <args>`` and wait for its "listening" line; its log goes to a file."""
    with open(log_path, "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *ROCKETQ, *args, stdout=asyncio.subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(timeout):
            while True:
                line = await proc.stdout.readline()
                if not line:
                    code = await proc.wait()
                    raise OSError(f"rocketq {args[0]} {exit_text(code)}; see {log_path}")
                if b"listening" in line:
                    return proc
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise


def exit_text(code: int) -> str:
    """How a child process ended: its exit status, or the signal that killed it."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


@dataclass
class Child:
    """A child process of the cluster and what it is."""

    label: str  # "NameServer", "controller", "broker-a replica 0"
    proc: asyncio.subprocess.Process
    #: Whether the cluster cannot go on without it (the NameServer, the controller).
    essential: bool = False
    port: int | None = None
    #: How to start it again (``rocketq`` arguments, its log): set for brokers.
    argv: list[str] | None = None
    log_path: str = ""
    #: When it was last started (the loop's clock), and its short runs in a row.
    started: float = 0.0
    short_runs: int = 0

    def describe(self) -> str:
        return f"{self.label} (pid {self.proc.pid})"

    def restart_delay(self, now: float) -> float | None:
        """Seconds to wait before starting it again after an exit at ``now``, or None when
        it is to stay down (not a broker, or RESTART_LIMIT short runs in a row)."""
        if self.argv is None:
            return None
        self.short_runs = self.short_runs + 1 if now - self.started < STEADY else 1
        if self.short_runs > RESTART_LIMIT:
            return None
        return min(RESTART_FIRST * 2 ** (self.short_runs - 1), RESTART_MOST)


class _Watch(Protocol):
    """What supervision needs of the masters' watch (``cluster_masters.MasterWatch``)."""

    async def watch(self) -> None: ...


async def _restart(child: Child, delay: float) -> Child:
    """Start ``child`` again after ``delay`` seconds, with the arguments it had."""
    assert child.argv is not None
    await asyncio.sleep(delay)
    child.started = asyncio.get_running_loop().time()  # a failed start is a short run too
    child.proc = await spawn(child.argv, child.log_path)
    print(f"{child.label} restarted: 127.0.0.1:{child.port} (pid {child.proc.pid})",
          flush=True)
    return child


async def supervise(children: list[Child], watch: _Watch, stop: asyncio.Event,
                     restart: bool = True) -> None:
    """Until ``stop`` is set or an essential child exits: report each child that exits (a
    broker's exit is what a failover follows) and each change of master, and start an
    exited broker again (``restart``; see ``Child.restart_delay``)."""
    loop = asyncio.get_running_loop()
    waits = {asyncio.ensure_future(child.proc.wait()): child for child in children}
    restarts: dict[asyncio.Future[Child], Child] = {}
    stopping = asyncio.ensure_future(stop.wait())
    watching = asyncio.ensure_future(watch.watch())

    def again(child: Child, why: str) -> None:
        delay = child.restart_delay(loop.time()) if restart else None
        if delay is None:
            print(f"{child.label} is left down" + (
                f" ({why}; it exited {RESTART_LIMIT} times within {STEADY:g} s of its start; "
                f"see {child.log_path})" if restart and child.argv else
                " (--no-restart)" if child.argv else ""), flush=True)
            return
        print(f"restarting {child.label} in {delay:g} s", flush=True)
        restarts[asyncio.ensure_future(_restart(child, delay))] = child

    try:
        while True:
            done, _ = await asyncio.wait([stopping, *waits, *restarts],
                                         return_when=asyncio.FIRST_COMPLETED)
            if stopping in done:
                return
            for task in done:
                if task in restarts:
                    child = restarts.pop(task)
                    if task.exception() is not None:
                        print(f"{child.label} did not start again: {task.exception()}",
                              flush=True)
                        again(child, "it did not start")
                    else:
                        waits[asyncio.ensure_future(child.proc.wait())] = child
                    continue
                child = waits.pop(task)
                print(f"{child.describe()} {exit_text(task.result())}"
                      + ("; stopping the cluster" if child.essential else ""), flush=True)
                if child.essential:
                    return
                again(child, "it keeps exiting")
    finally:
        for task in (stopping, watching, *waits, *restarts):
            task.cancel()
        await asyncio.gather(stopping, watching, *waits, *restarts, return_exceptions=True)
