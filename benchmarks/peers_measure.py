"""What ``compare_peers.py`` measures with: the cells, the message, a server's port and CPU
time, and the timed loops every system's cells run (one send at a time, a window in flight,
batches)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

from e2e_bench import percentile

CELLS = ["sync_msgs_s", "sync_p99_ms", "pipelined_msgs_s", "batch_msgs_s", "consume_msgs_s"]
LATENCY_CELLS = {"sync_p99_ms", "sync_p50_ms"}
CPU_CELLS = ["sync", "pipelined", "batch", "consume"]
BODY = b"x" * 128
BATCH = 32
CLK_TCK = os.sysconf("SC_CLK_TCK")


def wait_port(port: int, proc: subprocess.Popen[Any], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{proc.args[0]} did not listen on {port}")


class Args:
    count: int
    sync_count: int
    sync_seconds: float
    window: int
    rounds: int


# ---------------------------------------------------------------------------- CPU time


def server_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system, with reaped children's) of a server: the process ``root``,
    every process in the session it leads and every descendant of it."""
    stats: dict[int, tuple[int, int, float]] = {}  # pid: (ppid, session, seconds)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                raw = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = raw[raw.rindex(b")") + 2:].split()  # from field 3, the state
        ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        stats[int(entry.name)] = (int(fields[1]), int(fields[3]), ticks / CLK_TCK)
    members = {pid for pid, (_, session, _) in stats.items() if session == root}
    members.add(root)
    grew = True
    while grew:  # descendants not in the session (rocketq does not start its own)
        more = {pid for pid, (ppid, _, _) in stats.items() if ppid in members} - members
        members |= more
        grew = bool(more)
    return sum(stats[pid][2] for pid in members if pid in stats)


class Run:
    """One system's run: CPU time per cell, and which client path each cell used."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.cpu: dict[str, dict[str, float]] = {}
        self.paths: dict[str, str] = {}
        self._start = (0.0, 0.0)

    def start(self) -> None:
        self._start = (server_cpu_seconds(self.server_pid), time.process_time())

    def stop(self, cell: str, messages: float) -> None:
        server, client = self._start
        server = server_cpu_seconds(self.server_pid) - server
        client = time.process_time() - client
        self.cpu[cell] = {"server_us": server * 1e6 / messages,
                          "client_us": client * 1e6 / messages}


# ---------------------------------------------------------------------------- timing


def sync_stats(latencies: list[float], elapsed: float) -> dict[str, float]:
    return {"sync_msgs_s": len(latencies) / elapsed, "sync_p50_ms": percentile(latencies, 0.5),
            "sync_p99_ms": percentile(latencies, 0.99), "sync_sent": len(latencies)}


async def timed_sync(send: Callable[[], Awaitable[Any]], args: Args) -> dict[str, float]:
    """One send at a time: msgs/s, p50 and p99 in ms."""
    latencies = []
    t_end = time.perf_counter() + args.sync_seconds
    t0 = time.perf_counter()
    for _ in range(args.sync_count):
        s = time.perf_counter()
        await send()
        latencies.append((time.perf_counter() - s) * 1000)
        if s > t_end:
            break
    return sync_stats(latencies, time.perf_counter() - t0)


def timed_sync_blocking(send: Callable[[], Any], args: Args) -> dict[str, float]:
    """``timed_sync`` for a blocking client."""
    latencies = []
    t_end = time.perf_counter() + args.sync_seconds
    t0 = time.perf_counter()
    for _ in range(args.sync_count):
        s = time.perf_counter()
        send()
        latencies.append((time.perf_counter() - s) * 1000)
        if s > t_end:
            break
    return sync_stats(latencies, time.perf_counter() - t0)


async def in_flight(send: Callable[[], Awaitable[Any]], total: int, window: int) -> float:
    """``total`` sends with ``window`` in flight (each lane sends one after another), rounded
    down to a multiple of ``window``; returns sends per second."""
    per_lane = max(1, total // window)

    async def lane() -> None:
        for _ in range(per_lane):
            await send()

    t0 = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(window)))
    return per_lane * window / (time.perf_counter() - t0)


def sent(total: int, window: int) -> int:
    """How many sends ``in_flight(send, total, window)`` makes."""
    return max(1, total // window) * window


def batches(args: Args) -> int:
    """Batches of ``BATCH`` the batch cell sends."""
    return max(1, args.count // BATCH)
