"""Replication benchmark: pipelined send throughput and latency of a single broker, an
ASYNC_MASTER with one slave and a SYNC_MASTER with one and with two slaves, and how far the
slave trails its master under that load, measured in one run on this machine.

    python benchmarks/ha_bench.py            # a table
    python benchmarks/ha_bench.py --json     # one JSON object

Each setup is ``rocketq standalone [--slaves N] [--sync-master]`` in its own process (brokers
on loopback, ASYNC_FLUSH, data in a temporary directory); the producer runs here on rocketq's
asyncio client with 128-byte messages and ``--window`` sends in flight. The setups take turns
``--repeat`` times and each figure is the median, with the spread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e_bench import BODY, create_topic, percentile  # noqa: E402

from rocketq.aio import Message, Producer  # noqa: E402
from rocketq.cli import spawn_standalone  # noqa: E402
from rocketq.remoting import run  # noqa: E402

SETUPS = {
    "single": [],
    "async_master": ["--slaves", "1"],
    "sync_master": ["--slaves", "1", "--sync-master"],
    "sync_master_2_slaves": ["--slaves", "2", "--sync-master"],
}


async def broker_addrs(namesrv: str, topic: str) -> dict[int, str]:
    from rocketq.client.instance import ClientInstance

    instance = ClientInstance(namesrv)
    try:
        route = await instance.fetch_route(topic)
        assert route is not None
        return {int(k): v for k, v in next(iter(route.broker_addrs.values())).items()}
    finally:
        await instance.remoting.close()


async def max_offset(client, addr: str) -> int:
    from rocketq.protocol import RemotingCommand, RequestCode

    r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                            3)
    return int(json.loads(r.body)["table"]["commitLogMaxOffset"])


async def measure(namesrv: str, count: int, window: int) -> dict[str, float]:
    from rocketq.remoting import RemotingClient

    topic = "BenchHA"
    await create_topic(namesrv, topic, 8)
    addrs = await broker_addrs(namesrv, topic)
    latencies: list[float] = []
    lags: list[int] = []
    done = asyncio.Event()
    client = RemotingClient()

    async def sample_lag() -> None:
        if 1 not in addrs:
            return
        while not done.is_set():
            slave = await max_offset(client, addrs[1])
            master = await max_offset(client, addrs[0])
            lags.append(max(0, master - slave))
            await asyncio.sleep(0.05)

    async with Producer("bench-ha", namesrv=namesrv) as producer:
        for _ in range(100):  # warm up connections and routes
            await producer.send(Message(topic, BODY))
        per_worker = max(1, count // window)

        async def worker() -> None:
            for _ in range(per_worker):
                began = time.perf_counter()
                result = await producer.send(Message(topic, BODY))
                latencies.append((time.perf_counter() - began) * 1000)
                assert result.status.name == "SEND_OK", result.status

        sampler = asyncio.get_running_loop().create_task(sample_lag())
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        elapsed = time.perf_counter() - t0
        done.set()
        await sampler
    await client.close()
    return {"msgs_s": per_worker * window / elapsed,
            "p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 0.99),
            "lag_p99": percentile(lags, 0.99) if lags else 0.0}


def one(setup: str, count: int, window: int) -> dict[str, float]:
    directory = tempfile.mkdtemp(prefix="rocketq-ha-bench-")
    conf = os.path.join(directory, "broker.conf")
    with open(conf, "w") as fh:
        fh.write("maxHashSlotNum=500000\nmaxIndexNum=2000000\n")
    proc, namesrv = spawn_standalone(os.path.join(directory, "data"), flush="async",
                                     config=conf, extra=SETUPS[setup])
    try:
        return run(measure(namesrv, count, window))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()  # never leave a broker behind
            proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--count", type=int, default=20_000, help="messages per setup and run")
    parser.add_argument("--window", type=int, default=256, help="sends in flight")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each setup, in turns")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SETUPS}
    for _ in range(args.repeat):
        for name in SETUPS:
            runs[name].append(one(name, args.count, args.window))

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    out: dict[str, float | int] = {}
    for name in SETUPS:
        out[f"{name}_pipelined_msgs_s"] = round(med(name, "msgs_s"))
        out[f"{name}_p50_ms"] = round(med(name, "p50_ms"), 3)
        out[f"{name}_p99_ms"] = round(med(name, "p99_ms"), 3)
    out["replication_lag_bytes_p99"] = round(max(med(n, "lag_p99") for n in SETUPS
                                                 if n != "single"))
    out["sync_master_vs_single"] = round(out["sync_master_pipelined_msgs_s"]
                                         / out["single_pipelined_msgs_s"], 2)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"rocketq replication, {args.count:,} x 128-byte messages per run, window "
          f"{args.window}, {args.repeat} runs in turns, {os.cpu_count()} cores")
    print(f"{'setup':24} {'msgs/s median [min-max]':>30} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'slave lag p99 (bytes)':>22}")
    for name in SETUPS:
        rates = [r["msgs_s"] for r in runs[name]]
        print(f"{name:24} {med(name, 'msgs_s'):>12,.0f} [{min(rates):,.0f}-{max(rates):,.0f}]"
              f" {med(name, 'p50_ms'):>8.2f} {med(name, 'p99_ms'):>8.2f} "
              f"{med(name, 'lag_p99'):>22,.0f}")
    print(f"SYNC_MASTER / single: {out['sync_master_vs_single']} (target at least 0.7)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
