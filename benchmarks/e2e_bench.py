"""End-to-end benchmark: rocketq's client against ``rocketq standalone`` over loopback.

    python benchmarks/e2e_bench.py            # a table
    python benchmarks/e2e_bench.py --json     # one JSON object
    python benchmarks/e2e_bench.py --acl --tls   # what signing and TLS cost per message
    python benchmarks/e2e_bench.py --grpc        # the remoting paths with the gRPC port on
    python benchmarks/e2e_bench.py --metrics     # what the Prometheus exporter costs

The broker runs in its own process (ASYNC_FLUSH, data in a temporary directory); producers and
consumers run here on rocketq's asyncio client, with 128-byte messages. Pipelined sends use the
producer's ``auto_batch`` (``async_send_msgs_s``), and then a plain producer
(``async_send_no_auto_batch_msgs_s``). With ``ROCKETQ_NO_EXTENSIONS=1`` in the environment,
client and broker both run on the pure-Python codec.

With ``--acl`` and/or ``--tls`` the run compares security settings instead: one standalone per
setting (plain; ACL, every request signed and checked; TLS, ``tlsMode=enforcing``; both), all
started at once and measured in alternation, round after round, with one-at-a-time sends,
pipelined sends without auto-batching (one signature and one TLS record per message) and
pull consumption. The cost per message is ``1/rate - 1/plain rate`` of the same round.
With ``--grpc`` the same comparison runs a standalone with its gRPC port (RocketMQ 5.x
clients) open beside one without: the remoting paths must not pay for it. With ``--metrics``
it runs one with its Prometheus exporter on (``--metrics-port``: every request timed), scraped
every ``--scrape-interval`` seconds while it is measured, beside one without; it also reports
the CPU of the counting that runs either way (``Stats.put``, with the message size histogram)
and of one request's timing.
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
import urllib.request
from typing import Any

from rocketq.aio import ConsumeResult, Message, Producer, PullConsumer, PushConsumer
from rocketq.remoting import run

BODY = os.urandom(128)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: str, config: str | None = None, extra: list[str] | None = None,
                 grpc_port: int = 0) -> tuple[subprocess.Popen[str], str]:
    """``rocketq standalone`` with ASYNC_FLUSH in a child process; it and its NameServer."""
    from rocketq.cli import spawn_standalone

    return spawn_standalone(data_dir, flush="async", config=config, extra=extra,
                            grpc_port=grpc_port)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def create_topic(namesrv: str, topic: str, queues: int, **security: Any) -> None:
    from rocketq.client.instance import ClientInstance
    from rocketq.protocol.codes import RequestCode
    from rocketq.protocol.command import RemotingCommand

    instance = ClientInstance(namesrv, **security)
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


async def bench_sync(namesrv: str, topic: str, count: int, **security: Any
                     ) -> dict[str, float]:
    async with Producer("bench-sync", namesrv=namesrv, **security) as producer:
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
                          auto_batch: bool = True, **security: Any) -> tuple[float, int]:
    """Throughput with ``window`` sends in flight, and how many messages were sent; on an
    ``auto_batch`` producer (the client's best path for this) unless told otherwise."""
    async with Producer("bench-async", namesrv=namesrv, auto_batch=auto_batch,
                        **security) as producer:
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


async def bench_pull(namesrv: str, topic: str, expected: int, group: str = "bench-pull",
                     **security: Any) -> float:
    consumer = PullConsumer(group, namesrv=namesrv, from_where="first",
                            pull_batch_size=32, auto_commit=False, **security)
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


# ---------------------------------------------------------------------- --acl / --tls
ACCESS_KEY, SECRET_KEY = "bench-admin", "bench-secret-1"
ACL_FILE = f"""accounts:
  - accessKey: {ACCESS_KEY}
    secretKey: {SECRET_KEY}
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms: [BenchSec=PUB|SUB]
"""


def make_certificate(directory: str) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (it is its own CA), made with openssl."""
    cert, key = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def security_settings(args: argparse.Namespace) -> list[str]:
    names = ["plain"]
    if args.acl:
        names.append("acl")
    if args.tls:
        names.append("tls")
    if args.acl and args.tls:
        names.append("acl+tls")
    if args.grpc:
        names.append("grpc")
    if args.metrics:
        names.append("metrics")
    return names


def start_secured(name: str, data: str, cert: str, key: str
                  ) -> tuple[subprocess.Popen[str], str, dict[str, Any]]:
    """A standalone with the ``name`` setting, and the client options that match it (for
    ``metrics``, ``metrics_url``: where to scrape it)."""
    import ssl

    directory = os.path.join(data, name)
    os.makedirs(directory)
    conf = os.path.join(directory, "broker.conf")
    lines, extra, options = [], [], {}
    if "acl" in name:
        acl = os.path.join(directory, "plain_acl.yml")
        with open(acl, "w") as f:
            f.write(ACL_FILE)
        extra += ["--acl-file", acl]
        options["credentials"] = (ACCESS_KEY, SECRET_KEY)
    if "tls" in name:
        lines += ["tlsMode=enforcing", f"tls.server.certPath={cert}",
                  f"tls.server.keyPath={key}", f"tls.client.trustCertPath={cert}"]
        options["tls"] = ssl.create_default_context(cafile=cert)
    metrics_url = None
    if name == "metrics":
        port = free_port()
        extra += ["--metrics-port", str(port)]
        metrics_url = f"http://127.0.0.1:{port}/metrics"
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    proc, namesrv = start_broker(os.path.join(directory, "store"), conf, extra,
                                 grpc_port=free_port() if name == "grpc" else 0)
    if metrics_url is not None:
        options["metrics_url"] = metrics_url
    return proc, namesrv, options


def metrics_costs(rounds: int = 5, n: int = 200_000) -> dict[str, float]:
    """CPU per ``Stats.put`` (what the send path counts, exporter or not, its message size
    histogram included) and per request timed while the exporter is on, best of ``rounds``
    (the loop's own cost included)."""
    from rocketq.broker.stats import Stats
    from rocketq.metrics.labels import Node
    from rocketq.metrics.rpc import RpcLatency

    stats, timer = Stats(), RpcLatency(Node("broker", "broker-a", "DefaultCluster"))
    topics = [f"Bench{i}" for i in range(8)]
    best_put = best_observe = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i in range(n):
            stats.put(1, topics[i & 7], 300)
        t1 = time.perf_counter()
        for _ in range(n):
            timer.observe(310, 0, 0.0004, False, True)
        t2 = time.perf_counter()
        best_put, best_observe = min(best_put, t1 - t0), min(best_observe, t2 - t1)
    return {"stats_put_us": round(best_put / n * 1e6, 3),
            "rpc_observe_us": round(best_observe / n * 1e6, 3)}


async def scrape_every(url: str, interval: float) -> None:
    """Scrape ``url`` every ``interval`` seconds, as Prometheus would, until cancelled."""
    def fetch() -> None:
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()
    while True:
        await asyncio.to_thread(fetch)
        await asyncio.sleep(interval)


def sign_costs(rounds: int = 5, n: int = 20_000) -> dict[str, float]:
    """CPU per signature and per check of one 128-byte send, best of ``rounds``."""
    from rocketq.acl import Credentials, verify
    from rocketq.protocol import RemotingCommand, RequestCode

    creds = Credentials(ACCESS_KEY, SECRET_KEY)
    ext = {"a": "bench", "b": "BenchSec", "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0", "i": "UNIQ_KEY\x01AC11000100002A9F0000000000000000"
           "\x02WAIT\x01true\x02", "j": "0", "k": "false", "m": "false", "n": "broker-a"}
    cmds = [RemotingCommand.request_text(RequestCode.SEND_MESSAGE_V2, dict(ext), BODY)
            for _ in range(n)]
    best_sign = best_verify = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for cmd in cmds:
            creds.sign(cmd)
        t1 = time.perf_counter()
        for cmd in cmds:
            verify(SECRET_KEY, cmd)
        t2 = time.perf_counter()
        best_sign, best_verify = min(best_sign, t1 - t0), min(best_verify, t2 - t1)
    return {"sign_us": round(best_sign / n * 1e6, 2), "verify_us": round(best_verify / n * 1e6, 2)}


async def security_round(namesrv: str, options: dict[str, Any], args: argparse.Namespace,
                         round_no: int) -> dict[str, float]:
    options = dict(options)
    url = options.pop("metrics_url", None)
    scraper = asyncio.ensure_future(scrape_every(url, args.scrape_interval)) if url else None
    try:
        return await _security_round(namesrv, options, args, round_no)
    finally:
        if scraper is not None:
            scraper.cancel()
            await asyncio.gather(scraper, return_exceptions=True)


async def _security_round(namesrv: str, options: dict[str, Any], args: argparse.Namespace,
                          round_no: int) -> dict[str, float]:
    sync = await bench_sync(namesrv, "BenchSec", args.sync_count, **options)
    piped, total = await bench_pipelined(namesrv, "BenchSec", args.count, args.window, False,
                                         **options)
    pull = await bench_pull(namesrv, "BenchSec", total, f"bench-pull-{round_no}", **options)
    return {"sync_send_msgs_s": sync["msgs_s"], "sync_send_p50_ms": sync["p50_ms"],
            "async_send_no_auto_batch_msgs_s": piped, "pull_consume_msgs_s": pull}


def compare_security(args: argparse.Namespace) -> dict[str, Any]:
    names = security_settings(args)
    data = tempfile.mkdtemp(prefix="rocketq-e2e-sec-")
    servers: dict[str, tuple[subprocess.Popen[str], str, dict[str, Any]]] = {}
    runs: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    try:
        cert, key = make_certificate(data)
        for name in names:
            servers[name] = start_secured(name, data, cert, key)

        async def measure() -> None:
            for name in names:
                _, namesrv, options = servers[name]
                await create_topic(namesrv, "BenchSec", 8, **{
                    k: v for k, v in options.items() if k != "metrics_url"})
            for round_no in range(args.rounds):
                # Alternate: each round measures every setting, in a rotating order.
                order = names[round_no % len(names):] + names[:round_no % len(names)]
                for name in order:
                    _, namesrv, options = servers[name]
                    got = await security_round(namesrv, options, args, round_no)
                    for k, v in got.items():
                        runs[name].setdefault(k, []).append(v)
        run(measure())
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
        for proc, _, _ in servers.values():
            proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    result: dict[str, Any] = {"rounds": args.rounds, **sign_costs()}
    if args.metrics:
        result.update(metrics_costs(), scrape_interval_s=args.scrape_interval)
    for name in names:
        prefix = name.replace("+", "_")
        for key, values in runs[name].items():
            digits = 3 if key.endswith("_ms") else 0
            result[f"{prefix}_{key}"] = round(statistics.median(values), digits)
            result[f"{prefix}_{key}_runs"] = [round(v, digits) for v in values]
    for name in names[1:]:
        prefix = name.replace("+", "_")
        for key in ("sync_send_msgs_s", "async_send_no_auto_batch_msgs_s",
                    "pull_consume_msgs_s"):
            costs = [1e6 / a - 1e6 / b for a, b in zip(runs[name][key], runs["plain"][key],
                                                         strict=True)]
            what = f"{prefix}_{key.removesuffix('_msgs_s')}_cost_us_per_msg"
            result[what] = round(statistics.median(costs), 2)
            result[f"{what}_runs"] = [round(c, 2) for c in costs]
    return result


def print_security(result: dict[str, Any], names: list[str]) -> None:
    print(f"rocketq end-to-end with security settings, 128-byte messages over loopback, "
          f"{os.cpu_count()} cores, median of {result['rounds']} alternating rounds "
          f"(spread in brackets)")
    keys = ["sync_send_msgs_s", "sync_send_p50_ms", "async_send_no_auto_batch_msgs_s",
            "pull_consume_msgs_s"]
    print(f"  {'':<34}" + "".join(f"{n:>28}" for n in names))
    for key in keys:
        cells = []
        for name in names:
            prefix = name.replace("+", "_")
            values = result[f"{prefix}_{key}_runs"]
            fmt = "{:,.3f}" if key.endswith("_ms") else "{:,.0f}"
            cells.append(f"{fmt.format(result[f'{prefix}_{key}'])} "
                         f"({fmt.format(min(values))}-{fmt.format(max(values))})")
        print(f"  {key:<34}" + "".join(f"{c:>28}" for c in cells))
    for name in names[1:]:
        prefix = name.replace("+", "_")
        costs = ", ".join(
            f"{what} {result[f'{prefix}_{what}_cost_us_per_msg']:+.1f} µs "
            f"({min(result[f'{prefix}_{what}_cost_us_per_msg_runs']):+.1f} to "
            f"{max(result[f'{prefix}_{what}_cost_us_per_msg_runs']):+.1f})"
            for what in ("sync_send", "async_send_no_auto_batch", "pull_consume"))
        print(f"  cost per message, {name}: {costs}")
    if "stats_put_us" in result:
        print(f"  counting a send (Stats.put, size histogram included, exporter or not): "
              f"{result['stats_put_us']} µs; timing a request (exporter on): "
              f"{result['rpc_observe_us']} µs (CPU, best of 5); metrics scraped every "
              f"{result['scrape_interval_s']} s while measured")
    print(f"  one signature: {result['sign_us']} µs to make, {result['verify_us']} µs to "
          f"check (CPU, best of 5)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--count", type=int, default=100_000,
                        help="messages for the pipelined, batched and consume runs")
    parser.add_argument("--sync-count", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=1000,
                        help="sends in flight in the pipelined run (default 1000)")
    parser.add_argument("--acl", action="store_true",
                        help="compare with every request signed and checked (plain ACL)")
    parser.add_argument("--tls", action="store_true",
                        help="compare with every connection on TLS (tlsMode=enforcing)")
    parser.add_argument("--grpc", action="store_true",
                        help="compare with the gRPC port for 5.x clients open")
    parser.add_argument("--metrics", action="store_true",
                        help="compare with the Prometheus exporter on and scraped")
    parser.add_argument("--scrape-interval", type=float, default=1.0,
                        help="with --metrics: seconds between scrapes (default 1; "
                             "Prometheus's default is 60)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --acl/--tls/--grpc/--metrics: alternating rounds per "
                             "setting (default 3)")
    args = parser.parse_args(argv)
    if args.acl or args.tls or args.grpc or args.metrics:
        result = compare_security(args)
        if args.json:
            print(json.dumps(result))
        else:
            print_security(result, security_settings(args))
        return 0
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
