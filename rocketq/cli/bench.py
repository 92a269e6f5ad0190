"""``rocketq bench``: producer, consumer and end-to-end benchmarks against any
RocketMQ-protocol broker (what RocketMQ ships as its benchmark scripts).

    rocketq bench produce --namesrv 127.0.0.1:9876 --size 128 --count 100000 --mode async
    rocketq bench consume --namesrv 127.0.0.1:9876 --topic BenchmarkTest --duration 10
    rocketq bench e2e --start-broker --flush sync --duration 10 --json

Each second a progress line goes to standard error; at the end a table (or, with ``--json``,
one JSON object) goes to standard output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from .admin.common import namesrv_option
from .common import RawDescriptionHelpFormatter, failure_reason
from .standalone import spawn_standalone

MODES = ("sync", "async", "oneway", "batch")
NAMESRV_HELP = ("NameServer addresses, ';'-separated (default: $NAMESRV_ADDR, else "
                "127.0.0.1:9876)")


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value
    return parse


def add_bench_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help="measure a broker: produce, consume, e2e",
                           description=__doc__.replace("``", ""),
                           formatter_class=RawDescriptionHelpFormatter)
    # Also before KIND; after it, an absent --namesrv keeps the value given here.
    bench.add_argument("--namesrv", type=namesrv_option, help=NAMESRV_HELP)
    kinds = bench.add_subparsers(dest="bench", required=True, metavar="KIND")
    for name, text in (("produce", "send messages as fast as the mode allows"),
                       ("consume", "read a topic from its first offset"),
                       ("e2e", "send and consume at once; latency from birth to receipt")):
        p = kinds.add_parser(name, help=text, description=text)
        where = p.add_mutually_exclusive_group()
        where.add_argument("--namesrv", default=argparse.SUPPRESS, type=namesrv_option,
                           help=NAMESRV_HELP)
        where.add_argument("--start-broker", action="store_true",
                           help="start a rocketq standalone broker in a temporary directory "
                                "instead")
        p.add_argument("--flush", choices=["async", "sync"], default="async",
                       help="flush mode of the broker --start-broker starts")
        p.add_argument("--topic", default="BenchmarkTest", help="the topic")
        p.add_argument("--queues", type=_positive(int),
                       help="create or update the topic with this many queues on every "
                            "master (default with --start-broker: 4)")
        p.add_argument("--size", type=_positive(int), default=128, help="message body bytes")
        p.add_argument("--count", type=_positive(int), help="messages (default 100,000 "
                       "unless --duration is given)")
        p.add_argument("--duration", type=_positive(float), help="seconds to run")
        p.add_argument("--json", action="store_true", help="print one JSON object at the end")
        p.add_argument("--no-progress", action="store_true", help="no per-second lines")
        if name in ("produce", "e2e"):
            p.add_argument("--mode", choices=MODES, default="sync",
                           help="sync: wait for each send; async: --window sends in flight; "
                                "oneway: no answer; batch: --batch messages per request")
            p.add_argument("--window", type=_positive(int), default=256,
                           help="sends (or batches) in flight in async and batch modes")
            p.add_argument("--batch", type=_positive(int), default=32,
                           help="messages per batch in batch mode")
            p.add_argument("--auto-batch", action=argparse.BooleanOptionalAction, default=None,
                           help="coalesce sends in flight together into batches (the "
                                "producer's auto_batch); default: on in async mode")
            p.add_argument("--producers", type=_positive(int), default=1,
                           help="producer tasks, each with its own client")
        if name in ("consume", "e2e"):
            p.add_argument("--group", help="consumer group (default: a new one per run)")
            p.add_argument("--pull-batch", type=_positive(int), default=32,
                           help="messages per pull")
        p.set_defaults(func=run_bench)


# ---------------------------------------------------------------------------- measuring


@dataclass
class Meter:
    """Counts messages, bytes and latencies, per second and in total."""

    name: str
    size: int
    target: int | None
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    count: int = 0
    errors: int = 0
    #: How many messages failed for each reason, the first reason first.
    reasons: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)  # milliseconds
    _tick_count: int = 0
    _tick_latencies: list[float] = field(default_factory=list)

    def add(self, messages: int, latency_ms: float | None = None) -> None:
        self.count += messages
        if latency_ms is not None:
            self.latencies.append(latency_ms)
            self._tick_latencies.append(latency_ms)

    def fail(self, messages: int, exc: BaseException) -> None:
        """Count ``messages`` that failed, and why."""
        self.errors += messages
        self.reasons[failure_reason(exc)] += messages

    def tick(self, seconds: float) -> str:
        """A progress line about the last ``seconds``; starts the next interval."""
        done = self.count - self._tick_count
        self._tick_count = self.count
        line = (f"{self.name:<8} {_bar(self.count, self.target)} {done / seconds:>10,.0f} "
                f"msgs/s {done * self.size / seconds / 1e6:>7.2f} MB/s")
        if self._tick_latencies:
            p50, p99, p999, top = _quantiles(self._tick_latencies)
            line += f"  p50 {p50:.2f} p99 {p99:.2f} p999 {p999:.2f} max {top:.2f} ms"
        if self.errors:
            line += f"  errors {self.errors}"
        self._tick_latencies = []
        return line

    def result(self) -> dict[str, Any]:
        elapsed = (self.ended or time.perf_counter()) - self.started
        out: dict[str, Any] = {
            "messages": self.count, "errors": self.errors, "seconds": round(elapsed, 3),
            "msgs_s": round(self.count / elapsed, 1) if elapsed > 0 else 0.0,
            "mb_s": round(self.count * self.size / elapsed / 1e6, 3) if elapsed > 0 else 0.0,
        }
        if self.reasons:
            out["error_reasons"] = dict(self.reasons)
        if self.latencies:
            p50, p99, p999, top = _quantiles(self.latencies)
            out["latency_ms"] = {"p50": round(p50, 3), "p99": round(p99, 3),
                                 "p999": round(p999, 3), "max": round(top, 3)}
        return out


def auto_batch(args: argparse.Namespace) -> bool:
    """Whether the producers coalesce sends: as asked, else in async mode (its best path)."""
    return args.mode == "async" if args.auto_batch is None else bool(args.auto_batch)


def _quantiles(values: list[float]) -> tuple[float, float, float, float]:
    p50, p99, p999 = np.percentile(np.asarray(values), [50, 99, 99.9])
    return float(p50), float(p99), float(p999), max(values)


def _bar(done: int, target: int | None, width: int = 20) -> str:
    if not target:
        return f"{done:>12,}"
    share = min(1.0, done / target)
    filled = int(share * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {share:>4.0%}"


class Deadline:
    """Stops a run at ``count`` messages or after ``duration`` seconds, whichever is first."""

    def __init__(self, count: int | None, duration: float | None) -> None:
        self.count = count
        self.until = time.perf_counter() + duration if duration else None
        self.claimed = 0

    def claim(self, n: int = 1) -> int:
        """How many of ``n`` more messages may go (0: stop)."""
        if self.until is not None and time.perf_counter() >= self.until:
            return 0
        if self.count is not None:
            n = min(n, self.count - self.claimed)
        self.claimed += max(0, n)
        return max(0, n)

    def over(self, consumed: int) -> bool:
        if self.until is not None and time.perf_counter() >= self.until:
            return True
        return self.count is not None and consumed >= self.count


# ---------------------------------------------------------------------------- running


async def produce(args: argparse.Namespace, namesrv: str, meter: Meter,
                  deadline: Deadline) -> None:
    from ..client.message import Message
    from ..client.producer import AsyncProducer

    body = os.urandom(args.size // 2 + 1).hex()[:args.size].encode()

    async def one_producer(index: int) -> None:
        producer = AsyncProducer(f"bench-producer-{os.getpid()}-{index}", namesrv,
                                 auto_batch=auto_batch(args))
        await producer.start()
        try:
            if args.mode == "sync":
                lanes = 1
            else:
                lanes = max(1, args.window // args.producers)
            await asyncio.gather(*(lane(producer) for _ in range(lanes)))
        finally:
            await producer.shutdown()

    async def lane(producer: Any) -> None:
        per_request = args.batch if args.mode == "batch" else 1
        while True:
            n = deadline.claim(per_request)
            if not n:
                return
            t0 = time.perf_counter()
            try:
                if args.mode == "batch":
                    await producer.send_batch([Message(args.topic, body) for _ in range(n)])
                elif args.mode == "oneway":
                    await producer.send_oneway(Message(args.topic, body))
                else:
                    await producer.send(Message(args.topic, body))
            except Exception as exc:
                meter.fail(n, exc)
                if meter.errors > 1000 and meter.errors > meter.count:
                    raise
                continue
            meter.add(n, None if args.mode == "oneway" else
                      (time.perf_counter() - t0) * 1000)

    await asyncio.gather(*(one_producer(i) for i in range(args.producers)))
    meter.ended = time.perf_counter()


async def consume(args: argparse.Namespace, namesrv: str, meter: Meter, deadline: Deadline,
                  since_ms: int | None, idle_stop: float | None,
                  ready: asyncio.Event | None = None,
                  produced: asyncio.Event | None = None) -> None:
    """Read the topic from its first offset; with ``since_ms``, messages born before it are
    skipped and the others' latency (birth to receipt) is recorded."""
    from ..client.pull import AsyncPullConsumer

    group = args.group or f"bench-consumer-{os.getpid()}-{int(time.time() * 1000)}"
    consumer = AsyncPullConsumer(group, namesrv, from_where="first",
                                 pull_batch_size=args.pull_batch,
                                 pull_threshold_for_queue=max(1000, args.pull_batch * 8))
    consumer.subscribe(args.topic)
    await consumer.start()
    if ready is not None:
        ready.set()
    last_message = time.perf_counter()
    try:
        while not deadline.over(meter.count):
            messages = await consumer.poll(0.2)
            now = time.time() * 1000
            if messages or (produced is not None and not produced.is_set()):
                # Idle time counts from the last message, and not while still producing.
                last_message = time.perf_counter()
            elif idle_stop is not None and time.perf_counter() - last_message > idle_stop:
                break
            for m in messages:
                if since_ms is None:
                    meter.add(1)
                elif m.born_timestamp >= since_ms:
                    meter.add(1, max(0.0, now - m.born_timestamp))
    finally:
        meter.ended = time.perf_counter()
        await consumer.shutdown()


