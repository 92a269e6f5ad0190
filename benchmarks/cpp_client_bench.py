"""The C++ RocketMQ client (PyPI ``rocketmq==0.4.4``) against ``rocketq standalone``: sync sends
one at a time, then a pull consumer reading them back, 128-byte messages.

    .venv/bin/python benchmarks/cpp_client_bench.py [--rounds 3] [--json]
    .venv/bin/python benchmarks/cpp_client_bench.py --against OTHER_CHECKOUT   # A/B

The client never batches, so what it sees is the broker's cost per request. With
``--against DIR`` (another checkout of rocketq, e.g. ``git worktree add DIR <commit>``) every
round runs the broker from that checkout too, alternating with this one, so two versions of
the broker are compared in the same run. The client lives in a virtual environment of its own
(``.cache/compat/rocketmq-0.4.4``, made on first use, as the compatibility tests make it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLIENT_HOME = REPO / ".cache" / "compat" / "rocketmq-0.4.4"

CLIENT = r"""
import json, sys, time
from rocketmq.client import Message, Producer, PullConsumer
ns, count = sys.argv[1], int(sys.argv[2])
body = b"x" * 128
producer = Producer("PG_CPP_BENCH")
producer.set_namesrv_addr(ns)
producer.start()
for _ in range(200):  # routes and connections
    m = Message("CppBench"); m.set_body(body); producer.send_sync(m)
latencies = []
t0 = time.perf_counter()
for _ in range(count):
    m = Message("CppBench")
    m.set_body(body)
    s = time.perf_counter()
    producer.send_sync(m)
    latencies.append(time.perf_counter() - s)
send_s = time.perf_counter() - t0
producer.shutdown()
latencies.sort()
pull = PullConsumer("CG_CPP_BENCH")
pull.set_namesrv_addr(ns)
pull.start()
seen = 0
t0 = time.perf_counter()
while seen < count + 200 and time.perf_counter() - t0 < 120:
    for _ in pull.pull("CppBench", "*", 32):
        seen += 1
pull_s = time.perf_counter() - t0
pull.shutdown()
print(json.dumps({"sync_send_msgs_s": count / send_s,
                  "sync_send_p50_ms": latencies[len(latencies) // 2] * 1000,
                  "sync_send_p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
                  "pull_msgs_s": seen / pull_s}))
"""


def client_python() -> str:
    python = CLIENT_HOME / "bin" / "python"
    marker = CLIENT_HOME / ".installed"
    if not marker.exists() or marker.read_text() != "rocketmq==0.4.4":
        venv.EnvBuilder(with_pip=True, clear=True).create(CLIENT_HOME)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "rocketmq==0.4.4"],
                       check=True, timeout=600)
        marker.write_text("rocketmq==0.4.4")
    return str(python)


def one_run(python: str, checkout: Path, count: int) -> dict[str, float]:
    """Start the broker of ``checkout`` (this venv's interpreter, its sources first on the
    path), run the client against it, stop it."""
    data = tempfile.mkdtemp(prefix="cpp-bench-")
    env = {"ROCKETQ_GRPC_PORT": "0", **os.environ, "PYTHONPATH": str(checkout)}
    # The checkout's sources, not the ones an editable install of this venv points to.
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if not "
            "getattr(f, '__module__', '').startswith('__editable__')]; "
            "import rocketq.cli; print('rocketq from', rocketq.cli.__file__, file=sys.stderr); "
            "sys.argv[0] = 'rocketq'; sys.exit(rocketq.cli.main())")
    broker = subprocess.Popen(
        [sys.executable, "-c", code, "--log-level", "WARNING", "standalone", "--data-dir",
         data, "--namesrv-port", "0", "--broker-port", "0"], stdout=subprocess.PIPE, text=True,
        env=env, cwd=checkout)
    try:
        assert broker.stdout is not None
        deadline = time.monotonic() + 30
        namesrv = None
        while time.monotonic() < deadline and namesrv is None:
            line = broker.stdout.readline()
            if 'namesrv="' in line:
                namesrv = line.split('namesrv="', 1)[1].split('"', 1)[0]
            elif not line and broker.poll() is not None:
                break
        if namesrv is None:
            raise RuntimeError(f"the broker of {checkout} did not start")
        home = tempfile.mkdtemp(prefix="cpp-bench-home-")
        proc = subprocess.run([python, "-c", CLIENT, namesrv, str(count)], capture_output=True,
                              text=True, timeout=600, env={**os.environ, "HOME": home})
        shutil.rmtree(home, ignore_errors=True)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000, help="sync sends per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another rocketq checkout to compare")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    python = client_python()
    brokers = {"this": REPO}
    if args.against:
        brokers["against"] = args.against.resolve()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in brokers}
    order = list(brokers)
    for i in range(args.rounds):
        for name in order if i % 2 == 0 else order[::-1]:
            runs[name].append(one_run(python, brokers[name], args.count))
            print(f"round {i + 1}: {name} {runs[name][-1]}", file=sys.stderr)
    result = {name: {key: {"median": round(statistics.median(r[key] for r in rs), 3),
                           "min": round(min(r[key] for r in rs), 3),
                           "max": round(max(r[key] for r in rs), 3)}
                     for key in rs[0]} for name, rs in runs.items()}
    if args.json:
        print(json.dumps(result))
        return 0
    for name, cells in result.items():
        print(f"{name} ({brokers[name]})")
        for key, v in cells.items():
            print(f"  {key:<18} {v['median']:>12,.2f}   [{v['min']:,.2f} .. {v['max']:,.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
