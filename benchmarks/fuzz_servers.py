"""Network fuzzer: malformed, truncated, oversized and valid-but-hostile requests at every
port of a running cluster while healthy clients send and consume; at the end, how many
frames went out, whether any server logged a traceback, whether any healthy request failed
or message was lost, and how each server's memory moved.

    python benchmarks/fuzz_servers.py                       # 1,000,000 frames, a table
    python benchmarks/fuzz_servers.py --frames 20000 --json # one JSON object

The cluster is a NameServer, an ASYNC_MASTER broker with a slave on its HA port, and a
controller node, each its own ``rocketq`` process on loopback, logging to a file. Several
fuzzing connections (asyncio, bounded in number) send:

- random bytes; valid frames cut short (then more bytes, or a close mid-frame);
- lengths that lie: huge, negative, shorter than the header length field, a header length
  past the frame, an unknown serialisation type; frames over the 16 MiB limit; bodies over
  the broker's message size;
- bad JSON headers (not JSON, not an object, fields of the wrong type) and bad ROCKETMQ
  binary headers (lengths past the end, bytes that are not UTF-8);
- unknown request codes; valid codes with hostile extFields and bodies (numbers past Java's
  int and long, negative queue ids, words where numbers go, 10,000-character and illegal
  names, unknown topics and groups);
- on the HA port, reports that are garbage, negative, past the master's end, or real ones
  that make the master stream its CommitLog;
- floods of connections (bounded in number), each closed at once or after a second.

Every request that is whole and well framed must be answered within 5 s (exempt: pulls,
which may be held, and END_TRANSACTION and NOTIFY_BROKER_ROLE_CHANGED, which RocketMQ
answers only in some cases), and every frame that can never be whole must make the server
close the connection.
Hostile names never name what the healthy clients use, so that everything the servers
rightly obey (deleting a topic, resetting offsets) leaves them alone: a healthy failure is
the servers' fault. Meanwhile a producer, a push consumer group and a pull consumer group
run on a thread of their own. Bounded: ``--frames`` frames, at most ``--seconds`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fuzz_cluster import Cluster, Healthy, create_topics  # noqa: E402
from fuzz_requests import HEALTHY_TOPIC  # noqa: E402
from fuzz_wire import Tally, fuzz  # noqa: E402


def run_fuzz(frames: int, seconds: float, workers: int, seed: int, quiet: bool,
             keep: bool = False) -> dict[str, Any]:
    from rocketq.remoting import run

    directory = tempfile.mkdtemp(prefix="rocketq-fuzz-")
    cluster = Cluster(directory)
    healthy: Healthy | None = None
    try:
        cluster.start()
        run(create_topics(f"127.0.0.1:{cluster.ports['master']}", cluster.namesrv))
        healthy = Healthy(cluster.namesrv, HEALTHY_TOPIC)
        healthy.start()
        time.sleep(3)  # the healthy clients are up and flowing
        rss_start = cluster.rss()
        rss_warm: dict[str, float] = {}
        tally = Tally()
        warm = threading.Event()

        def on_warm() -> None:
            rss_warm.update(cluster.rss())
            if not quiet:
                print(f"warmed up after {tally.frames} frames: RSS {rss_warm}", file=sys.stderr,
                      flush=True)

        began = time.monotonic()
        stop_progress = threading.Event()

        def progress() -> None:
            while not stop_progress.wait(10):
                rate = tally.frames / max(1e-9, time.monotonic() - began)
                print(f"{tally.frames} frames ({rate:.0f}/s), healthy sent {healthy.sent} "
                      f"failed {healthy.failed}, unanswered {sum(tally.unanswered.values())}",
                      file=sys.stderr, flush=True)

        if not quiet:
            threading.Thread(target=progress, daemon=True).start()
        try:
            run(fuzz(cluster.targets(), frames, seconds, workers, seed, tally, warm, on_warm))
        finally:
            stop_progress.set()
        elapsed = time.monotonic() - began
        if not rss_warm:
            rss_warm = cluster.rss()
        time.sleep(2)  # let the servers settle (held pulls, floods closing)
        healthy.stop()
        alive = cluster.alive()
        rss_end = cluster.rss()
    except BaseException:
        cluster.stop()
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    finally:
        if healthy is not None:
            healthy._stop.set()
        cluster.stop()
    logs = cluster.logs()
    if keep:
        print(f"logs kept in {directory}", file=sys.stderr)
    else:
        shutil.rmtree(directory, ignore_errors=True)
    growth = {n: round((rss_end[n] - rss_warm[n]) / rss_warm[n] * 100, 1)
              for n in rss_end if rss_warm.get(n)}
    lost = healthy.lost()
    return {
        "frames_sent": tally.frames, "frames_valid": tally.valid,
        "frames_malformed": tally.malformed, "frames_ha": tally.ha,
        "frames_per_s": round(tally.frames / elapsed, 1), "seconds": round(elapsed, 1),
        "connections": tally.connections, "connect_failed": tally.connect_failed,
        "floods": tally.floods,
        "answered": tally.answered, "unanswered": sum(tally.unanswered.values()),
        "unanswered_by_target": dict(tally.unanswered),
        "not_closed": sum(tally.not_closed.values()),
        "not_closed_by_kind": dict(tally.not_closed), "bad_answers": tally.bad_answers,
        "tracebacks": sum(v["tracebacks"] for v in logs.values()),
        "error_lines": sum(v["errors"] for v in logs.values()),
        "logs": logs, "servers_alive": alive,
        "healthy_sent": healthy.sent, "healthy_acked": len(healthy.acked),
        "healthy_failed": healthy.failed, "healthy_failures": dict(healthy.failures),
        "healthy_lost": sum(lost.values()), "healthy_lost_by_group": lost,
        "healthy_error": repr(healthy.error) if healthy.error else None,
        "rss_mb_start": rss_start, "rss_mb_after_warmup": rss_warm, "rss_mb_end": rss_end,
        "rss_growth_pct_by_server": growth,
        "rss_growth_pct": max(growth.values()) if growth else 0.0,
        "seed": seed,
    }


def print_table(r: dict[str, Any]) -> None:
    print(f"fuzz, seed {r['seed']}: {r['frames_sent']:,} frames in {r['seconds']} s "
          f"({r['frames_per_s']:,.0f}/s): {r['frames_valid']:,} well framed, "
          f"{r['frames_malformed']:,} malformed, {r['frames_ha']:,} on the HA port; "
          f"{r['connections']:,} connections, {r['floods']} floods")
    print(f"answered {r['answered']:,}, unanswered {r['unanswered']}, malformed frames not "
          f"closed {r['not_closed']}, malformed answers {r['bad_answers']}")
    print(f"healthy: sent {r['healthy_sent']:,}, failed {r['healthy_failed']}, lost "
          f"{r['healthy_lost']}")
    print(f"{'server':<12}{'alive':>7}{'tracebacks':>12}{'errors':>8}{'RSS start':>11}"
          f"{'warm':>8}{'end':>8}{'growth':>9}")
    for name, log in r["logs"].items():
        print(f"{name:<12}{str(r['servers_alive'][name]):>7}{log['tracebacks']:>12}"
              f"{log['errors']:>8}{r['rss_mb_start'][name]:>11.1f}"
              f"{r['rss_mb_after_warmup'][name]:>8.1f}{r['rss_mb_end'][name]:>8.1f}"
              f"{r['rss_growth_pct_by_server'].get(name, 0.0):>8.1f}%")
        for kind, n in log["error_kinds"].items():
            print(f"    {n:>6} x {kind}")
    if r["unanswered_by_target"]:
        print("unanswered (target, code):", r["unanswered_by_target"])
    if r["healthy_failures"]:
        print("healthy failures:", r["healthy_failures"])


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000,
                        help="frames to send (default 1,000,000)")
    parser.add_argument("--seconds", type=float, default=3600.0,
                        help="stop after this long whatever was sent (default 3600)")
    parser.add_argument("--workers", type=int, default=8, help="fuzzing connections at once")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the servers' logs and stores (their directory is printed)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # stop the servers started, as Ctrl-C does
    seed = args.seed if args.seed is not None else int(time.time())
    result = run_fuzz(args.frames, args.seconds, args.workers, seed, quiet=args.json,
                      keep=args.keep_logs)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    clean = (result["tracebacks"] == 0 and result["healthy_failed"] == 0
             and result["healthy_lost"] == 0 and all(result["servers_alive"].values()))
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
