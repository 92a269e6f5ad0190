"""The systems ``compare_peers.py`` compares: how each (rocketq, Redis, NATS JetStream,
RabbitMQ) is started on loopback and how its cells run on its fastest Python client."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from e2e_bench import free_port
from peers_measure import (
    BATCH,
    BODY,
    Args,
    Run,
    batches,
    in_flight,
    sent,
    timed_sync,
    timed_sync_blocking,
    wait_port,
)

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
