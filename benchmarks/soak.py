"""Soak test: producers and consumers of every kind against one broker for N minutes, with
broker restarts and consumer rebalances, reporting the broker's memory, open files, threads
and send latency minute by minute, and at the end whether any acknowledged message was lost.

    python benchmarks/soak.py --minutes 30          # a table
    python benchmarks/soak.py --minutes 2 --json    # one JSON object

A NameServer and a broker (ASYNC_FLUSH, data in a temporary directory) run each in its own
``rocketq`` process on loopback. Here, on one event loop thread:

- producers of normal messages, of delayed ones (delay level 1, one second) and of
  transactional ones (the local transaction commits; a check asked later commits too);
- a push consumer group whose second member joins and leaves every ``--rebalance-every``
  seconds (each time the group rebalances), and a pull consumer group;
- every ``--restart-every`` minutes the broker is stopped (SIGTERM) and started again on the
  same store and port; sends failing meanwhile are counted, not acknowledged.

Each message body is a unique key. At the end every acknowledged key must have reached
each consumer group at least once: ``lost`` counts those that never did. (POP consumption
is not there yet, so there is no POP consumer.) Growth of RSS and open files is measured
from the end of warm-up (the first minute, or the first tenth of the run if longer) to the
end, and also within the longest stretch without a restart, since a restart starts the
process afresh. Asyncio tasks are not read from the broker (nothing reports them); its
threads are, from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ha_bench import spawn, stop_all  # noqa: E402

from rocketq.cli.cluster import free_port  # noqa: E402

TOPIC = "SoakTopic"
GROUPS = ("soak-push", "soak-pull")


def proc_status(pid: int) -> dict[str, float]:
    """RSS and its anonymous part (MiB), open file descriptors and threads of a process
    (Linux /proc). RSS counts the store's mapped file pages the process touched, which a
    restart's recovery reads; the anonymous part is where a leak would show."""
    out = {"rss_mb": 0.0, "anon_mb": 0.0, "fds": 0.0, "threads": 0.0}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    out["rss_mb"] = round(int(line.split()[1]) / 1024, 1)
                elif line.startswith("RssAnon:"):
                    out["anon_mb"] = round(int(line.split()[1]) / 1024, 1)
                elif line.startswith("Threads:"):
                    out["threads"] = int(line.split()[1])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


class Broker:
    """The broker process: started, stopped and started again on the same store."""

    def __init__(self, directory: str, namesrv: str) -> None:
        self.directory = directory
        self.conf = os.path.join(directory, "broker.conf")
        with open(self.conf, "w") as fh:
            fh.write(f"brokerName=broker-a\nnamesrvAddr={namesrv}\nlistenPort={free_port()}\n"
                     f"storePathRootDir={os.path.join(directory, 'store')}\n"
                     "flushDiskType=ASYNC_FLUSH\nbrokerRole=ASYNC_MASTER\nhaListenPort=0\n"
                     "mappedFileSizeCommitLog=67108864\nmaxHashSlotNum=100000\n"
                     "maxIndexNum=400000\ntransactionTimeOut=3000\n"
                     "transactionCheckInterval=5000\n")
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.proc = spawn(["broker", "-c", self.conf], self.directory, f"broker-{self.starts}")

    def restart(self) -> float:
        """SIGTERM, wait, start again; the seconds it was away."""
        began = time.monotonic()
        assert self.proc is not None
        stop_all([self.proc])
        self.start()
        return time.monotonic() - began


