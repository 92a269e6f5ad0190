"""Replication benchmark: pipelined send throughput and latency of a single broker, an
ASYNC_MASTER with one slave and a SYNC_MASTER with one and with two slaves, and how far the
slave trails its master under that load, measured in one run on this machine.

    python benchmarks/ha_bench.py            # a table
    python benchmarks/ha_bench.py --json     # one JSON object

Each setup runs a NameServer and every broker in its own ``rocketq`` process, as they are
deployed (loopback, ASYNC_FLUSH, data in a temporary directory); the producer runs here on
rocketq's asyncio client with 128-byte messages and ``--window`` sends in flight. The setups
take turns ``--repeat`` times and each figure is the median, with the spread, and the CPU
cores the producer, the master and the slaves used. Then, in controller mode (a controller
and three replicas), the master is killed ``--kills`` times under a steady producer: the
seconds until the new master takes a send, and how many acknowledged messages were lost or
read twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e_bench import BODY, create_topic, percentile  # noqa: E402

from rocketq.aio import Message, Producer  # noqa: E402
from rocketq.cli.cluster import free_port  # noqa: E402
from rocketq.remoting import run  # noqa: E402

#: setup: (slaves, the master's brokerRole)
SETUPS = {
    "single": (0, "ASYNC_MASTER"),
    "async_master": (1, "ASYNC_MASTER"),
    "sync_master": (1, "SYNC_MASTER"),
    "sync_master_2_slaves": (2, "SYNC_MASTER"),
}


async def broker_addrs(namesrv: str, topic: str) -> dict[int, str]:
    from rocketq.client.instance import ClientInstance

    instance = ClientInstance(namesrv)
    try:
        route = await instance.fetch_route(topic)
        assert route is not None
        return {int(k): v for k, v in next(iter(route.broker_addrs.values())).items()}
    finally:
        await instance.remoting.close()


async def max_offset(client, addr: str) -> int:
    from rocketq.protocol import RemotingCommand, RequestCode

    r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
                            3)
    return int(json.loads(r.body)["table"]["commitLogMaxOffset"])


async def measure(namesrv: str, count: int, window: int, slaves: int) -> dict[str, float]:
    from rocketq.remoting import RemotingClient

    topic = "BenchHA"
    await create_topic(namesrv, topic, 8)
    addrs = await broker_addrs(namesrv, topic)
    for _ in range(100):  # every slave registered (and so connected to its master)
        if len(addrs) == slaves + 1:
            break
        await asyncio.sleep(0.1)
        addrs = await broker_addrs(namesrv, topic)
    latencies: list[float] = []
    lags: list[int] = []
    done = asyncio.Event()
    client = RemotingClient()

    async def sample_lag() -> None:
        if 1 not in addrs:
            return
        while not done.is_set():
            slave = await max_offset(client, addrs[1])
            master = await max_offset(client, addrs[0])
            lags.append(max(0, master - slave))
            await asyncio.sleep(0.05)

    async with Producer("bench-ha", namesrv=namesrv) as producer:
        for _ in range(100):  # warm up connections and routes
            await producer.send(Message(topic, BODY))
        for _ in range(200):  # a SYNC_MASTER answers SEND_OK once its slave is linked
            if (await producer.send(Message(topic, BODY))).status.name == "SEND_OK":
                break
            await asyncio.sleep(0.05)
        per_worker = max(1, count // window)

        async def worker() -> None:
            for _ in range(per_worker):
                began = time.perf_counter()
                result = await producer.send(Message(topic, BODY))
                latencies.append((time.perf_counter() - began) * 1000)
                assert result.status.name == "SEND_OK", result.status

        sampler = asyncio.get_running_loop().create_task(sample_lag())
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        elapsed = time.perf_counter() - t0
        done.set()
        await sampler
    await client.close()
    return {"msgs_s": per_worker * window / elapsed,
            "p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 0.99),
            "lag_p99": percentile(lags, 0.99) if lags else 0.0}


def spawn(args: list[str], directory: str, name: str) -> subprocess.Popen[str]:
    """Start ``rocketq <args>`` in its own process and wait until it listens; its log goes to
    a file so a full pipe can never stall it."""
    log = open(os.path.join(directory, f"{name}.log"), "w")  # noqa: SIM115 (closed with it)
    # Brokers serve no gRPC port unless a run asks for one: several start on one machine.
    env = {"ROCKETQ_GRPC_PORT": "0", **os.environ}
    proc = subprocess.Popen([sys.executable, "-m", "rocketq.cli", "--log-level", "WARNING",
                             *args], stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    log.close()
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "listening" in line:
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    raise RuntimeError(f"rocketq {' '.join(args)} did not start; see {name}.log")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(setup: str, count: int, window: int) -> dict[str, float]:
    """One run of a setup: a NameServer, a master and its slaves, each in its own process, as
    they would be deployed (on this machine they share its cores with the producer)."""
    slaves, role = SETUPS[setup]
    directory = tempfile.mkdtemp(prefix="rocketq-ha-bench-")
    procs: list[subprocess.Popen[str]] = []
    try:
        ns_port = free_port()
        namesrv = f"127.0.0.1:{ns_port}"
        procs.append(spawn(["namesrv", "--port", str(ns_port)], directory, "namesrv"))
        ha_port = free_port()
        for broker_id in range(slaves + 1):
            conf = os.path.join(directory, f"broker-{broker_id}.conf")
            with open(conf, "w") as fh:
                fh.write(f"brokerName=broker-a\nbrokerId={broker_id}\nnamesrvAddr={namesrv}\n"
                         f"listenPort={free_port()}\nflushDiskType=ASYNC_FLUSH\n"
                         f"storePathRootDir={os.path.join(directory, str(broker_id))}\n"
                         "maxHashSlotNum=500000\nmaxIndexNum=2000000\n")
                if broker_id == 0:
                    fh.write(f"brokerRole={role}\nhaListenPort={ha_port}\n")
                else:
                    fh.write(f"brokerRole=SLAVE\nhaListenPort=0\n"
                             f"haMasterAddress=127.0.0.1:{ha_port}\n")
            procs.append(spawn(["broker", "-c", conf], directory, f"broker-{broker_id}"))
        brokers = procs[1:]
        cpu_before = [cpu_seconds(p.pid) for p in brokers]
        own_before = time.process_time()
        began = time.perf_counter()
        result = run(measure(namesrv, count, window, slaves))
        elapsed = time.perf_counter() - began
        result["producer_cores"] = (time.process_time() - own_before) / elapsed
        used = [cpu_seconds(p.pid) - b for p, b in zip(brokers, cpu_before, strict=True)]
        result["master_cores"] = used[0] / elapsed
        result["slave_cores"] = sum(used[1:]) / elapsed
        return result
    finally:
        stop_all(procs)
        shutil.rmtree(directory, ignore_errors=True)


class SteadySender:
    """A producer thread sending one message every few ms until stopped, keeping the ids
    of acknowledged sends and the time of the last one (failovers are timed from it)."""

    def __init__(self, namesrv: str, topic: str, group: str) -> None:
        self.acked: list[str] = []
        self.last_ok = 0.0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(namesrv, topic, group))

    def start(self) -> None:
        self._thread.start()

    def _run(self, namesrv: str, topic: str, group: str) -> None:
        from rocketq import Message, Producer, SendStatus

        with Producer(group, namesrv=namesrv, send_timeout=2, retries=1) as producer:
            for i in range(10_000_000):
                if self._halt.is_set():
                    return
                try:
                    r = producer.send(Message(topic, b"%d" % i))
                except Exception:  # no master now: try again shortly
                    time.sleep(0.02)
                    continue
                if r.status is SendStatus.SEND_OK:
                    self.acked.append(r.msg_id)
                    self.last_ok = time.monotonic()
                time.sleep(0.002)  # steady traffic, not a flood

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(30)


def read_back(namesrv: str, topic: str, group: str, acked: list[str], limit: float = 120.0
              ) -> dict[str, int]:
    """Read ``topic`` from the start with a new group until nothing more comes for 5 s (at
    most ``limit`` s); count the acknowledged messages not read (lost) and the messages read
    more than once (duplicated). The topic holds more than the acknowledged ones: a send
    that failed (SLAVE_NOT_AVAILABLE, a timeout) may still have been stored."""
    from rocketq import PullConsumer

    got: list[str] = []
    with PullConsumer(group, namesrv=namesrv, from_where="first") as consumer:
        consumer.subscribe(topic)
        consumer.start()
        idle = time.monotonic()
        deadline = idle + limit
        while time.monotonic() - idle < 5 and time.monotonic() < deadline:
            batch = consumer.poll(0.5)
            if batch:
                idle = time.monotonic()
            got.extend(m.msg_id for m in batch)
    seen = set(got)
    return {"acked": len(acked), "lost": len(set(acked) - seen),
            "duplicated": len(got) - len(seen)}


def wait_until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def stop_all(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM each (SIGCONT first, in case it was paused), the last started first; SIGKILL
    what does not exit within 30 s."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
    for proc in reversed(procs):
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()  # never leave a broker behind
            proc.wait()


def replica_conf(directory: str, index: int, namesrv: str, controllers: list[str]
                 ) -> tuple[str, str]:
    """Write the broker.conf of replica ``index`` of a controller-mode group (every in-sync
    replica acknowledges each send, SYNC_FLUSH); return its address and the file."""
    port = free_port()
    conf = os.path.join(directory, f"replica-{index}.conf")
    with open(conf, "w") as fh:
        fh.write(f"brokerName=broker-a\nnamesrvAddr={namesrv}\nlistenPort={port}\n"
                 f"haListenPort=0\nstorePathRootDir={os.path.join(directory, str(index))}\n"
                 f"enableControllerMode=true\ncontrollerAddr={';'.join(controllers)}\n"
                 "allAckInSyncStateSet=true\nflushDiskType=SYNC_FLUSH\n"
                 "mappedFileSizeCommitLog=67108864\nmaxHashSlotNum=100000\n"
                 "maxIndexNum=400000\n")
    return f"127.0.0.1:{port}", conf


def controlled_group(directory: str, replicas: int = 3
                     ) -> tuple[list[subprocess.Popen[str]], str, str, dict[str, str]]:
    """A NameServer, a controller and a controller-mode group (every in-sync replica
    acknowledges each send, SYNC_FLUSH), each its own process. Returns the processes, the
    NameServer and controller addresses, and each broker's conf by address."""
    procs: list[subprocess.Popen[str]] = []
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    procs.append(spawn(["namesrv", "--port", str(ns_port)], directory, "namesrv"))
    ctrl_port = free_port(pair=True)  # the controller's Raft port is the next one
    controller = f"127.0.0.1:{ctrl_port}"
    procs.append(spawn(["controller", "--port", str(ctrl_port)], directory, "controller"))
    confs = {}
    for i in range(replicas):
        addr, conf = replica_conf(directory, i, namesrv, [controller])
        confs[addr] = conf
        procs.append(spawn(["broker", "-c", conf], directory, f"replica-{i}"))
    return procs, namesrv, controller, confs


