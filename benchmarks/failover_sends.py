"""Sends across master failovers: a producer with default settings (``send_timeout`` 3 s,
``retries`` 2) sends without pause while the master of a controller-mode group is killed
with SIGKILL again and again; how many sends failed, how long the route took to name the new
master, and how many acknowledged messages were lost.

    python benchmarks/failover_sends.py            # 10 kills, a table
    python benchmarks/failover_sends.py --json     # one JSON object
    python benchmarks/failover_sends.py --kills 3  # shorter

The processes are those ``rocketq cluster`` starts: a NameServer, a controller (with a data
directory) and three replicas of broker-a in controller mode (every in-sync replica
acknowledges each send), each its own process on loopback, managed here so that the killed
master can be started again (it rejoins as a slave) before the next kill. Each kill waits
until all three replicas are in sync again. The time to the new master is from the SIGKILL
to the first NameServer route (polled every 10 ms) whose master is another broker. At the
end a new consumer group reads the topic back and every acknowledged id must be there.
Bounded: ``--kills`` kills, each at most 60 s, the read-back at most 120 s; the data
directories are removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ha_bench import (  # noqa: E402
    broker_addrs,
    free_port,
    read_back,
    replica_info,
    spawn,
    stop_all,
    wait_until,
)

from rocketq.remoting import run  # noqa: E402

TOPIC = "FailoverSends"
REPLICAS = 3


class DefaultSender:
    """A producer with default settings sending one message after another (a short pause
    between sends) until stopped: the ids of acknowledged sends, and every failed send with
    when it failed, its exception type and how long it took."""

    def __init__(self, namesrv: str) -> None:
        self.acked: list[str] = []
        self.failed: list[dict[str, object]] = []
        self.sent = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(namesrv,))

    def start(self) -> None:
        self._thread.start()

    def _run(self, namesrv: str) -> None:
        from rocketq import Message, Producer, SendStatus

        with Producer("bench-failover-sends", namesrv=namesrv) as producer:
            for i in range(10_000_000):
                if self._halt.is_set():
                    return
                began = time.monotonic()
                self.sent += 1
                try:
                    r = producer.send(Message(TOPIC, b"%d" % i, keys=[f"k{i}"]))
                except Exception as exc:  # counted: the figure this benchmark is about
                    self.failed.append({"at": began, "error": type(exc).__name__,
                                        "took_s": round(time.monotonic() - began, 3),
                                        "message": str(exc)[:200]})
                    time.sleep(0.02)
                    continue
                if r.status is SendStatus.SEND_OK:
                    self.acked.append(r.msg_id)
                else:
                    self.failed.append({"at": began, "error": r.status.name,
                                        "took_s": round(time.monotonic() - began, 3)})
                time.sleep(0.005)

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(30)


def broker_conf(directory: str, index: int, namesrv: str, controller: str) -> tuple[str, str]:
    """The broker.conf ``rocketq cluster`` writes for a replica (small files); its address
    and path."""
    port = free_port(pair=True)
    root = os.path.join(directory, f"broker-a-{index}")
    os.makedirs(root, exist_ok=True)
    conf = os.path.join(root, "broker.conf")
    with open(conf, "w") as fh:
        fh.write(f"brokerClusterName=DefaultCluster\nbrokerName=broker-a\n"
                 f"namesrvAddr={namesrv}\nlistenPort={port}\nhaListenPort=0\n"
                 f"storePathRootDir={root}\nenableControllerMode=true\n"
                 f"controllerAddr={controller}\nallAckInSyncStateSet=true\n"
                 "mappedFileSizeCommitLog=67108864\nmaxHashSlotNum=100000\n"
                 "maxIndexNum=400000\n")
    return f"127.0.0.1:{port}", conf


def bench(kills: int, quiet: bool) -> dict[str, object]:
    directory = tempfile.mkdtemp(prefix="rocketq-failover-sends-")
    procs = []
    try:
        ns_port = free_port()
        namesrv = f"127.0.0.1:{ns_port}"
        procs.append(spawn(["namesrv", "--port", str(ns_port)], directory, "namesrv"))
        ctrl_port = free_port(pair=True)  # the controller's Raft port is the next one
        controller = f"127.0.0.1:{ctrl_port}"
        procs.append(spawn(["controller", "--port", str(ctrl_port), "--data-dir",
                            os.path.join(directory, "controller")], directory, "controller"))
        confs: dict[str, str] = {}
        brokers = {}
        for i in range(REPLICAS):
            addr, conf = broker_conf(directory, i, namesrv, controller)
            confs[addr] = conf
            brokers[addr] = spawn(["broker", "-c", conf], directory, f"broker-a-{i}")

        def in_sync() -> int:
            return len(run(replica_info(controller)).get("syncStateSet", []))

        def master() -> str | None:
            try:
                return run(broker_addrs(namesrv, TOPIC)).get(0)
            except Exception:  # no route yet, or no NameServer answer
                return None

        sender = DefaultSender(namesrv)
        to_route: list[float] = []
        try:
            if not wait_until(lambda: in_sync() == REPLICAS, 60):
                raise RuntimeError("the group never got all its replicas in sync")
            sender.start()
            if not wait_until(lambda: len(sender.acked) > 50 and master() is not None, 60):
                raise RuntimeError("no send was acknowledged")
            for round_ in range(kills):
                count = len(sender.acked)
                if not wait_until(lambda c=count: len(sender.acked) > c + 50
                                  and in_sync() == REPLICAS, 60):
                    raise RuntimeError("the group did not get its replicas in sync again")
                old = master()
                assert old is not None
                brokers[old].kill()
                killed = time.monotonic()
                brokers[old].wait()
                new = None
                while time.monotonic() - killed < 60:
                    new = master()
                    if new is not None and new != old:
                        break
                    time.sleep(0.01)
                else:
                    raise RuntimeError("no new master in the route within 60 s")
                to_route.append(time.monotonic() - killed)
                if not quiet:
                    print(f"kill {round_ + 1}: {old} -> {new} in the route after "
                          f"{to_route[-1]:.3f} s; failed sends so far {len(sender.failed)}",
                          file=sys.stderr, flush=True)
                time.sleep(0.5)  # sends go on at the new master
                index = list(confs).index(old)
                brokers[old] = spawn(["broker", "-c", confs[old]], directory,
                                     f"broker-a-{index}")
            time.sleep(1.0)
        finally:
            sender.stop()
            procs += list(brokers.values())
        counts = read_back(namesrv, TOPIC, "bench-failover-sends-reader", sender.acked)
    finally:
        stop_all(procs)
        shutil.rmtree(directory, ignore_errors=True)
    errors: dict[str, int] = {}
    for f in sender.failed:
        errors[str(f["error"])] = errors.get(str(f["error"]), 0) + 1
    return {
        "kills": len(to_route), "sends": sender.sent, "acknowledged": counts["acked"],
        "failed_sends": len(sender.failed), "failed_by_error": errors,
        "failed_examples": [{k: v for k, v in f.items() if k != "at"}
                            for f in sender.failed[:3]],
        "to_new_master_in_route_s": [round(t, 3) for t in to_route],
        "to_new_master_in_route_s_median": (round(statistics.median(to_route), 3)
                                            if to_route else None),
        "to_new_master_in_route_s_max": round(max(to_route), 3) if to_route else None,
        "acknowledged_lost": counts["lost"], "read_twice": counts["duplicated"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="master SIGKILLs (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not 1 <= args.kills <= 50:
        parser.error("--kills must be from 1 to 50")
    result = bench(args.kills, quiet=args.json)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:34} {value}")
    ok = (result["failed_sends"] == 0 and result["acknowledged_lost"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
