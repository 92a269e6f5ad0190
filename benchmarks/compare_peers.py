"""rocketq next to Redis Streams, NATS JetStream and RabbitMQ: one workload, same machine, same
run, each system through the fastest path of its Python client.

    make bench-deps && .venv/bin/python benchmarks/compare_peers.py [--rounds N] [--json]

Uses whichever of ``redis-server``, ``nats-server`` and ``rabbitmq-server`` are installed (it
installs nothing), each started on 127.0.0.1 with its data in a temporary directory and
durability matched to rocketq's:

========================  ==================================================================
``rocketq``               ASYNC_FLUSH (the page cache, flushed every 500 ms)
``rocketq_sync_flush``    SYNC_FLUSH (group commit; a send is answered after fsync)
``redis``                 AOF with ``appendfsync everysec``
``redis_always``          AOF with ``appendfsync always``
``nats``                  JetStream, file storage
``rabbitmq``              durable queue, persistent messages, publisher confirms
========================  ==================================================================

Cells, 128-byte messages, the same windows for every system:

- ``sync``: one message at a time, each waiting for its acknowledgement (``--sync-count``
  messages or ``--sync-seconds``, whichever ends first), on each system's blocking client where
  it has one (rocketq's and redis-py's synchronous clients), else on asyncio;
- ``pipelined``: ``--window`` (1000) messages in flight. rocketq: 1000 concurrent ``send``
  calls on an ``auto_batch=True`` producer;
  Redis: ``pipeline(transaction=False)`` of 1000 XADDs, executed one after another; NATS:
  ``publish_async`` with at most 1000 acks pending; RabbitMQ: 1000 concurrent confirmed
  publishes;
- ``batch``: batches of 32 with one batch in flight. rocketq: ``send_batch``; Redis: a
  pipeline of 32 XADDs; NATS: 32 ``publish_async`` then their 32 acks; RabbitMQ: 32 publishes
  then their 32 confirms;
- ``consume``: one consumer reads everything back (rocketq ``PullConsumer``, Redis ``XREAD``
  of 1000, a NATS pull subscription fetching 1000, aio-pika with a prefetch of 1000).

``--count`` messages per cell. Redis runs on redis-py's synchronous client with hiredis (the
run fails without hiredis); the other clients run on asyncio with uvloop. Every cell also
reports CPU microseconds per message, of the server (its processes, from /proc, in clock
ticks: small counts read coarsely) and of this client process. ``--rounds N`` runs every
system N times, the order reversed each round; each cell reports the median, with the min and
max, and ratios are taken from the medians. The JSON also names each cell's client path under
``paths``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers_clients import (  # noqa: E402
    new_event_loop,
    run_nats,
    run_rabbitmq,
    run_redis,
    run_rocketq,
    start_nats,
    start_rabbitmq,
    start_redis,
    start_rocketq,
)
from peers_measure import CELLS, CPU_CELLS, LATENCY_CELLS, Args, Run  # noqa: E402

# ---------------------------------------------------------------------------- driver


def stop(proc: subprocess.Popen[Any]) -> None:
    """Stop a server we started, with the processes it started (its own session)."""
    if proc.poll() is not None:
        return
    leader = os.getpgid(proc.pid) == proc.pid

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if leader:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)

    send(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.wait(10)


def epmd_pids() -> set[int]:
    """PIDs of Erlang's port mapper (rabbitmq-server starts one as a daemon)."""
    found = subprocess.run(["pgrep", "-x", "epmd"], capture_output=True, text=True).stdout
    return {int(p) for p in found.split()}


def installed(name: str) -> bool:
    binary = {"redis": "redis-server", "redis_always": "redis-server", "nats": "nats-server",
              "rabbitmq": "rabbitmq-server"}.get(name)
    if binary and shutil.which(binary) is None:
        print(f"{name}: {binary} not installed (make bench-deps), skipped", file=sys.stderr)
        return False
    return True


