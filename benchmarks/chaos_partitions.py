"""``chaos.py --partitions``: the chaos run with every process in its own network namespace,
network faults mixed with the kills, and the Jepsen-style history checker as the judge.

A NameServer, three controller nodes (Raft) and three replicas of a controller-mode group
(every in-sync replica acknowledges each send), a producer sending without pause and a
consumer group reading throughout, each its own process in its own namespace on a private
bridge (the harness of ``tests/partitions``; root, ``ip`` and ``nft`` needed). Each fault is
one of :data:`KINDS`, held for 1 to 4 s (loss for three times as long), then healed or
undone; the next one starts once every replica is in sync again. Afterwards the consumer
reads to the end and the checker judges the whole history: acknowledged sends lost, read
twice by the group, and two-writer windows (two brokers of the group acknowledging writes
at one moment, with the epoch each message was stored under taken from the epoch file).
For each fault: the time from its start to the first acknowledged send begun after it, and
the longest pause between two acknowledgements from its start until sends resumed after it
was undone.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.partitions import rig  # noqa: E402
from tests.partitions.history import annotate_epochs, check, load  # noqa: E402
from tests.partitions.net import Network, Node, unavailable  # noqa: E402

#: The faults a run draws from.
KINDS = ("kill-master", "kill-slave", "stop-master", "kill-controller", "isolate-master",
         "fence-master", "cut-slave", "split-controllers", "lossy-master")
ACKED = '"outcome":"ok"'


class Cluster(rig.ControlledGroup):
    """The group under test, its clients, and how to fault and restart each member."""

    def __init__(self, net: Network, directory: str) -> None:
        super().__init__(net, directory, controllers=3)
        self.consumer, self.reads = rig.client(net, net.node("consumer"), directory,
                                               "consume", self.namesrv, "Chaos")
        self.producer, self.sends = rig.client(net, net.node("producer"), directory,
                                               "produce", self.namesrv, "Chaos",
                                               "--timeout", "2")

    def acked(self) -> int:
        return rig.count_lines(self.sends, ACKED)

    def first_ack_after(self, moment: float) -> float | None:
        firsts = [op.end for op in load([self.sends])
                  if op.outcome == "ok" and op.start >= moment]
        return min(firsts) - moment if firsts else None

    def restart_broker(self, node: Node) -> None:
        if self.procs[node.name].poll() is None:
            return
        rig.start(self.net, node, ["broker", "-c", os.path.join(self.directory,
                                                                 f"{node.name}.conf")],
                  self.directory, node.name)
        self.procs[node.name] = self.net.procs[-1]

    def restart_controller(self, node: Node) -> None:
        if self.ctl_procs[node.name].poll() is None:
            return
        rig.controller(self.net, node, self.directory, self.controller_nodes)
        self.ctl_procs[node.name] = self.net.procs[-1]

    def leader_node(self) -> Node | None:
        addr = rig.controller_leader(self.controllers)
        return next((n for n, a in zip(self.controller_nodes, self.controllers)  # noqa: B905
                     if a == addr), None)


def inject(cluster: Cluster, kind: str, hold: float, rng: random.Random) -> float:
    """Apply fault ``kind`` for ``hold`` seconds, then undo it; when it began (time.time())."""
    net = cluster.net
    master = cluster.master() or cluster.nodes[0]
    slaves = [n for n in cluster.nodes if n is not master]
    began = time.time()
    if kind in ("kill-master", "kill-slave"):
        victim = master if kind == "kill-master" else rng.choice(slaves)
        cluster.procs[victim.name].kill()
        cluster.procs[victim.name].wait()
        time.sleep(hold)
        cluster.restart_broker(victim)
    elif kind == "stop-master":
        import signal

        cluster.procs[master.name].send_signal(signal.SIGSTOP)
        time.sleep(hold)
        cluster.procs[master.name].send_signal(signal.SIGCONT)
    elif kind == "kill-controller":
        victim = rng.choice(cluster.controller_nodes)
        cluster.ctl_procs[victim.name].kill()
        cluster.ctl_procs[victim.name].wait()
        time.sleep(hold)
        cluster.restart_controller(victim)
    else:
        if kind in ("isolate-master", "fence-master"):
            pairs = [(master, c) for c in cluster.controller_nodes]
            if kind == "isolate-master":
                pairs += [(master, s) for s in slaves]
        elif kind == "cut-slave":
            pairs = [(master, rng.choice(slaves))]
        elif kind == "split-controllers":
            leader = cluster.leader_node() or cluster.controller_nodes[0]
            pairs = [(leader, c) for c in cluster.controller_nodes if c is not leader]
        else:  # lossy-master
            pairs = [(master, n) for n in net.nodes.values() if n is not master]
            hold *= 3
        for a, b in pairs:
            if kind == "lossy-master":
                net.lossy(a, b, 0.3)
            else:
                net.cut(a, b)
        began = time.time()
        time.sleep(hold)
        net.heal_all()
    return began


def summary(gaps: list[float | None], pauses: list[float]) -> dict[str, object]:
    """A fault kind's count, its times to the first acknowledged send, and its longest
    pauses between two acknowledgements."""
    done = [g for g in gaps if g is not None]
    return {"count": len(gaps), "no_ack_within_60_s": len(gaps) - len(done),
            "first_ack_median_s": round(statistics.median(done), 3) if done else None,
            "first_ack_max_s": round(max(done), 3) if done else None,
            "pause_median_s": round(statistics.median(pauses), 3) if pauses else None,
            "pause_max_s": round(max(pauses), 3) if pauses else None}


def longest_pause(ack_times: list[float], begin: float, end: float) -> float:
    """The longest time without an acknowledgement from ``begin`` to ``end`` (``ack_times``
    sorted): a fault that lets the old master acknowledge until its lease runs out has its
    first acknowledgement at once, and its pause here."""
    import bisect

    inside = ack_times[bisect.bisect_left(ack_times, begin):bisect.bisect_right(ack_times, end)]
    marks = [begin, *inside, end]
    return max(b - a for a, b in zip(marks, marks[1:]))  # noqa: B905


def run(faults: int, seed: int, quiet: bool) -> dict[str, object]:
    """``faults`` faults drawn with ``seed``; the counts and times (see the module)."""
    why = unavailable()
    if why:
        raise SystemExit(f"chaos --partitions needs network namespaces: {why}")
    rng = random.Random(seed)
    directory = tempfile.mkdtemp(prefix="rocketq-chaos-net-")
    per_kind: dict[str, list[float | None]] = defaultdict(list)
    windows: list[tuple[str, float, float]] = []  # kind, began, sends resumed (or gave up)
    first_ack: list[float] = []
    log: list[str] = []
    with Network() as net:
        cluster = Cluster(net, directory)
        if not rig.wait_until(lambda: cluster.acked() >= 100, 30):
            raise RuntimeError("no steady acknowledged sends")
        for n in range(faults):
            rig.wait_until(cluster.whole, 60)  # one failure at a time
            kind = rng.choice(KINDS)
            hold = rng.uniform(1.0, 4.0)
            began = inject(cluster, kind, hold, rng)
            undone = time.time()
            # Sends go on after the fault is undone: a send begun since then acknowledged.
            rig.wait_until(lambda u=undone: cluster.first_ack_after(u) is not None, 60)
            gap = cluster.first_ack_after(began)
            per_kind[kind].append(gap)
            after = cluster.first_ack_after(undone)
            windows.append((kind, began, undone + (after if after is not None else 60)))
            if gap is not None:
                first_ack.append(gap)
            log.append(f"{kind} for {hold:.1f} s: first acknowledged send "
                       + (f"{gap:.2f} s after it began" if gap is not None
                          else "not within 60 s"))
            if not quiet:
                print(f"{n + 1:3}. {log[-1]}; acknowledged so far {cluster.acked()}",
                      file=sys.stderr, flush=True)
        rig.wait_until(cluster.whole, 60)
        rig.stop(cluster.producer)
        total = cluster.acked()
        rig.wait_until(lambda: rig.count_lines(cluster.reads) >= total, 60)
        time.sleep(1)
        rig.stop(cluster.consumer)
        ops = load([cluster.sends, cluster.reads])
        # Every replica follows the last master and holds its epoch file by now.
        rig.wait_until(lambda: len({tuple(rig.epochs_of(directory, n))
                                    for n in cluster.nodes}) == 1, 10)
        epochs = {n.name: rig.epochs_of(directory, n) for n in cluster.nodes}
        annotate_epochs(ops, cluster.epochs())
    verdict = check(ops)
    if verdict.violations:  # keep the logs, histories and stores to look into
        print(f"violations: everything is kept in {directory}", file=sys.stderr)
    acks = sorted(op.end for op in ops if op.kind == "send" and op.outcome == "ok")
    pauses: dict[str, list[float]] = defaultdict(list)
    for kind, began, until in windows:
        pauses[kind].append(longest_pause(acks, began, until))
    every_pause = [p for ps in pauses.values() for p in ps]
    if not verdict.violations:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    return {
        "faults": len(log), "acked": verdict.stats.get("acknowledged", 0),
        "unknown": verdict.stats.get("unknown", 0),
        "lost": len(verdict.of("lost")), "duplicated": len(verdict.of("duplicate")),
        "two_writer_windows": len(verdict.of("two-writers")),
        "stale_writes": len(verdict.of("stale-write")),
        "offset_clashes": len(verdict.of("offset-clash")),
        "first_ack_median_s": round(statistics.median(first_ack), 3) if first_ack else None,
        "first_ack_max_s": round(max(first_ack), 3) if first_ack else None,
        "no_ack_within_60_s": len(log) - len(first_ack),
        "pause_median_s": round(statistics.median(every_pause), 3) if every_pause else None,
        "pause_max_s": round(max(every_pause), 3) if every_pause else None,
        "per_kind": {kind: summary(gaps, pauses[kind])
                     for kind, gaps in sorted(per_kind.items())},
        "log": log,
        "violations": [str(v) for v in verdict.violations[:20]],
        "epoch_files_agree": len({tuple(entries) for entries in epochs.values()}) == 1,
        "epochs": {name: [list(e) for e in entries] for name, entries in epochs.items()}}