def failovers(kills: int) -> dict[str, object]:
    """Kill the master ``kills`` times (SIGKILL) while a producer sends without pause; each
    time, the seconds until the new master took a send, and the killed broker restarted
    (it rejoins as a slave). Then every acknowledged message is read back once."""
    directory = tempfile.mkdtemp(prefix="rocketq-failover-bench-")
    procs, namesrv, controller, confs = controlled_group(directory)
    by_addr = {addr: procs[2 + i] for i, addr in enumerate(confs)}
    sender = SteadySender(namesrv, "BenchFailover", "bench-failover")

    def in_sync() -> int:
        return len(run(replica_info(controller)).get("syncStateSet", []))

    times: list[float] = []
    try:
        try:
            if not wait_until(lambda: in_sync() == len(confs), 60):
                raise RuntimeError("the group never got all its replicas in sync")
            sender.start()
            for _ in range(kills):
                if not wait_until(lambda: len(sender.acked) > 100
                                  and in_sync() == len(confs), 60):
                    raise RuntimeError("the group did not recover its replicas")
                master = run(master_addr(namesrv))
                by_addr[master].kill()
                by_addr[master].wait()
                killed = time.monotonic()
                if not wait_until(lambda k=killed: sender.last_ok > k, 30):
                    raise RuntimeError("no new master within 30 s")
                times.append(sender.last_ok - killed)
                index = list(confs).index(master)
                by_addr[master] = procs[2 + index] = spawn(
                    ["broker", "-c", confs[master]], directory, f"replica-{index}")
            time.sleep(1)
        finally:
            sender.stop()
        counts = read_back(namesrv, "BenchFailover", "bench-failover-reader", sender.acked)
    finally:
        stop_all(procs)
        shutil.rmtree(directory, ignore_errors=True)
    return {"failover_s": [round(t, 3) for t in times],
            "failover_s_median": round(statistics.median(times), 3) if times else None,
            **counts}


