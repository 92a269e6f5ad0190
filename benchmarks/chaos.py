"""Chaos under load: random SIGKILL and SIGSTOP of masters, slaves and controller nodes of a
controller-mode broker group while a producer sends without pause; at the end, how many
acknowledged messages were lost and how many were read twice.

    python benchmarks/chaos.py                  # 20 faults, a table
    python benchmarks/chaos.py --kills 5 --json # one JSON object
    python benchmarks/chaos.py --partitions --faults 30 --json  # network faults too (root)

Three controller nodes (Raft) and three replicas (every in-sync replica acknowledges each
send, SYNC_FLUSH), each its own process on loopback. Each fault picks a victim (the master,
a slave or a controller node) and a signal: SIGKILL, then a restart a few seconds later, or
SIGSTOP for a few seconds, then SIGCONT. Bounded: ``--kills`` faults, each at most 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ha_bench import (  # noqa: E402
    SteadySender,
    broker_addrs,
    free_port,
    read_back,
    replica_conf,
    replica_info,
    spawn,
    stop_all,
    wait_until,
)

from rocketq.remoting import run  # noqa: E402


class Group:
    """The processes under test, and how to start each again."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        ns_port = free_port()
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.ns = spawn(["namesrv", "--port", str(ns_port)], directory, "namesrv")
        ports = [free_port(pair=True) for _ in range(3)]  # Raft uses port + 1
        self.controllers = [f"127.0.0.1:{p}" for p in ports]
        #: name -> (argv, process)
        self.members: dict[str, tuple[list[str], subprocess.Popen[str]]] = {}
        for i, port in enumerate(ports):
            argv = ["controller", "--port", str(port), "--peers", ",".join(self.controllers)]
            self.members[f"controller-{i}"] = (argv, spawn(argv, directory, f"controller-{i}"))
        self.broker_names: dict[str, str] = {}  # address -> member name
        for i in range(3):
            addr, conf = replica_conf(directory, i, self.namesrv, self.controllers)
            argv = ["broker", "-c", conf]
            self.members[f"replica-{i}"] = (argv, spawn(argv, directory, f"replica-{i}"))
            self.broker_names[addr] = f"replica-{i}"

    def info(self) -> dict:
        for addr in self.controllers:
            got = run(replica_info(addr))
            if got:
                return got
        return {}

    def master(self) -> str | None:
        try:
            addr = run(broker_addrs(self.namesrv, "Chaos")).get(0)
        except Exception:
            return None
        return self.broker_names.get(addr) if addr else None

    def restart(self, name: str) -> None:
        argv, proc = self.members[name]
        if proc.poll() is None:
            return
        self.members[name] = (argv, spawn(argv, self.directory, name))

    def stop(self) -> None:
        stop_all([self.ns] + [proc for _, proc in self.members.values()])


def chaos(kills: int, seed: int, quiet: bool) -> dict[str, object]:
    rng = random.Random(seed)
    directory = tempfile.mkdtemp(prefix="rocketq-chaos-")
    group = Group(directory)
    sender = SteadySender(group.namesrv, "Chaos", "chaos")

    def whole() -> bool:
        return len(group.info().get("syncStateSet", [])) == 3

    faults: list[str] = []
    try:
        try:
            if not wait_until(whole, 60):
                raise RuntimeError("the group never got its replicas in sync")
            sender.start()
            for n in range(kills):
                # Each fault starts from a whole group, so it tests one failure at a time.
                wait_until(whole, 30)
                kind = rng.choice(["master", "slave", "controller"])
                if kind == "master":
                    name = group.master() or "replica-0"
                elif kind == "slave":
                    master = group.master()
                    name = rng.choice([m for m in group.members
                                       if m.startswith("replica") and m != master])
                else:
                    name = rng.choice([m for m in group.members if m.startswith("controller")])
                sig = rng.choice(["SIGKILL", "SIGSTOP"])
                pause = rng.uniform(1.0, 4.0)
                _, proc = group.members[name]
                before = len(sender.acked)
                if sig == "SIGKILL":
                    proc.kill()
                    proc.wait()
                    time.sleep(pause)
                    group.restart(name)
                else:
                    proc.send_signal(signal.SIGSTOP)
                    time.sleep(pause)
                    proc.send_signal(signal.SIGCONT)
                resumed = wait_until(lambda b=before: len(sender.acked) > b, 30)
                faults.append(f"{sig} {kind} {name} for {pause:.1f} s"
                              + ("" if resumed else " (sends did not resume within 30 s)"))
                if not quiet:
                    print(f"{n + 1:3}. {faults[-1]}; acknowledged so far {len(sender.acked)}",
                          file=sys.stderr, flush=True)
            time.sleep(1)
        finally:
            sender.stop()
        wait_until(lambda: len(group.info().get("syncStateSet", [])) >= 1, 30)
        counts = read_back(group.namesrv, "Chaos", "chaos-reader", sender.acked)
    finally:
        group.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return {"kills": len(faults), **counts, "faults": faults}


def partitions(faults: int, seed: int, as_json: bool) -> int:
    """``--partitions``: see chaos_partitions.py."""
    from chaos_partitions import run as run_partitions

    result = run_partitions(faults, seed, quiet=as_json)
    if as_json:
        print(json.dumps({k: v for k, v in result.items() if k not in ("log", "epochs")}
                         | {"seed": seed}))
    else:
        print(f"chaos --partitions, seed {seed}: {result['faults']} faults")
        print(f"{'fault':<20}{'count':>6}{'first ack median s':>20}{'max s':>8}"
              f"{'pause median s':>16}{'max s':>8}")
        for kind, row in result["per_kind"].items():
            print(f"{kind:<20}{row['count']:>6}{row['first_ack_median_s'] or '-':>20}"
                  f"{row['first_ack_max_s'] or '-':>8}{row['pause_median_s'] or '-':>16}"
                  f"{row['pause_max_s'] or '-':>8}")
        print(f"acknowledged {result['acked']}, unknown {result['unknown']}, lost "
              f"{result['lost']}, read twice {result['duplicated']}, two-writer windows "
              f"{result['two_writer_windows']}; first acknowledged send after a fault: "
              f"median {result['first_ack_median_s']} s, max {result['first_ack_max_s']} s")
        for violation in result["violations"]:
            print(f"  {violation}")
        if result["violations"] or not result["epoch_files_agree"]:
            print(f"epoch files: {result['epochs']}")
    return 0 if not result["violations"] and result["epoch_files_agree"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", "--faults", dest="kills", type=int, default=20,
                        help="faults to inject (default 20)")
    parser.add_argument("--partitions", action="store_true",
                        help="every process in its own network namespace, network faults "
                             "mixed with the kills, the history checker as judge (root)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    if args.partitions:
        return partitions(args.kills, seed, args.json)
    result = chaos(args.kills, seed, quiet=args.json)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "faults"} | {"seed": seed}))
        return 0
    print(f"chaos, seed {seed}: {result['kills']} faults; acknowledged {result['acked']}, "
          f"lost {result['lost']}, read twice {result['duplicated']}")
    return 0 if result["lost"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
