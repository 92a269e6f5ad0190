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
import inspect
import json
import os
import shutil
import signal
import socket
import statistics
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


# ---------------------------------------------------------------------------- rocketq


def new_event_loop() -> asyncio.AbstractEventLoop:
    """Every asyncio client runs on uvloop (when installed), so the loop is the same for all."""
    from rocketq.remoting import new_event_loop as rocketq_loop

    return rocketq_loop()


def start_rocketq(data_dir: str, flush: str) -> tuple[subprocess.Popen[str], str]:
    from rocketq.cli import spawn_standalone

    return spawn_standalone(data_dir, flush=flush)


async def run_rocketq(namesrv: str, args: Args, run: Run,
                      topic: str = "Compare") -> dict[str, float]:
    from rocketq import __version__
    from rocketq.aio import Message, Producer, PullConsumer
    from rocketq.client.admin import AsyncAdmin

    client = f"rocketq {__version__} asyncio client"
    admin = AsyncAdmin(namesrv)
    await admin.create_topic(topic, 4)
    await admin.close()
    out: dict[str, float] = {}

    def sync_cell() -> dict[str, float]:
        # One send at a time is the synchronous client's job: it sends from this thread.
        import rocketq

        with rocketq.Producer("compare-sync-producer", namesrv=namesrv) as producer:
            producer.send(rocketq.Message(topic, BODY))  # routes known before timing
            run.start()
            result = timed_sync_blocking(lambda: producer.send(rocketq.Message(topic, BODY)),
                                         args)
            run.stop("sync", result["sync_sent"])
            return result

    out.update(await asyncio.to_thread(sync_cell))
    run.paths["sync"] = (f"rocketq {__version__} synchronous client, Producer.send one at a "
                         "time (sent from the calling thread)")
    async with Producer("compare-producer", namesrv=namesrv) as producer:
        await producer.send(Message(topic, BODY))  # routes known before timing
        run.start()
        out["batch_msgs_s"] = BATCH * await in_flight(
            lambda: producer.send_batch([Message(topic, BODY) for _ in range(BATCH)]),
            batches(args), 1)
        run.stop("batch", BATCH * batches(args))
        run.paths["batch"] = f"{client}, Producer.send_batch of {BATCH}, one after another"
    async with Producer("compare-producer", namesrv=namesrv, auto_batch=True) as producer:
        await producer.send(Message(topic, BODY))
        run.start()
        out["pipelined_msgs_s"] = await in_flight(
            lambda: producer.send(Message(topic, BODY)), args.count, args.window)
        run.stop("pipelined", sent(args.count, args.window))
        run.paths["pipelined"] = (f"{client}, {args.window} concurrent Producer.send on "
                                  "Producer(auto_batch=True)")
    consumer = PullConsumer("compare-consumer", namesrv=namesrv, from_where="first",
                            pull_batch_size=256, pull_threshold_for_queue=4096,
                            auto_commit=False)
    consumer.subscribe(topic)
    total = 2 + int(out["sync_sent"]) + sent(args.count, args.window) + BATCH * batches(args)
    seen = 0
    await consumer.start()
    run.start()
    t0 = time.perf_counter()
    try:
        while seen < total and time.perf_counter() - t0 < 120:
            seen += len(await consumer.poll(1.0))
    finally:
        elapsed = time.perf_counter() - t0
        await consumer.shutdown()
    run.stop("consume", seen)
    run.paths["consume"] = f"{client}, PullConsumer.poll (pull_batch_size=256)"
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


def run_redis(port: int, args: Args, run: Run) -> dict[str, float]:
    """redis-py's synchronous client with the hiredis parser; no event loop."""
    import redis
    import redis.connection
    import redis.utils

    parser = redis.connection.DefaultParser.__name__
    if not redis.utils.HIREDIS_AVAILABLE or "Hiredis" not in parser:
        raise RuntimeError(f"redis: hiredis is not in use (parser {parser}); "
                           "pip install 'redis[hiredis]'")
    client_name = f"redis-py {redis.__version__} sync client + hiredis"
    client = redis.Redis(host="127.0.0.1", port=port)
    stream = "compare"
    fields = {"b": BODY}
    out: dict[str, float] = {}

    def pipelines(size: int, count: int) -> float:
        """``count`` pipelines of ``size`` XADDs, one after another; returns msgs/s."""
        t0 = time.perf_counter()
        for _ in range(count):
            pipe = client.pipeline(transaction=False)
            for _ in range(size):
                pipe.xadd(stream, fields)
            replies = pipe.execute()
            if len(replies) != size or not all(isinstance(r, bytes) and b"-" in r
                                               for r in replies):
                raise RuntimeError(f"redis: unexpected XADD replies {replies[:3]!r}...")
        return size * count / (time.perf_counter() - t0)

    try:
        client.ping()
        run.start()
        out.update(timed_sync_blocking(lambda: client.xadd(stream, fields), args))
        run.stop("sync", out["sync_sent"])
        run.paths["sync"] = f"{client_name}, XADD one at a time"

        rounds = sent(args.count, args.window) // args.window
        run.start()
        out["pipelined_msgs_s"] = pipelines(args.window, rounds)
        run.stop("pipelined", rounds * args.window)
        run.paths["pipelined"] = (f"{client_name}, pipeline(transaction=False) of "
                                  f"{args.window} XADD, one after another")

        run.start()
        out["batch_msgs_s"] = pipelines(BATCH, batches(args))
        run.stop("batch", BATCH * batches(args))
        run.paths["batch"] = (f"{client_name}, pipeline(transaction=False) of {BATCH} XADD, "
                              "one after another")

        total = client.xlen(stream)
        seen = 0
        last: bytes | str = "0"
        run.start()
        t0 = time.perf_counter()
        while seen < total:
            answer = client.xread({stream: last}, count=1000)
            entries = answer[0][1]
            seen += len(entries)
            last = entries[-1][0]
        out["consume_msgs_s"] = seen / (time.perf_counter() - t0)
        run.stop("consume", seen)
        run.paths["consume"] = f"{client_name}, XREAD COUNT 1000 from 0 in a loop"
    finally:
        client.close()
    return out


