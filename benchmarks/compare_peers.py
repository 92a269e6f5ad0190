"""rocketq next to Redis Streams, NATS JetStream and RabbitMQ: one workload, same machine, same
run, each system through its standard Python client.

    make bench-deps && .venv/bin/python benchmarks/compare_peers.py [--json] [--chart PNG]

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

Cells, 128-byte messages: ``sync`` sends one at a time waiting for each acknowledgement
(``--sync-count`` messages or ``--sync-seconds``, whichever ends first), ``pipelined`` keeps
``--window`` sends in flight, ``batch`` sends batches of 32 (8 in flight: rocketq's batch
request, a Redis pipeline of 32 XADDs, 32 publishes then their acks on NATS and RabbitMQ), and
``consume`` reads everything back with one consumer. ``--count`` messages per cell. Every
client runs on uvloop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_bench import free_port, percentile  # noqa: E402

CELLS = ["sync_msgs_s", "sync_p99_ms", "pipelined_msgs_s", "batch_msgs_s", "consume_msgs_s"]
LATENCY_CELLS = {"sync_p99_ms", "sync_p50_ms"}
BODY = b"x" * 128
BATCH = 32
BATCHES_IN_FLIGHT = 8


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
    elapsed = time.perf_counter() - t0
    return {"sync_msgs_s": len(latencies) / elapsed, "sync_p50_ms": percentile(latencies, 0.5),
            "sync_p99_ms": percentile(latencies, 0.99), "sync_sent": len(latencies)}


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


# ---------------------------------------------------------------------------- rocketq


def new_event_loop() -> asyncio.AbstractEventLoop:
    """Every client runs on uvloop (when installed), so the loop is the same for all."""
    from rocketq.remoting import new_event_loop as rocketq_loop

    return rocketq_loop()


def start_rocketq(data_dir: str, flush: str) -> tuple[subprocess.Popen[str], str]:
    from rocketq.cli import spawn_standalone

    return spawn_standalone(data_dir, flush=flush)


async def run_rocketq(namesrv: str, args: Args, topic: str = "Compare") -> dict[str, float]:
    from rocketq.aio import Message, Producer, PullConsumer
    from rocketq.client.admin import AsyncAdmin

    admin = AsyncAdmin(namesrv)
    await admin.create_topic(topic, 4)
    await admin.close()
    out: dict[str, float] = {}
    async with Producer("compare-producer", namesrv=namesrv) as producer:
        await producer.send(Message(topic, BODY))  # routes known before timing
        out.update(await timed_sync(lambda: producer.send(Message(topic, BODY)), args))
        out["pipelined_msgs_s"] = await in_flight(
            lambda: producer.send(Message(topic, BODY)), args.count, args.window)
        out["batch_msgs_s"] = BATCH * await in_flight(
            lambda: producer.send_batch([Message(topic, BODY) for _ in range(BATCH)]),
            args.count // BATCH, BATCHES_IN_FLIGHT)
    consumer = PullConsumer("compare-consumer", namesrv=namesrv, from_where="first",
                            pull_batch_size=256, pull_threshold_for_queue=4096,
                            auto_commit=False)
    consumer.subscribe(topic)
    await consumer.start()
    total = 1 + int(out["sync_sent"]) + sent(args.count, args.window) + BATCH * sent(
        args.count // BATCH, BATCHES_IN_FLIGHT)
    seen = 0
    t0 = time.perf_counter()
    try:
        while seen < total and time.perf_counter() - t0 < 120:
            seen += len(await consumer.poll(1.0))
    finally:
        elapsed = time.perf_counter() - t0
        await consumer.shutdown()
    out["consume_msgs_s"] = seen / elapsed
    return out


# ---------------------------------------------------------------------------- Redis


def start_redis(data_dir: str, fsync: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", data_dir,
         "--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--protected-mode",
         "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True)
    wait_port(port, proc)
    return proc, port


async def run_redis(port: int, args: Args) -> dict[str, float]:
    import redis.asyncio as redis

    client = redis.Redis(host="127.0.0.1", port=port,
                         max_connections=args.window + BATCHES_IN_FLIGHT + 4)
    stream = "compare"
    out: dict[str, float] = {}
    try:
        out.update(await timed_sync(lambda: client.xadd(stream, {"b": BODY}), args))
        out["pipelined_msgs_s"] = await in_flight(lambda: client.xadd(stream, {"b": BODY}),
                                                  args.count, args.window)

        async def batch() -> None:
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(BATCH):
                    pipe.xadd(stream, {"b": BODY})
                await pipe.execute()

        out["batch_msgs_s"] = BATCH * await in_flight(batch, args.count // BATCH,
                                                      BATCHES_IN_FLIGHT)
        total = await client.xlen(stream)
        seen = 0
        last = "0"
        t0 = time.perf_counter()
        while seen < total:
            answer = await client.xread({stream: last}, count=256)
            entries = answer[0][1]
            seen += len(entries)
            last = entries[-1][0]
        out["consume_msgs_s"] = seen / (time.perf_counter() - t0)
    finally:
        await client.aclose()
    return out


# ---------------------------------------------------------------------------- NATS


def start_nats(data_dir: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = subprocess.Popen(["nats-server", "-js", "-sd", data_dir, "-a", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    wait_port(port, proc)
    return proc, port


async def run_nats(port: int, args: Args) -> dict[str, float]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream()
    await js.add_stream(name="COMPARE", subjects=["compare"], storage=StorageType.FILE)
    out: dict[str, float] = {}
    try:
        out.update(await timed_sync(lambda: js.publish("compare", BODY), args))
        out["pipelined_msgs_s"] = await in_flight(lambda: js.publish("compare", BODY),
                                                  args.count, args.window)

        async def batch() -> None:
            await asyncio.gather(*(js.publish("compare", BODY) for _ in range(BATCH)))

        out["batch_msgs_s"] = BATCH * await in_flight(batch, args.count // BATCH,
                                                      BATCHES_IN_FLIGHT)
        total = (await js.stream_info("COMPARE")).state.messages
        sub = await js.pull_subscribe("compare", durable="reader",
                                      config=ConsumerConfig(ack_policy=AckPolicy.ALL))
        seen = 0
        t0 = time.perf_counter()
        while seen < total:
            messages = await sub.fetch(256, timeout=5)
            seen += len(messages)
            await messages[-1].ack()  # acknowledges everything before it too
        out["consume_msgs_s"] = seen / (time.perf_counter() - t0)
    finally:
        await nc.close()
    return out


# ---------------------------------------------------------------------------- RabbitMQ


def start_rabbitmq(data_dir: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    env = {**os.environ, "RABBITMQ_NODE_PORT": str(port), "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
           "RABBITMQ_NODENAME": f"compare{port}@localhost",
           "RABBITMQ_MNESIA_BASE": f"{data_dir}/mnesia", "RABBITMQ_LOG_BASE": f"{data_dir}/log",
           "RABBITMQ_DIST_PORT": str(free_port()), "RABBITMQ_ENABLED_PLUGINS_FILE":
           f"{data_dir}/enabled_plugins", "HOME": data_dir}
    Path(data_dir, "enabled_plugins").write_text("[].\n")
    # The Debian wrapper in /usr/sbin switches to the rabbitmq user; run the server itself.
    server = "/usr/lib/rabbitmq/bin/rabbitmq-server"
    proc = subprocess.Popen([server if os.path.exists(server) else "rabbitmq-server"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            text=True, start_new_session=True)
    wait_port(port, proc, 120)
    return proc, port


async def run_rabbitmq(port: int, args: Args) -> dict[str, float]:
    import aio_pika

    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    out: dict[str, float] = {}
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue("compare", durable=True)
        exchange = channel.default_exchange

        def publish() -> Awaitable[Any]:
            return exchange.publish(aio_pika.Message(
                BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key="compare")

        out.update(await timed_sync(publish, args))
        out["pipelined_msgs_s"] = await in_flight(publish, args.count, args.window)

        async def batch() -> None:
            await asyncio.gather(*(publish() for _ in range(BATCH)))

        out["batch_msgs_s"] = BATCH * await in_flight(batch, args.count // BATCH,
                                                      BATCHES_IN_FLIGHT)
        reader = await connection.channel()
        await reader.set_qos(prefetch_count=512)
        queue = await reader.declare_queue("compare", durable=True)
        total = queue.declaration_result.message_count
        seen = 0
        t0 = time.perf_counter()
        async with queue.iterator() as messages:
            async for message in messages:
                seen += 1
                if seen % 256 == 0 or seen == total:
                    await message.ack(multiple=True)
                if seen >= total:
                    break
        out["consume_msgs_s"] = seen / (time.perf_counter() - t0)
    finally:
        await connection.close()
    return out


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


def measure(name: str, args: Args) -> dict[str, float] | None:
    """Start one system, run the workload, stop it; None when it is not installed."""
    binary = {"redis": "redis-server", "redis_always": "redis-server", "nats": "nats-server",
              "rabbitmq": "rabbitmq-server"}.get(name)
    if binary and shutil.which(binary) is None:
        print(f"{name}: {binary} not installed (make bench-deps), skipped", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory(prefix=f"compare-{name}-") as data_dir:
        if name.startswith("rocketq"):
            proc, namesrv = start_rocketq(data_dir, "sync" if name.endswith("flush")
                                          else "async")
            work: Awaitable[dict[str, float]] = run_rocketq(namesrv, args)
        elif name.startswith("redis"):
            proc, port = start_redis(data_dir, "always" if name == "redis_always"
                                     else "everysec")
            work = run_redis(port, args)
        elif name == "nats":
            proc, port = start_nats(data_dir)
            work = run_nats(port, args)
        else:
            before = epmd_pids()
            proc, port = start_rabbitmq(data_dir)
            work = run_rabbitmq(port, args)
        try:
            t0 = time.monotonic()
            with asyncio.Runner(loop_factory=new_event_loop) as runner:
                result = runner.run(work)  # type: ignore[arg-type]
            print(f"{name}: done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
            return result
        finally:
            stop(proc)
            if name == "rabbitmq":
                for pid in epmd_pids() - before:  # the port mapper this run started
                    os.kill(pid, signal.SIGTERM)


def ratios(systems: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
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


def table(systems: dict[str, dict[str, float]], ratio: dict[str, dict[str, float]]) -> str:
    names = list(systems)
    lines = [f"{'cell':<18}" + "".join(f"{n:>20}" for n in names)]
    for cell in CELLS:
        lines.append(f"{cell:<18}" + "".join(
            f"{systems[n].get(cell, float('nan')):>20,.2f}" if cell in LATENCY_CELLS
            else f"{systems[n].get(cell, float('nan')):>20,.0f}" for n in names))
    lines.append("")
    lines.append("rocketq / peer (latency: peer / rocketq; above 1: rocketq better)")
    peers = list(ratio)
    lines.append(f"{'cell':<18}" + "".join(f"{p:>16}" for p in peers))
    for cell in CELLS:
        lines.append(f"{cell:<18}" + "".join(f"{ratio[p].get(cell, float('nan')):>16.2f}"
                                             for p in peers))
    return "\n".join(lines)


def chart(systems: dict[str, dict[str, float]], path: str, note: str) -> None:
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
    parser.add_argument("--window", type=int, default=256, help="pipelined sends in flight")
    parser.add_argument("--systems", default="rocketq,rocketq_sync_flush,redis,redis_always,"
                                             "nats,rabbitmq")
    parser.add_argument("--chart", default=None, help="write the chart to this PNG")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv, namespace=Args())
    systems = {}
    for name in args.systems.split(","):
        result = measure(name.strip(), args)
        if result is not None:
            systems[name.strip()] = {k: round(v, 3) for k, v in result.items()
                                     if k != "sync_sent"}
    ratio = ratios(systems)
    if args.chart:
        chart(systems, args.chart, f"measured {time.strftime('%Y-%m-%d')} on "
                                   f"{os.cpu_count()} cores, Python {sys.version.split()[0]}")
    if args.json:  # the table still goes to the terminal, on standard error
        print(table(systems, ratio), file=sys.stderr)
        print(json.dumps({"systems": systems, "ratios": ratio}))
    else:
        print(table(systems, ratio))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
