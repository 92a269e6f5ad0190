"""Offset-commit benchmark: what writing each consumer-offset change to the CommitLog (the
offset log, ``offsetLogEnable``) costs an UPDATE_CONSUMER_OFFSET, against the same broker
with the log off.

    python benchmarks/offset_commit_bench.py            # a table
    python benchmarks/offset_commit_bench.py --json     # one JSON object

Setups: ``single`` (one ASYNC_MASTER broker, ASYNC_FLUSH: a commit appends a record and is
answered at once) and ``sync_master`` (a SYNC_MASTER with one slave: a commit that wrote a
record is answered once the slave holds it, as a send would be). Each broker runs in its own
``rocketq`` process (loopback, data in a temporary directory); the commits come from here,
over rocketq's remoting client, each to a new offset (an unchanged offset writes no record):

- ``seq``: ``--count`` commits one after the other: per-commit latency p50 and p99;
- ``pipelined``: ``--count`` commits with ``--window`` in flight: commits per second.

The log-on (A) and log-off (B) runs alternate, ``--repeat`` times each, every run on fresh
processes; each figure is the median of its runs, with the spread (min..max).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e_bench import percentile  # noqa: E402
from ha_bench import spawn, stop_all  # noqa: E402

from rocketq.cli.cluster import free_port  # noqa: E402
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode  # noqa: E402
from rocketq.remoting import RemotingClient, run  # noqa: E402

#: setup: (slaves, the master's brokerRole)
SETUPS = {"single": (0, "ASYNC_MASTER"), "sync_master": (1, "SYNC_MASTER")}
TOPIC, GROUP, QUEUES = "BenchOffsets", "bench-offsets", 8


def commit_request(queue_id: int, offset: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset})


async def measure(addr: str, count: int, window: int) -> dict[str, float]:
    """Sequential latency, then pipelined throughput, of ``count`` commits each."""
    client = RemotingClient()
    try:
        for i in range(200):  # warm up: the connection, the broker's first appends
            await client.invoke(addr, commit_request(i % QUEUES, i + 1), 5)
        next_offset = 1_000
        latencies = []
        for i in range(count):
            began = time.perf_counter()
            r = await client.invoke(addr, commit_request(i % QUEUES, next_offset + i), 5)
            latencies.append(time.perf_counter() - began)
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"commit refused: {r.code} {r.remark}")
        next_offset += count
        todo = iter(range(count))

        async def worker() -> None:
            for i in todo:
                await client.invoke(addr, commit_request(i % QUEUES, next_offset + i), 5)
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        elapsed = time.perf_counter() - began
        return {"p50_ms": percentile(latencies, 0.50) * 1000,
                "p99_ms": percentile(latencies, 0.99) * 1000,
                "seq_per_s": count / sum(latencies), "pipelined_per_s": count / elapsed}
    finally:
        await client.close()


def one(setup: str, log_on: bool, count: int, window: int, namesrv: str,
        directory: str) -> dict[str, float]:
    """One run: the setup's brokers on fresh stores, measured, stopped."""
    slaves, role = SETUPS[setup]
    run_dir = tempfile.mkdtemp(dir=directory)
    procs = []
    try:
        ha_port, port = free_port(), free_port()
        for broker_id in range(slaves + 1):
            conf = os.path.join(run_dir, f"broker-{broker_id}.conf")
            with open(conf, "w") as fh:
                fh.write(f"brokerName=broker-a\nbrokerId={broker_id}\nnamesrvAddr={namesrv}\n"
                         f"listenPort={port if broker_id == 0 else free_port()}\n"
                         f"flushDiskType=ASYNC_FLUSH\noffsetLogEnable={str(log_on).lower()}\n"
                         f"storePathRootDir={os.path.join(run_dir, str(broker_id))}\n"
                         "maxHashSlotNum=50000\nmaxIndexNum=200000\n")
                if broker_id == 0:
                    fh.write(f"brokerRole={role}\nhaListenPort={ha_port}\n")
                else:
                    fh.write(f"brokerRole=SLAVE\nhaListenPort=0\n"
                             f"haMasterAddress=127.0.0.1:{ha_port}\n")
            procs.append(spawn(["broker", "-c", conf], run_dir, f"broker-{broker_id}"))
        if slaves:
            time.sleep(1.0)  # the slave connects to its master's HA port
        return run(measure(f"127.0.0.1:{port}", count, window))
    finally:
        stop_all(procs)


def summary(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per figure: the median of the runs and their spread."""
    return {key: {"median": statistics.median(r[key] for r in runs),
                  "min": min(r[key] for r in runs), "max": max(r[key] for r in runs)}
            for key in runs[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=3000, help="commits per phase")
    parser.add_argument("--window", type=int, default=32, help="commits in flight")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each of A and B")
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    directory = tempfile.mkdtemp(prefix="rocketq-offset-bench-")
    ns_port = free_port()
    procs = [spawn(["namesrv", "--port", str(ns_port)], directory, "namesrv")]
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    try:
        for setup in args.setups.split(","):
            runs: dict[str, list[dict[str, float]]] = {"log_on": [], "log_off": []}
            for _ in range(args.repeat):
                for variant in ("log_on", "log_off"):  # A, B, A, B, ...
                    runs[variant].append(one(setup, variant == "log_on", args.count,
                                             args.window, f"127.0.0.1:{ns_port}", directory))
            results[setup] = {variant: summary(r) for variant, r in runs.items()}
    finally:
        stop_all(procs)
        shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        print(json.dumps({"count": args.count, "window": args.window, "repeat": args.repeat,
                          "cpus": os.cpu_count(), "results": results}))
        return 0
    print(f"UPDATE_CONSUMER_OFFSET, {args.count} commits per phase, window {args.window}, "
          f"{args.repeat} alternating runs each; median (min..max)")
    header = f"{'setup':<12} {'offset log':<10} {'p50 ms':>20} {'p99 ms':>20} " \
             f"{'seq commits/s':>22} {'pipelined commits/s':>24}"
    print(header)
    print("-" * len(header))
    for setup, variants in results.items():
        for variant, figures in variants.items():
            def cell(key: str, fmt: str, width: int, f: dict = figures) -> str:
                v = f[key]
                return (f"{v['median']:{fmt}} ({v['min']:{fmt}}..{v['max']:{fmt}})"
                        ).rjust(width)
            print(f"{setup:<12} {'on' if variant == 'log_on' else 'off':<10} "
                  f"{cell('p50_ms', '.3f', 20)} {cell('p99_ms', '.3f', 20)} "
                  f"{cell('seq_per_s', '.0f', 22)} {cell('pipelined_per_s', '.0f', 24)}")
        on, off = variants["log_on"], variants["log_off"]
        print(f"{'':<12} cost: p50 {on['p50_ms']['median'] - off['p50_ms']['median']:+.3f} ms,"
              f" pipelined {100 * (on['pipelined_per_s']['median'] / off['pipelined_per_s']['median'] - 1):+.1f}%")  # noqa: E501
    return 0


if __name__ == "__main__":
    sys.exit(main())