# ---------------------------------------------------------------------------- NATS


def start_nats(data_dir: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = subprocess.Popen(["nats-server", "-js", "-sd", data_dir, "-a", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    wait_port(port, proc)
    return proc, port


async def run_nats(port: int, args: Args, run: Run) -> dict[str, float]:
    import nats
    from nats.aio.client import __version__
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType
    from nats.js.client import JetStreamContext

    client = f"nats-py {__version__} JetStream"
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    # publish_async waits for room once this many acks are pending (nats-py's default: 4000).
    if "publish_async_max_pending" not in inspect.signature(JetStreamContext).parameters:
        raise RuntimeError("nats: this nats-py has no publish_async_max_pending")
    js = nc.jetstream(publish_async_max_pending=args.window)
    await js.add_stream(name="COMPARE", subjects=["compare"], storage=StorageType.FILE)
    out: dict[str, float] = {}
    failed: list[BaseException] = []

    def check(future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            failed.append(asyncio.CancelledError())
        elif future.exception() is not None:
            failed.append(future.exception())  # type: ignore[arg-type]

    try:
        run.start()
        out.update(await timed_sync(lambda: js.publish("compare", BODY), args))
        run.stop("sync", out["sync_sent"])
        run.paths["sync"] = f"{client}, await js.publish one at a time"

        total_pipelined = sent(args.count, args.window)
        run.start()
        t0 = time.perf_counter()
        for _ in range(total_pipelined):
            (await js.publish_async("compare", BODY)).add_done_callback(check)
        await js.publish_async_completed()
        out["pipelined_msgs_s"] = total_pipelined / (time.perf_counter() - t0)
        run.stop("pipelined", total_pipelined)
        if failed:
            raise RuntimeError(f"nats: {len(failed)} publishes failed: {failed[0]!r}")
        run.paths["pipelined"] = (f"{client}, js.publish_async with "
                                  f"publish_async_max_pending={args.window}, then "
                                  "publish_async_completed()")

        async def batch() -> None:
            acks = [await js.publish_async("compare", BODY) for _ in range(BATCH)]
            await asyncio.gather(*acks)

        run.start()
        out["batch_msgs_s"] = BATCH * await in_flight(batch, batches(args), 1)
        run.stop("batch", BATCH * batches(args))
        run.paths["batch"] = (f"{client}, {BATCH} js.publish_async then await their "
                              f"{BATCH} ack futures, one batch after another")

        total = (await js.stream_info("COMPARE")).state.messages
        sub = await js.pull_subscribe("compare", durable="reader",
                                      config=ConsumerConfig(ack_policy=AckPolicy.ALL))
        seen = 0
        run.start()
        t0 = time.perf_counter()
        while seen < total:
            messages = await sub.fetch(1000, timeout=5)
            seen += len(messages)
            await messages[-1].ack()  # acknowledges everything before it too
        out["consume_msgs_s"] = seen / (time.perf_counter() - t0)
        run.stop("consume", seen)
        run.paths["consume"] = (f"{client}, pull_subscribe fetch(1000), AckPolicy.ALL "
                                "acking the last of each fetch")
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


async def run_rabbitmq(port: int, args: Args, run: Run) -> dict[str, float]:
    import aio_pika

    client = f"aio-pika {aio_pika.__version__}, publisher confirms"
    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    out: dict[str, float] = {}
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue("compare", durable=True)
        exchange = channel.default_exchange

        def publish() -> Awaitable[Any]:
            return exchange.publish(aio_pika.Message(
                BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key="compare")

        run.start()
        out.update(await timed_sync(publish, args))
        run.stop("sync", out["sync_sent"])
        run.paths["sync"] = f"{client}, await exchange.publish one at a time"

        run.start()
        out["pipelined_msgs_s"] = await in_flight(publish, args.count, args.window)
        run.stop("pipelined", sent(args.count, args.window))
        run.paths["pipelined"] = f"{client}, {args.window} concurrent exchange.publish"

        async def batch() -> None:
            await asyncio.gather(*(publish() for _ in range(BATCH)))

        run.start()
        out["batch_msgs_s"] = BATCH * await in_flight(batch, batches(args), 1)
        run.stop("batch", BATCH * batches(args))
        run.paths["batch"] = (f"{client}, {BATCH} exchange.publish then await their "
                              f"{BATCH} confirms, one batch after another")

        reader = await connection.channel()
        await reader.set_qos(prefetch_count=1000)
        queue = await reader.declare_queue("compare", durable=True)
        total = queue.declaration_result.message_count
        seen = 0
        run.start()
        t0 = time.perf_counter()
        async with queue.iterator() as messages:
            async for message in messages:
                seen += 1
                if seen % 256 == 0 or seen == total:
                    await message.ack(multiple=True)
                if seen >= total:
                    break
        out["consume_msgs_s"] = seen / (time.perf_counter() - t0)
        run.stop("consume", seen)
        run.paths["consume"] = (f"{client}, queue.iterator with prefetch_count=1000, "
                                "ack(multiple=True) every 256")
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
