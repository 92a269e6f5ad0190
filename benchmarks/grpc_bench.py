"""gRPC (RocketMQ 5.x) benchmark: the official Python client against rocketq and a null service.

    python benchmarks/grpc_bench.py                       # rocketq standalone vs the null service
    python benchmarks/grpc_bench.py --null-only --rounds 1 --count 2000
    python benchmarks/grpc_bench.py --endpoint 127.0.0.1:8081 --topic T --group G
    python benchmarks/grpc_bench.py --json                # one JSON object

The client is PyPI ``rocketmq-python-client`` 5.1.2 in a venv of its own
(tests/compat/grpc_clients.py), run as a child process by tests/compat/grpc/official_client.py:

- send: ``Producer.send_async`` with ``--inflight`` sends outstanding (the client's fastest
  path), ``--count`` 128-byte messages;
- receive: ``SimpleConsumer.receive`` of up to ``--batch`` messages, each acked with ``ack`` on
  ``--ack-threads`` threads (``ack_async`` returns no future in 5.1.2), ``--count`` messages.

Targets: A, the gRPC endpoint of a ``rocketq standalone`` started here on free ports (it needs
``--grpc-port``; without it A is skipped with a message), or ``--endpoint`` (its topic and group
must exist); B, benchmarks/grpc_null.py in a child process, which answers at once with no work
(the cost of gRPC and of the client alone). A and B alternate, ``--rounds`` times (ABBA...),
and each figure is the median of the rounds, with min, max and spread. For the started rocketq
it also measures rocketq's own client (``rocketq.aio.Producer``, no auto-batching,
``--inflight`` sends in flight) sending as many messages over remoting, and the broker's CPU time
per message in each phase (utime+stime of the broker's process tree from /proc, between the
driver's ``@@READY`` and ``@@DONE``, i.e. without client startup and shutdown).

JSON keys: grpc_send_msgs_s, grpc_receive_msgs_s, null_send_msgs_s, null_receive_msgs_s,
remoting_send_msgs_s, broker_cpu_s_per_msg_{grpc_send,grpc_receive,remoting_send},
null_cpu_s_per_msg_{send,receive}, client_cpu_s_per_msg_{grpc_send,...} (null when not
measured), and "rounds" with every round's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
BENCHMARKS = str(Path(__file__).resolve().parent)
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)

from tests.compat.grpc_clients import (  # noqa: E402
    PYTHON_CLIENT,
    PYTHON_LOG,
    official_command,
    parse_result,
    spawn_null,
)

BODY_SIZE = 128
GRPC_TOPIC, REMOTING_TOPIC, GROUP = "GrpcBench", "RemotingBench", "GrpcBenchGroup"
TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------ CPU time
def _children(pid: int) -> list[int]:
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found


def tree_cpu(pid: int | None) -> float | None:
    """utime + stime (seconds) of ``pid`` and its live descendants, from /proc."""
    if pid is None:
        return None
    total, todo, seen = 0, [pid], set()
    while todo and len(seen) < 1000:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        todo += _children(p)
    return total / TICKS


# ------------------------------------------------------------------------------ phases
def driver_phase(script_args: list[str], server_pid: int | None, timeout: float
                 ) -> dict[str, Any]:
    """Run the driver with --sync-stdin --summary; the server's CPU seconds in between."""
    home = tempfile.mkdtemp(prefix="rocketq-grpc-bench-")
    argv, env = official_command([*script_args, "--sync-stdin", "--summary",
                                  "--timeout", str(timeout)], home)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=home)
    marks: queue.Queue[str] = queue.Queue()
    err_tail: list[str] = []
    out: list[str] = []

    def read_err() -> None:
        for line in proc.stderr:
            if line.startswith("@@"):
                marks.put(line.strip())
            else:
                err_tail.append(line)
                del err_tail[:-50]
        marks.put("@@EOF")

    def read_out() -> None:
        out.append(proc.stdout.read())

    readers = [threading.Thread(target=read_err, daemon=True),
               threading.Thread(target=read_out, daemon=True)]
    for t in readers:
        t.start()

    def wait_mark(name: str, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                mark = marks.get(timeout=left)
            except queue.Empty:
                return False
            if mark == name:
                return True
            if mark == "@@EOF":
                return False
        return False

    cpu0 = cpu1 = None
    try:
        if wait_mark("@@READY", 90):
            cpu0 = tree_cpu(server_pid)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            if wait_mark("@@DONE", timeout + 60):
                cpu1 = tree_cpu(server_pid)
        proc.wait(timeout + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    for t in readers:
        t.join(10)
    result = parse_result("".join(out)) or {"ok": False, "error": "no result"}
    if not result.get("ok"):
        log = Path(home) / PYTHON_LOG
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(none)"
        raise RuntimeError(f"driver {script_args[0]} failed: {result.get('error')} "
                           f"{result.get('errors', '')}\n--- stderr\n{''.join(err_tail)}\n"
                           f"--- client log {log}\n{tail}")
    shutil.rmtree(home, ignore_errors=True)
    if cpu0 is not None and cpu1 is not None:
        result["server_cpu_s"] = cpu1 - cpu0
    return result


def grpc_send(endpoint: str, topic: str, args: argparse.Namespace, pid: int | None
              ) -> dict[str, Any]:
    return driver_phase(["send", "--endpoint", endpoint, "--topic", topic, "--count",
                         str(args.count), "--body-size", str(BODY_SIZE), "--inflight",
                         str(args.inflight)], pid, args.timeout)


def grpc_receive(endpoint: str, topic: str, group: str, args: argparse.Namespace,
                 pid: int | None) -> dict[str, Any]:
    return driver_phase(["receive", "--endpoint", endpoint, "--topic", topic, "--group", group,
                         "--count", str(args.count), "--batch", str(args.batch),
                         "--ack-threads", str(args.ack_threads), "--invisible", "60",
                         "--await-duration", "5", "--max-empty", "2"], pid, args.timeout)


def remoting_send(namesrv: str, topic: str, args: argparse.Namespace, pid: int | None
                  ) -> dict[str, Any]:
    """rocketq's own client: ``args.count`` sends, ``args.inflight`` in flight, no batching."""
    from rocketq.aio import Message, Producer
    from rocketq.remoting import run

    body = os.urandom(BODY_SIZE)

    async def go() -> dict[str, Any]:
        async with Producer("grpc-bench-remoting", namesrv=namesrv,
                            auto_batch=False) as producer:
            await producer.send(Message(topic, body))  # routes and connections
            share, extra = divmod(args.count, args.inflight)

            async def worker(n: int) -> None:
                for _ in range(n):
                    await producer.send(Message(topic, body))

            cpu0, c0, t0 = tree_cpu(pid), time.process_time(), time.perf_counter()
            await asyncio.wait_for(asyncio.gather(*(worker(share + (i < extra))
                                                    for i in range(args.inflight))),
                                   args.timeout)
            elapsed = time.perf_counter() - t0
            cpu1, c1 = tree_cpu(pid), time.process_time()
            count = args.count
            return {"count": count, "msgs_s": count / elapsed, "cpu_s": c1 - c0,
                    "server_cpu_s": None if cpu0 is None else cpu1 - cpu0}

    return run(go())


# ------------------------------------------------------------------------------ targets
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    return False


def grpc_port_supported() -> bool:
    proc = subprocess.run([sys.executable, "-m", "rocketq.cli", "standalone", "--help"],
                          capture_output=True, text=True, timeout=60)
    return "--grpc-port" in proc.stdout


class Rocketq:
    """``rocketq standalone --grpc-port`` (ASYNC_FLUSH) on free ports, with the topics."""

    def __init__(self) -> None:
        from e2e_bench import create_topic

        from rocketq.cli import spawn_standalone
        from rocketq.remoting import run

        self.data = tempfile.mkdtemp(prefix="rocketq-grpc-bench-")
        port = free_port()
        self.proc, self.namesrv = spawn_standalone(self.data, flush="async",
                                                   extra=["--grpc-port", str(port)])
        self.endpoint, self.pid = f"127.0.0.1:{port}", self.proc.pid
        if not wait_port(port, 30):
            self.stop()
            raise RuntimeError(f"rocketq's gRPC port {port} does not accept connections")
        run(create_topic(self.namesrv, GRPC_TOPIC, 8))
        run(create_topic(self.namesrv, REMOTING_TOPIC, 8))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.data, ignore_errors=True)


# ------------------------------------------------------------------------------ main
def summarize(values: list[float]) -> dict[str, float] | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    median = statistics.median(values)
    return {"median": median, "min": min(values), "max": max(values),
            "spread": (max(values) - min(values)) / median if median else 0.0}


def per_msg(result: dict[str, Any], key: str) -> float | None:
    value = result.get(key)
    count = result.get("count") or 0
    return value / count if value is not None and count else None


def measure(args: argparse.Namespace) -> dict[str, Any]:
    rounds: dict[str, list[float]] = {}
    notes: list[str] = []

    def record(name: str, result: dict[str, Any]) -> None:
        rounds.setdefault(f"{name}_msgs_s", []).append(result["msgs_s"])
        rounds.setdefault(f"server_cpu_s_per_msg_{name}", []).append(
            per_msg(result, "server_cpu_s"))
        rounds.setdefault(f"client_cpu_s_per_msg_{name}", []).append(per_msg(result, "cpu_s"))

    target = None
    broker: Rocketq | None = None
    null_proc = None
    try:
        if args.endpoint:
            target = {"name": "endpoint", "endpoint": args.endpoint, "pid": args.server_pid,
                      "namesrv": args.namesrv}
        elif not args.null_only:
            if grpc_port_supported():
                broker = Rocketq()
                target = {"name": "rocketq", "endpoint": broker.endpoint, "pid": broker.pid,
                          "namesrv": broker.namesrv}
            else:
                notes.append("rocketq standalone does not accept --grpc-port yet: "
                             "measuring the null service only")
                print(notes[-1], file=sys.stderr)
        # Routes of as many queues as rocketq's topic: the client filters a route's queues
        # on every send, and both sides must cost it the same.
        null_proc, null_endpoint = spawn_null("--body-size", str(BODY_SIZE), "--queues", "8")
        null = {"name": "null", "endpoint": null_endpoint, "pid": null_proc.pid}
        topic = args.topic or GRPC_TOPIC
        group = args.group or GROUP
        for r in range(args.rounds):
            order = [t for t in (target, null) if t is not None]
            if r % 2:
                order.reverse()
            for t in order:
                prefix = "null" if t is null else "grpc"
                log(args, f"round {r + 1}/{args.rounds}: {t['name']} send")
                record(f"{prefix}_send", grpc_send(t["endpoint"], topic, args, t["pid"]))
                log(args, f"round {r + 1}/{args.rounds}: {t['name']} receive")
                record(f"{prefix}_receive",
                       grpc_receive(t["endpoint"], topic, group, args, t["pid"]))
                if t is target and t.get("namesrv"):
                    log(args, f"round {r + 1}/{args.rounds}: {t['name']} remoting send")
                    record("remoting_send", remoting_send(
                        t["namesrv"], args.remoting_topic or REMOTING_TOPIC, args, t["pid"]))
    finally:
        if null_proc is not None:
            null_proc.terminate()
            null_proc.wait(30)
        if broker is not None:
            broker.stop()

    def median(key: str) -> float | None:
        s = summarize(rounds.get(key, []))
        return s["median"] if s else None

    out: dict[str, Any] = {
        "client": PYTHON_CLIENT, "target": target["name"] if target else None,
        "count": args.count, "inflight": args.inflight, "batch": args.batch,
        "ack_threads": args.ack_threads, "rounds_run": args.rounds, "cores": os.cpu_count(),
        "notes": notes,
    }
    for name in ("grpc_send", "grpc_receive", "null_send", "null_receive", "remoting_send"):
        value = median(f"{name}_msgs_s")
        out[f"{name}_msgs_s"] = round(value, 1) if value is not None else None
    for name in ("grpc_send", "grpc_receive", "remoting_send"):
        out[f"broker_cpu_s_per_msg_{name}"] = median(f"server_cpu_s_per_msg_{name}")
    for name in ("send", "receive"):
        out[f"null_cpu_s_per_msg_{name}"] = median(f"server_cpu_s_per_msg_null_{name}")
    for name in ("grpc_send", "grpc_receive", "null_send", "null_receive", "remoting_send"):
        out[f"client_cpu_s_per_msg_{name}"] = median(f"client_cpu_s_per_msg_{name}")
    out["rounds"] = rounds
    return out


def log(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=sys.stderr, flush=True)


def print_table(result: dict[str, Any]) -> None:
    rounds = result["rounds"]
    print(f"gRPC benchmark: {result['client']}, {result['count']} x {BODY_SIZE}-byte messages, "
          f"{result['inflight']} sends in flight, receive batch {result['batch']} with "
          f"{result['ack_threads']} ack threads, {result['rounds_run']} round(s), "
          f"{result['cores']} cores; target: {result['target'] or 'none (null only)'}")
    for note in result["notes"]:
        print(f"note: {note}")
    rows = [("grpc_send_msgs_s", "gRPC send (target)", "msgs/s", 1),
            ("grpc_receive_msgs_s", "gRPC receive+ack (target)", "msgs/s", 1),
            ("remoting_send_msgs_s", "remoting send (rocketq client)", "msgs/s", 1),
            ("null_send_msgs_s", "gRPC send (null service)", "msgs/s", 1),
            ("null_receive_msgs_s", "gRPC receive+ack (null service)", "msgs/s", 1),
            ("server_cpu_s_per_msg_grpc_send", "broker CPU, gRPC send", "us/msg", 1e6),
            ("server_cpu_s_per_msg_grpc_receive", "broker CPU, gRPC receive+ack", "us/msg", 1e6),
            ("server_cpu_s_per_msg_remoting_send", "broker CPU, remoting send", "us/msg", 1e6),
            ("server_cpu_s_per_msg_null_send", "null CPU, send", "us/msg", 1e6),
            ("server_cpu_s_per_msg_null_receive", "null CPU, receive+ack", "us/msg", 1e6),
            ("client_cpu_s_per_msg_grpc_send", "client CPU, gRPC send (target)", "us/msg", 1e6),
            ("client_cpu_s_per_msg_grpc_receive", "client CPU, receive+ack (target)", "us/msg",
             1e6),
            ("client_cpu_s_per_msg_null_send", "client CPU, gRPC send (null)", "us/msg", 1e6),
            ("client_cpu_s_per_msg_null_receive", "client CPU, receive+ack (null)", "us/msg",
             1e6),
            ("client_cpu_s_per_msg_remoting_send", "client CPU, remoting send", "us/msg", 1e6)]
    print(f"{'':34} {'unit':>7} {'median':>10} {'min':>10} {'max':>10} {'spread':>7}")
    for key, label, unit, scale in rows:
        s = summarize(rounds.get(key, []))
        if s is None:
            continue
        print(f"{label:34} {unit:>7} {s['median'] * scale:10.1f} {s['min'] * scale:10.1f} "
              f"{s['max'] * scale:10.1f} {s['spread'] * 100:6.1f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=10_000, help="messages per phase")
    parser.add_argument("--inflight", type=int, default=64, help="sends in flight")
    parser.add_argument("--batch", type=int, default=32, help="max messages per receive")
    parser.add_argument("--ack-threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=300, help="bound per phase, seconds")
    parser.add_argument("--null-only", action="store_true", help="measure the null service only")
    parser.add_argument("--endpoint", help="measure this gRPC endpoint instead of a rocketq "
                                           "started here")
    parser.add_argument("--namesrv", help="with --endpoint: also send over remoting here")
    parser.add_argument("--server-pid", type=int, help="with --endpoint: the server's pid, "
                                                       "for its CPU time")
    parser.add_argument("--topic", help=f"gRPC topic (default {GRPC_TOPIC})")
    parser.add_argument("--remoting-topic", help=f"remoting topic (default {REMOTING_TOPIC})")
    parser.add_argument("--group", help=f"consumer group (default {GROUP})")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.inflight < 1 or args.count < 1 or args.rounds < 1:
        parser.error("--inflight, --count and --rounds must be positive")
    result = measure(args)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