async def _report(meters: list[Meter], quiet: bool, stop: asyncio.Event) -> None:
    last = time.perf_counter()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await stop.wait()
        now = time.perf_counter()
        if not quiet and not stop.is_set():
            for meter in meters:
                print(meter.tick(now - last), file=sys.stderr, flush=True)
        last = now


async def bench(args: argparse.Namespace, namesrv: str) -> dict[str, Any]:
    from ..client.admin import AsyncAdmin

    queues = args.queues or (4 if args.start_broker else None)
    if queues:
        admin = AsyncAdmin(namesrv)
        try:
            await admin.create_topic(args.topic, queues)
        finally:
            await admin.close()
    count = args.count or (None if args.duration else 100_000)
    result: dict[str, Any] = {"command": args.bench, "topic": args.topic, "size": args.size}
    stop = asyncio.Event()
    meters = []
    if args.bench == "produce":
        meter = Meter("produce", args.size, count)
        meters.append(meter)
        reporter = asyncio.ensure_future(_report(meters, args.no_progress, stop))
        try:
            await produce(args, namesrv, meter, Deadline(count, args.duration))
        finally:
            stop.set()
            await reporter
        result.update(mode=args.mode, auto_batch=auto_batch(args), producers=args.producers,
                      produce=meter.result())
    elif args.bench == "consume":
        meter = Meter("consume", args.size, count)
        meters.append(meter)
        reporter = asyncio.ensure_future(_report(meters, args.no_progress, stop))
        try:
            await consume(args, namesrv, meter, Deadline(count, args.duration), None,
                          idle_stop=None if args.duration else 3.0)
        finally:
            stop.set()
            await reporter
        result["consume"] = meter.result()
    else:
        sent = Meter("produce", args.size, count)
        received = Meter("consume", args.size, count)
        meters += [sent, received]
        since = int(time.time() * 1000)
        ready = asyncio.Event()
        produced = asyncio.Event()
        reporter = asyncio.ensure_future(_report(meters, args.no_progress, stop))
        consumer = asyncio.ensure_future(consume(
            args, namesrv, received, Deadline(count, args.duration and args.duration + 5),
            since, idle_stop=3.0, ready=ready, produced=produced))
        try:
            await ready.wait()
            await produce(args, namesrv, sent, Deadline(count, args.duration))
            produced.set()
            await consumer
        finally:
            consumer.cancel()
            stop.set()
            await reporter
        result.update(mode=args.mode, auto_batch=auto_batch(args), producers=args.producers,
                      produce=sent.result(),
                      consume=received.result())
    return result


