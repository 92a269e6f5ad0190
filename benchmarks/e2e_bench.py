"""End-to-end benchmark: rocketq's client against ``rocketq standalone`` over loopback.

    python benchmarks/e2e_bench.py            # a table
    python benchmarks/e2e_bench.py --json     # one JSON object

The broker runs in its own process (ASYNC_FLUSH, data in a temporary directory); producers and
consumers run here on rocketq's asyncio client, with 128-byte messages. Pipelined sends use the
producer's ``auto_batch`` (``async_send_msgs_s``), and then a plain producer
(``async_send_no_auto_batch_msgs_s``). With ``ROCKETQ_NO_EXTENSIONS=1`` in the environment,
client and broker both run on the pure-Python codec.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

from rocketq.aio import ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from rocketq.remoting import run

BODY = os.urandom(128)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: str) -> tuple[subprocess.Popen[str], str]:
    """``rocketq standalone`` with ASYNC_FLUSH in a child process; it and its NameServer."""
    from rocketq.cli import spawn_standalone

    return spawn_standalone(data_dir, flush="async")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def create_topic(namesrv: str, topic: str, queues: int) -> None:
    from rocketq.client.instance import ClientInstance
    from rocketq.protocol.codes import RequestCode
    from rocketq.protocol.command import RemotingCommand

    instance = ClientInstance(namesrv)
    try:
        route = await instance.fetch_route("TBW102")
        assert route is not None
        for addrs in route.broker_addrs.values():
            await instance.remoting.invoke(addrs[0], RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": queues,
                                                      "writeQueueNums": queues, "perm": 6}))
        for _ in range(100):
            if await instance.fetch_route(topic):
                return
            await asyncio.sleep(0.05)
    finally:
        await instance.remoting.close()


async def bench_sync(namesrv: str, topic: str, count: int) -> dict[str, float]:
    async with Producer("bench-sync", namesrv=namesrv) as producer:
        for _ in range(200):  # warm up connections and routes
            await producer.send(Message(topic, BODY))
        latencies = []
        t0 = time.perf_counter()
        for _ in range(count):
            began = time.perf_counter()
            await producer.send(Message(topic, BODY))
            latencies.append((time.perf_counter() - began) * 1000)
        elapsed = time.perf_counter() - t0
    return {"msgs_s": count / elapsed, "p50_ms": statistics.median(latencies),
            "p99_ms": percentile(latencies, 0.99)}


async def bench_pipelined(namesrv: str, topic: str, count: int, window: int,
                          auto_batch: bool = True) -> tuple[float, int]:
    """Throughput with ``window`` sends in flight, and how many messages were sent; on an
    ``auto_batch`` producer (the client's best path for this) unless told otherwise."""
    async with Producer("bench-async", namesrv=namesrv, auto_batch=auto_batch) as producer:
        await producer.send(Message(topic, BODY))

        async def worker(n: int) -> None:  # ``window`` sends in flight at any time
            for _ in range(n):
                await producer.send(Message(topic, BODY))

        per_worker = max(1, count // window)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(per_worker) for _ in range(window)))
        return per_worker * window / (time.perf_counter() - t0), per_worker * window + 1


async def bench_batch(namesrv: str, topic: str, count: int, size: int, window: int) -> float:
    async with Producer("bench-batch", namesrv=namesrv) as producer:
        await producer.send(Message(topic, BODY))
        per_worker = max(1, count // size // window)

        async def worker() -> None:
            for _ in range(per_worker):
                await producer.send_batch([Message(topic, BODY) for _ in range(size)])

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        return per_worker * window * size / (time.perf_counter() - t0)


async def bench_push(namesrv: str, topic: str, expected: int) -> float:
    done = asyncio.Event()
    seen = 0
    first = 0.0

    async def listener(messages: list) -> ConsumeResult:
        nonlocal seen, first
        if not first:
            first = time.perf_counter()
        seen += len(messages)
        if seen >= expected:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("bench-push", namesrv=namesrv, from_where="first",
                            consume_message_batch_max_size=32, pull_threshold_for_queue=4096)
    consumer.subscribe(topic)
    consumer.register(listener)
    t0 = time.perf_counter()
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 300)
    finally:
        elapsed = time.perf_counter() - t0
        await consumer.shutdown()
    return seen / elapsed


async def bench_pull(namesrv: str, topic: str, expected: int) -> float:
    consumer = PullConsumer("bench-pull", namesrv=namesrv, from_where="first",
                            pull_batch_size=32, auto_commit=False)
    consumer.subscribe(topic)
    t0 = time.perf_counter()
    await consumer.start()
    seen = 0
    try:
        while seen < expected and time.perf_counter() - t0 < 300:
            seen += len(await consumer.poll(1.0))
    finally:
        elapsed = time.perf_counter() - t0
        await consumer.shutdown()
    return seen / elapsed


async def main_async(args: argparse.Namespace, namesrv: str) -> dict[str, float]:
    await create_topic(namesrv, "BenchSync", 8)
    await create_topic(namesrv, "BenchAsync", 8)
    await create_topic(namesrv, "BenchBatch", 8)
    sync = await bench_sync(namesrv, "BenchSync", args.sync_count)
    pipelined, total = await bench_pipelined(namesrv, "BenchAsync", args.count, args.window)
    plain, more = await bench_pipelined(namesrv, "BenchAsync", args.count, args.window, False)
    total += more
    batch = await bench_batch(namesrv, "BenchBatch", args.count, 32, 16)
    push = await bench_push(namesrv, "BenchAsync", total)
    pull = await bench_pull(namesrv, "BenchAsync", total)
    from rocketq.protocol.codec import COMPILED

    return {
        "codec": "compiled" if COMPILED else "pure",
        "sync_send_msgs_s": round(sync["msgs_s"]),
        "sync_send_p50_ms": round(sync["p50_ms"], 3),
        "sync_send_p99_ms": round(sync["p99_ms"], 3),
        "async_send_msgs_s": round(pipelined),
        "async_send_no_auto_batch_msgs_s": round(plain),
        "batch_send_msgs_s": round(batch),
        "push_consume_msgs_s": round(push),
        "pull_consume_msgs_s": round(pull),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--count", type=int, default=100_000,
                        help="messages for the pipelined, batched and consume runs")
    parser.add_argument("--sync-count", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=1000,
                        help="sends in flight in the pipelined run (default 1000)")
    args = parser.parse_args(argv)
    data = tempfile.mkdtemp(prefix="rocketq-e2e-")
    proc, namesrv = start_broker(data)
    try:
        result = run(main_async(args, namesrv))
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return 0
    targets = {"sync_send_p99_ms": "< 2 ms", "async_send_msgs_s": ">= 50,000",
               "batch_send_msgs_s": ">= 250,000", "push_consume_msgs_s": ">= 250,000",
               "pull_consume_msgs_s": ">= 250,000"}
    print(f"rocketq end-to-end, 128-byte messages over loopback, ASYNC_FLUSH, "
          f"{os.cpu_count()} cores")
    for key, value in result.items():
        print(f"  {key:<32} {value:>14,}  {targets.get(key, '')}" if key != "codec" else
              f"  {key:<32} {value:>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