class Load:
    """Producers and consumers on one event loop thread, counting as they go."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.acked: dict[str, set[bytes]] = {"normal": set(), "delayed": set(),
                                             "transactional": set()}
        self.sent = 0
        self.send_failed: Counter = Counter()
        self.got: dict[str, set[bytes]] = {g: set() for g in GROUPS}
        self.received = 0
        self.latencies: list[float] = []  # this minute's, taken by the sampler
        self.rebalances = 0
        self.error: BaseException | None = None
        self._stop_sending = threading.Event()
        self._stop_all = threading.Event()
        self.drained = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, drain: float) -> None:
        """Stop sending; wait up to ``drain`` s until every group has every acked key."""
        self._stop_sending.set()
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline and self.missing():
            time.sleep(0.5)
        self._stop_all.set()
        self._thread.join(120)

    def all_acked(self) -> set[bytes]:
        return set().union(*self.acked.values())

    def missing(self) -> dict[str, int]:
        acked = self.all_acked()
        return {g: len(acked - got) for g, got in self.got.items() if acked - got}

    def take_latencies(self) -> list[float]:
        taken, self.latencies = self.latencies, []
        return taken

    def _run(self) -> None:
        from rocketq.remoting import run

        try:
            run(self._main())
        except BaseException as exc:  # reported in the result, not lost on the thread
            self.error = exc

    async def _main(self) -> None:
        from rocketq.aio import (
            LocalTransactionState,
            Message,
            Producer,
            PullConsumer,
            PushConsumer,
            SendStatus,
            TransactionProducer,
        )

        load = self

        class Committing:
            """The local transaction commits; a check asked later says commit too."""

            def execute_local_transaction(self, message: Any, arg: Any) -> Any:
                return LocalTransactionState.COMMIT

            def check_local_transaction(self, message: Any) -> Any:
                return LocalTransactionState.COMMIT

        def on_message(group: str):
            async def listener(messages: list[Any]) -> None:
                for m in messages:
                    load.got[group].add(m.body)
                    load.received += 1
            return listener

        def push_member() -> Any:
            member = PushConsumer("soak-push", namesrv=self.namesrv, from_where="first",
                                  rebalance_interval=5.0)
            member.subscribe(TOPIC)
            member.register(on_message("soak-push"))
            return member

        first = push_member()
        await first.start()
        pull = PullConsumer("soak-pull", namesrv=self.namesrv, from_where="first",
                            rebalance_interval=5.0)
        pull.subscribe(TOPIC)
        await pull.start()
        producer = Producer("soak-producer", namesrv=self.namesrv, send_timeout=3)
        tx = TransactionProducer("soak-tx", Committing(), namesrv=self.namesrv, send_timeout=3)
        await producer.start()
        await tx.start()

        async def send(kind: str, key: bytes) -> None:
            body = b"%s-%s" % (kind.encode(), key)
            message = Message(TOPIC, body, delay_level=1 if kind == "delayed" else None)
            began = time.perf_counter()
            try:
                if kind == "transactional":
                    r = await tx.send_message_in_transaction(message)
                    ok = (r.status is SendStatus.SEND_OK
                          and r.local_state is LocalTransactionState.COMMIT)
                else:
                    r = await producer.send(message)
                    ok = r.status is SendStatus.SEND_OK
            except Exception as exc:
                self.send_failed[type(exc).__name__] += 1
                await asyncio.sleep(0.2)  # the broker is restarting, most likely
                return
            self.sent += 1
            if kind == "normal":
                self.latencies.append((time.perf_counter() - began) * 1000)
            if ok:
                self.acked[kind].add(body)
            else:
                self.send_failed[r.status.name] += 1

        async def producing(kind: str, worker: int, pause: float) -> None:
            for n in range(1_000_000_000):
                if self._stop_sending.is_set():
                    return
                await send(kind, b"%d-%d" % (worker, n))
                await asyncio.sleep(pause)

        async def polling() -> None:
            for _ in range(1_000_000_000):
                if self._stop_all.is_set():
                    return
                for m in await pull.poll(0.5):
                    self.got["soak-pull"].add(m.body)
                    self.received += 1

        async def rebalancing() -> None:
            second = None
            for _ in range(1_000_000_000):
                for _ in range(int(self.rebalance_every * 10)):
                    if self._stop_sending.is_set():
                        break
                    await asyncio.sleep(0.1)
                if self._stop_sending.is_set():
                    break
                if second is None:
                    second = push_member()
                    await second.start()
                else:
                    await second.shutdown()
                    second = None
                self.rebalances += 1
            if second is not None:
                await second.shutdown()

        async def stopper() -> None:
            while not self._stop_all.is_set():
                await asyncio.sleep(0.2)

        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(c) for c in (
            producing("normal", 0, 0.005), producing("normal", 1, 0.005),
            producing("delayed", 0, 0.05), producing("transactional", 0, 0.05), polling(),
            rebalancing())]
        await stopper()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in (producer, tx, pull, first):
            try:
                await client.shutdown()
            except Exception:
                pass

    rebalance_every = 40.0


def soak(minutes: float, restart_every: float, rebalance_every: float, quiet: bool
         ) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="rocketq-soak-")
    procs: list[subprocess.Popen[str]] = []
    broker: Broker | None = None
    load: Load | None = None
    samples: list[dict[str, Any]] = []
    restarts: list[float] = []
    try:
        ns_port = free_port()
        namesrv = f"127.0.0.1:{ns_port}"
        procs.append(spawn(["namesrv", "--port", str(ns_port)], directory, "namesrv"))
        broker = Broker(directory, namesrv)
        broker.start()
        from e2e_bench import create_topic

        from rocketq.remoting import run

        run(create_topic(namesrv, TOPIC, 8))
        load = Load(namesrv)
        load.rebalance_every = rebalance_every
        load.start()
        began = time.monotonic()
        total = minutes * 60
        next_restart = restart_every * 60 if restart_every > 0 else float("inf")
        last = (load.sent, load.received)
        for minute in range(1, int(minutes) + 2):
            end_of_minute = min(began + minute * 60, began + total)
            restarted = False
            while time.monotonic() < end_of_minute:
                now = time.monotonic() - began
                if now >= next_restart and total - now > 30:
                    restarts.append(round(broker.restart(), 1))
                    restarted = True
                    next_restart += restart_every * 60
                time.sleep(min(1.0, max(0.0, end_of_minute - time.monotonic())))
            assert broker.proc is not None
            lat = load.take_latencies()
            sample = {"minute": minute, **proc_status(broker.proc.pid),
                      "p99_ms": round(percentile(lat, 0.99), 2),
                      "p50_ms": round(percentile(lat, 0.5), 2),
                      "sent": load.sent - last[0], "consumed": load.received - last[1],
                      "restarted": restarted, "broker_start": broker.starts}
            last = (load.sent, load.received)
            samples.append(sample)
            if not quiet:
                print(json.dumps(sample), file=sys.stderr, flush=True)
            if time.monotonic() - began >= total - 0.5:
                break
        load.stop(drain=180)
    except BaseException:
        stop_all(([broker.proc] if broker is not None and broker.proc is not None else [])
                 + procs)
        shutil.rmtree(directory, ignore_errors=True)
        raise
    finally:
        if load is not None:
            load._stop_all.set()
        stop_all(([broker.proc] if broker is not None and broker.proc is not None else [])
                 + procs)
    tracebacks = 0
    for name in os.listdir(directory):
        if name.endswith(".log"):
            with open(os.path.join(directory, name), errors="replace") as fh:
                tracebacks += sum(1 for line in fh if line.startswith("Traceback"))
    shutil.rmtree(directory, ignore_errors=True)
    return summarize(samples, load, restarts, tracebacks)


def growth(values: list[float]) -> float:
    """Percent change from the first value to the last."""
    if len(values) < 2 or not values[0]:
        return 0.0
    return round((values[-1] - values[0]) / values[0] * 100, 1)


def summarize(samples: list[dict[str, Any]], load: Load, restarts: list[float],
              tracebacks: int) -> dict[str, Any]:
    warm = max(1, len(samples) // 10)  # the sample that ends warm-up
    after = samples[warm - 1:] if len(samples) > 1 else samples
    # The longest stretch one broker process ran, after its first minute.
    runs: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        runs.setdefault(s["broker_start"], []).append(s)
    longest = max((r[1:] if len(r) > 2 else r for r in runs.values()), key=len, default=[])
    acked = load.all_acked()
    lost = {g: len(acked - got) for g, got in load.got.items()}
    all_lat = [s["p99_ms"] for s in samples]
    return {
        "minutes": samples,
        "rss_growth_pct": growth([s["rss_mb"] for s in after]),
        "anon_growth_pct": growth([s["anon_mb"] for s in after]),
        "anon_growth_pct_longest_run": growth([s["anon_mb"] for s in longest]),
        "fds_growth_pct": growth([s["fds"] for s in after]),
        "threads_growth_pct": growth([s["threads"] for s in after]),
        "rss_growth_pct_longest_run": growth([s["rss_mb"] for s in longest]),
        "fds_growth_pct_longest_run": growth([s["fds"] for s in longest]),
        "longest_run_minutes": len(longest),
        "sent": load.sent, "acked": len(acked),
        "acked_by_kind": {k: len(v) for k, v in load.acked.items()},
        "send_failed": sum(load.send_failed.values()),
        "send_failures": dict(load.send_failed),
        "consumed": load.received,
        "consumed_by_group": {g: len(v) for g, v in load.got.items()},
        "lost": sum(lost.values()), "lost_by_group": lost,
        "p99_ms": max(all_lat) if all_lat else 0.0,
        "p99_ms_median_minute": percentile(all_lat, 0.5),
        "restarts": len(restarts), "restart_seconds": restarts,
        "rebalances": load.rebalances, "tracebacks": tracebacks,
        "client_error": repr(load.error) if load.error else None,
    }


def print_table(r: dict[str, Any]) -> None:
    print(f"{'min':>4}{'RSS MiB':>9}{'anon':>7}{'fds':>6}{'threads':>8}{'p50 ms':>8}{'p99 ms':>8}"
          f"{'sent':>8}{'consumed':>10}")
    for s in r["minutes"]:
        mark = " restart" if s["restarted"] else ""
        print(f"{s['minute']:>4}{s['rss_mb']:>9.1f}{s['anon_mb']:>7.1f}{s['fds']:>6.0f}{s['threads']:>8.0f}"
              f"{s['p50_ms']:>8.2f}{s['p99_ms']:>8.2f}{s['sent']:>8}{s['consumed']:>10}{mark}")
    print(f"after warm-up: RSS {r['rss_growth_pct']:+.1f} % (anonymous "
          f"{r['anon_growth_pct']:+.1f} %), open files "
          f"{r['fds_growth_pct']:+.1f} % (longest run without restart, "
          f"{r['longest_run_minutes']} min: RSS {r['rss_growth_pct_longest_run']:+.1f} %, "
          f"files {r['fds_growth_pct_longest_run']:+.1f} %)")
    print(f"sent {r['sent']:,}, acknowledged {r['acked']:,} {r['acked_by_kind']}, failed "
          f"{r['send_failed']} {r['send_failures']}; consumed {r['consumed']:,}; lost "
          f"{r['lost']} {r['lost_by_group']}; {r['restarts']} restarts, {r['rebalances']} "
          f"rebalances; worst minute's p99 {r['p99_ms']} ms; tracebacks {r['tracebacks']}")


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long (default 30)")
    parser.add_argument("--restart-every", type=float, default=None,
                        help="minutes between broker restarts (default 5, or half the run "
                             "if shorter than 10 minutes; 0: never)")
    parser.add_argument("--rebalance-every", type=float, default=40.0,
                        help="seconds between a push consumer joining and leaving (default 40)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # stop the servers started, as Ctrl-C does
    restart_every = args.restart_every
    if restart_every is None:
        restart_every = 5.0 if args.minutes >= 10 else args.minutes / 2
    result = soak(args.minutes, restart_every, args.rebalance_every, quiet=args.json)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0 if result["lost"] == 0 and result["tracebacks"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