def _table(result: dict[str, Any]) -> str:
    rows = [("measure", "produce", "consume")]
    parts = [result.get("produce"), result.get("consume")]

    def cell(part: dict[str, Any] | None, key: str, fmt: str) -> str:
        if part is None:
            return "-"
        value = part.get("latency_ms", {}).get(key[4:]) if key.startswith("lat_") \
            else part.get(key)
        return "-" if value is None else format(value, fmt)

    for label, key, fmt in (("messages", "messages", ",d"), ("errors", "errors", ",d"),
                            ("seconds", "seconds", ".2f"), ("msgs/s", "msgs_s", ",.0f"),
                            ("MB/s", "mb_s", ".2f"), ("latency p50 ms", "lat_p50", ".3f"),
                            ("latency p99 ms", "lat_p99", ".3f"),
                            ("latency p999 ms", "lat_p999", ".3f"),
                            ("latency max ms", "lat_max", ".3f")):
        rows.append((label, cell(parts[0], key, fmt), cell(parts[1], key, fmt)))
    head = f"rocketq bench {result['command']}: topic {result['topic']}, {result['size']} B"
    if "mode" in result:
        head += (f", mode {result['mode']}{' with auto_batch' if result['auto_batch'] else ''}"
                 f", {result['producers']} producer(s)")
    lines = [head]
    lines += [f"{a:<18} {b:>14} {c:>14}" for a, b, c in rows]
    if result["command"] == "e2e":
        lines.append("(consume latency: from a message's birth to its receipt)")
    return "\n".join(lines)