async def replica_info(controller: str) -> dict:
    from rocketq.protocol import RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient

    client = RemotingClient()
    try:
        r = await client.invoke(controller, RemotingCommand.request(
            RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"}), 3)
        return {**r.ext_fields, **json.loads(r.body or b"{}")} if r.code == 0 else {}
    except Exception:
        return {}
    finally:
        await client.close()


async def master_addr(namesrv: str) -> str:
    return (await broker_addrs(namesrv, "BenchFailover"))[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--count", type=int, default=20_000, help="messages per setup and run")
    parser.add_argument("--window", type=int, default=256, help="sends in flight")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each setup, in turns")
    parser.add_argument("--kills", type=int, default=10,
                        help="failovers to measure in controller mode (0: none)")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SETUPS}
    for _ in range(args.repeat):
        for name in SETUPS:
            runs[name].append(one(name, args.count, args.window))
    failover = failovers(args.kills) if args.kills else {}

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    out: dict[str, float | int] = {}
    for name in SETUPS:
        out[f"{name}_pipelined_msgs_s"] = round(med(name, "msgs_s"))
        out[f"{name}_p50_ms"] = round(med(name, "p50_ms"), 3)
        out[f"{name}_p99_ms"] = round(med(name, "p99_ms"), 3)
    out["replication_lag_bytes_p99"] = round(max(med(n, "lag_p99") for n in SETUPS
                                                 if n != "single"))
    out["sync_master_vs_single"] = round(out["sync_master_pipelined_msgs_s"]
                                         / out["single_pipelined_msgs_s"], 2)
    out["sync_master_vs_async_master"] = round(out["sync_master_pipelined_msgs_s"]
                                               / out["async_master_pipelined_msgs_s"], 2)
    for name in SETUPS:
        for who in ("producer", "master", "slave"):
            out[f"{name}_{who}_cores"] = round(med(name, f"{who}_cores"), 2)
    out.update(failover)  # type: ignore[arg-type]
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"rocketq replication, {args.count:,} x 128-byte messages per run, window "
          f"{args.window}, {args.repeat} runs in turns, {os.cpu_count()} cores")
    print(f"{'setup':24} {'msgs/s median [min-max]':>30} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'slave lag p99 (bytes)':>22} {'cores: producer/master/slaves':>30}")
    for name in SETUPS:
        rates = [r["msgs_s"] for r in runs[name]]
        print(f"{name:24} {med(name, 'msgs_s'):>12,.0f} [{min(rates):,.0f}-{max(rates):,.0f}]"
              f" {med(name, 'p50_ms'):>8.2f} {med(name, 'p99_ms'):>8.2f} "
              f"{med(name, 'lag_p99'):>22,.0f} {med(name, 'producer_cores'):>20.2f}/"
              f"{med(name, 'master_cores'):.2f}/{med(name, 'slave_cores'):.2f}")
    print(f"SYNC_MASTER / single: {out['sync_master_vs_single']} (target at least 0.7); "
          f"SYNC_MASTER / ASYNC_MASTER: {out['sync_master_vs_async_master']}")
    if failover:
        times = failover["failover_s"]
        print(f"failover (controller mode, 3 replicas, {len(times)} kills): median "
              f"{failover['failover_s_median']} s, min {min(times)} s, max {max(times)} s "
              "(target: median under 5 s); acknowledged "
              f"{failover['acked']}, lost {failover['lost']}, read twice "
              f"{failover['duplicated']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