def measure(name: str, args: Args) -> tuple[dict[str, Any], dict[str, str]]:
    """Start one system, run the workload, stop it: its cells (with ``cpu``) and paths."""
    with tempfile.TemporaryDirectory(prefix=f"compare-{name}-") as data_dir:
        before = epmd_pids() if name == "rabbitmq" else set()
        if name.startswith("rocketq"):
            proc, namesrv = start_rocketq(data_dir, "sync" if name.endswith("flush")
                                          else "async")
        elif name.startswith("redis"):
            proc, port = start_redis(data_dir, "always" if name == "redis_always"
                                     else "everysec")
        elif name == "nats":
            proc, port = start_nats(data_dir)
        else:
            proc, port = start_rabbitmq(data_dir)
        run = Run(proc.pid)
        try:
            t0 = time.monotonic()
            if name.startswith("redis"):  # a blocking client: no event loop
                result = run_redis(port, args, run)
            else:
                work = (run_rocketq(namesrv, args, run) if name.startswith("rocketq")
                        else run_nats(port, args, run) if name == "nats"
                        else run_rabbitmq(port, args, run))
                with asyncio.Runner(loop_factory=new_event_loop) as runner:
                    result = runner.run(work)
            print(f"{name}: done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        finally:
            stop(proc)
            if name == "rabbitmq":
                for pid in epmd_pids() - before:  # the port mapper this run started
                    os.kill(pid, signal.SIGTERM)
    keys = ["sync_msgs_s", "sync_p50_ms", "sync_p99_ms", "pipelined_msgs_s", "batch_msgs_s",
            "consume_msgs_s"]
    cells: dict[str, Any] = {k: round(result[k], 3) for k in keys}
    cells["cpu"] = {cell: {k: round(v, 2) for k, v in run.cpu[cell].items()}
                    for cell in CPU_CELLS}
    return cells, {cell: run.paths[cell] for cell in CPU_CELLS}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every cell across rounds, its min and max, and the rounds themselves."""
    keys = [k for k in rounds[0] if k != "cpu"]
    out: dict[str, Any] = {k: round(statistics.median(r[k] for r in rounds), 3) for k in keys}
    out["cpu"] = {cell: {k: round(statistics.median(r["cpu"][cell][k] for r in rounds), 2)
                         for k in rounds[0]["cpu"][cell]}
                  for cell in rounds[0]["cpu"]}
    out["min"] = {k: min(r[k] for r in rounds) for k in keys}
    out["max"] = {k: max(r[k] for r in rounds) for k in keys}
    out["rounds"] = rounds
    return out


def ratios(systems: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """rocketq / peer for throughput, peer / rocketq for latency: above 1 is rocketq better.
    ``redis_always`` is set against ``rocketq_sync_flush``, the others against ``rocketq``."""
    out = {}
    for peer in ("redis", "redis_always", "nats", "rabbitmq"):
        ours = systems.get("rocketq_sync_flush" if peer == "redis_always" else "rocketq")
        theirs = systems.get(peer)
        if not ours or not theirs:
            continue
        out[peer] = {cell: round(theirs[cell] / ours[cell] if cell in LATENCY_CELLS
                                 else ours[cell] / theirs[cell], 2)
                     for cell in CELLS if ours.get(cell) and theirs.get(cell)}
    return out


def ratio_spread(per_round: dict[str, list[dict[str, Any]]],
                 rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """The min and max across rounds of each round's ratios (rounds that ran both sides)."""
    each = [ratios({name: results[i] for name, results in per_round.items()
                    if i < len(results)}) for i in range(rounds)]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in each:
        for peer, cells in r.items():
            for cell, value in cells.items():
                spread = out.setdefault(peer, {}).setdefault(cell, {"min": value,
                                                                    "max": value})
                spread["min"] = min(spread["min"], value)
                spread["max"] = max(spread["max"], value)
    return out


def table(systems: dict[str, dict[str, Any]], ratio: dict[str, dict[str, float]],
          rounds: int) -> str:
    names = list(systems)
    what = f"median of {rounds} rounds" if rounds > 1 else "1 round"
    lines = [f"{'cell (' + what + ')':<26}" + "".join(f"{n:>20}" for n in names)]
    for cell in CELLS:
        lines.append(f"{cell:<26}" + "".join(
            f"{systems[n].get(cell, float('nan')):>20,.2f}" if cell in LATENCY_CELLS
            else f"{systems[n].get(cell, float('nan')):>20,.0f}" for n in names))
    if rounds > 1:
        lines.append("")
        lines.append("min - max across rounds")
        for cell in CELLS:
            fmt = ".2f" if cell in LATENCY_CELLS else ",.0f"
            spreads = [f"{lo:{fmt}} - {hi:{fmt}}" if (lo := systems[n]["min"].get(cell))
                       is not None and (hi := systems[n]["max"].get(cell)) is not None
                       else "nan" for n in names]
            lines.append(f"{cell:<26}" + "".join(f"{s:>20}" for s in spreads))
    lines.append("")
    lines.append("CPU microseconds per message, server / client (median)")
    for cell in CPU_CELLS:
        lines.append(f"{cell:<26}" + "".join(
            f"{cpu['server_us']:>9.1f} /{cpu['client_us']:>8.1f}"
            if (cpu := systems[n].get("cpu", {}).get(cell)) else f"{'nan':>20}"
            for n in names))
    lines.append("")
    lines.append("rocketq / peer (latency: peer / rocketq; above 1: rocketq better)")
    peers = list(ratio)
    lines.append(f"{'cell':<26}" + "".join(f"{p:>16}" for p in peers))
    for cell in CELLS:
        lines.append(f"{cell:<26}" + "".join(f"{ratio[p].get(cell, float('nan')):>16.2f}"
                                             for p in peers))
    return "\n".join(lines)


def chart(systems: dict[str, dict[str, Any]], path: str, note: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in CELLS if c not in LATENCY_CELLS]
    names = list(systems)
    fig, (ax, lat) = plt.subplots(1, 2, figsize=(12, 4.5),
                                  gridspec_kw={"width_ratios": [4, 1.3]})
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar([c + i * width for c in range(len(cells))],
               [systems[name].get(cell, 0) for cell in cells], width, label=name)
        lat.bar([i], [systems[name].get("sync_p99_ms", 0)], 0.7, label=name)
    ax.set_xticks([c + width * (len(names) - 1) / 2 for c in range(len(cells))],
                  [c.replace("_msgs_s", "") for c in cells])
    ax.set_yscale("log")
    ax.set_ylabel("messages per second (log)")
    ax.set_title("throughput, 128-byte messages")
    ax.legend(fontsize=8)
    lat.set_xticks(range(len(names)), names, rotation=60, fontsize=8)
    lat.set_title("sync send p99, ms (lower is better)")
    fig.suptitle(note, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000, help="messages per cell")
    parser.add_argument("--sync-count", type=int, default=200_000)
    parser.add_argument("--sync-seconds", type=float, default=10.0)
    parser.add_argument("--window", type=int, default=1000, help="pipelined sends in flight")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every system this many times, the order reversed each round")
    parser.add_argument("--systems", default="rocketq,rocketq_sync_flush,redis,redis_always,"
                                             "nats,rabbitmq")
    parser.add_argument("--chart", default=None, help="write the chart to this PNG")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv, namespace=Args())
    if args.rounds < 1 or args.window < 1:
        parser.error("--rounds and --window must be at least 1")
    order = [n for n in (n.strip() for n in args.systems.split(",")) if n and installed(n)]
    per_round: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
    paths: dict[str, dict[str, str]] = {}
    for i in range(args.rounds):
        for name in order if i % 2 == 0 else reversed(order):
            if args.rounds > 1:
                print(f"round {i + 1}/{args.rounds}: {name}", file=sys.stderr)
            cells, paths[name] = measure(name, args)
            per_round[name].append(cells)
    systems = {name: summarize(results) for name, results in per_round.items() if results}
    ratio = ratios(systems)
    if args.chart:
        chart(systems, args.chart, f"measured {time.strftime('%Y-%m-%d')} on "
                                   f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, "
                                   f"median of {args.rounds} round(s)")
    report = table(systems, ratio, args.rounds)
    if args.json:  # the table still goes to the terminal, on standard error
        print(report, file=sys.stderr)
        print(json.dumps({"systems": systems, "ratios": ratio,
                          "ratio_spread": ratio_spread(per_round, args.rounds),
                          "paths": paths}))
    else:
        print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