def _failures(result: dict[str, Any]) -> tuple[list[str], bool]:
    """Lines for standard error, one per reason sends failed for with its count; and whether
    every send failed (nothing was measured: the run is a failure, not a figure)."""
    part = result.get("produce") or {}
    lines = [f"{count:,} message(s) failed: {reason}"
             for reason, count in (part.get("error_reasons") or {}).items()]
    return lines, bool(part.get("errors")) and not part.get("messages")


async def run_bench(args: argparse.Namespace) -> int:
    namesrv = getattr(args, "namesrv", None)
    if args.start_broker and namesrv:
        print(f"rocketq bench: {args.bench}: give --namesrv or --start-broker, not both",
              file=sys.stderr)
        return 2
    if args.start_broker:
        with tempfile.TemporaryDirectory(prefix="rocketq-bench-") as data_dir:
            proc, namesrv = await asyncio.to_thread(spawn_standalone, data_dir, flush=args.flush)
            try:
                result = await bench(args, namesrv)
                result["broker"] = f"rocketq standalone, {args.flush} flush"
            finally:
                proc.terminate()
                await asyncio.to_thread(proc.wait, 30)
    else:
        from .admin import default_namesrv

        result = await bench(args, namesrv or default_namesrv())
    if args.json:
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
    else:
        print(_table(result))
    lines, all_failed = _failures(result)
    for line in lines:
        print(f"rocketq bench: {args.bench}: {line}", file=sys.stderr)
    return 1 if all_failed else 0
