"""rocketq processes and test clients started in the namespaces of a :class:`Network`."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

from .net import Network, Node

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "client.py")
NAMESRV_PORT = 9876
BROKER_PORT = 10911
HA_PORT = 10912


def start(net: Network, node: Node, args: list[str], directory: str, name: str,
          ready: str = "listening", timeout: float = 30) -> subprocess.Popen[str]:
    """Start ``rocketq <args>`` (or, with ``args[0] == CLIENT``, a test client) in ``node``
    and wait until it prints ``ready``; its stderr goes to ``<directory>/<name>.log``."""
    argv = [sys.executable, *args] if args[0] == CLIENT else \
        [sys.executable, "-m", "rocketq.cli", "--log-level", "WARNING", *args]
    env = {**os.environ, "ROCKETQ_GRPC_PORT": "0", "PYTHONUNBUFFERED": "1"}
    with open(os.path.join(directory, f"{name}.log"), "a") as log:  # a restart appends
        proc = net.run(node, argv, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            line = proc.stdout.readline()
            if ready in line:
                return proc
            if not line:
                break
    raise RuntimeError(f"{name} did not start in {timeout} s; see {name}.log")


def namesrv(net: Network, node: Node, directory: str) -> str:
    start(net, node, ["namesrv", "--host", node.addr, "--port", str(NAMESRV_PORT)], directory,
          node.name)
    return f"{node.addr}:{NAMESRV_PORT}"


def broker(net: Network, node: Node, directory: str, namesrv: str, broker_id: int,
           role: str, master: Node | None = None, name: str = "broker-a",
           **extra: object) -> str:
    """A broker of a plain master/slave group listening on its node's address; its
    address."""
    values: dict[str, object] = {
        "brokerName": name, "brokerId": broker_id, "brokerRole": role,
        "brokerIP1": node.addr, "listenPort": BROKER_PORT, "namesrvAddr": namesrv,
        "storePathRootDir": os.path.join(directory, node.name),
        "flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 16 << 20,
        "maxHashSlotNum": 10000, "maxIndexNum": 40000,
        "haListenPort": HA_PORT if master is None else 0}
    if master is not None:
        values["haMasterAddress"] = f"{master.addr}:{HA_PORT}"
    values.update(extra)
    if broker_id < 0:  # controller mode: the controller gives the id
        del values["brokerId"]
    conf = os.path.join(directory, f"{node.name}.conf")
    with open(conf, "w") as fh:
        fh.writelines(f"{k}={v}\n" for k, v in values.items())
    start(net, node, ["broker", "-c", conf], directory, node.name)
    return f"{node.addr}:{BROKER_PORT}"


CONTROLLER_PORT = 9878


def controller(net: Network, node: Node, directory: str, peers: list[Node],
               *options: str) -> str:
    """A controller node on the embedded Raft engine (Raft on the next port), its peers
    ``peers`` (this node among them); its address."""
    addrs = ",".join(f"{p.addr}:{CONTROLLER_PORT}" for p in peers)
    start(net, node, ["controller", "--host", node.addr, "--port", str(CONTROLLER_PORT),
                      "--peers", addrs, *options], directory, node.name)
    return f"{node.addr}:{CONTROLLER_PORT}"


def replica(net: Network, node: Node, directory: str, namesrv: str, controllers: list[str],
            name: str = "broker-a", **extra: object) -> str:
    """A broker of a controller-mode group (every in-sync replica acknowledges each send:
    allAckInSyncStateSet) listening on its node's address; its address. Heartbeats every
    0.5 s, counted gone after 3 s: the controller's defaults (a 3 s lease) decide."""
    values: dict[str, object] = {
        "enableControllerMode": "true", "controllerAddr": ";".join(controllers),
        "allAckInSyncStateSet": "true", "brokerHeartbeatInterval": 500,
        "syncBrokerMetadataPeriod": 1000, **extra}
    return broker(net, node, directory, namesrv, -1, "ASYNC_MASTER", name=name,
                  haListenPort=HA_PORT, **values)


def epochs_of(directory: str, node: Node) -> list[tuple[int, int]]:
    """The ``(epoch, start offset)`` entries of a controller-mode broker's epoch file."""
    from rocketq.broker.replication.epochs import EpochFile

    return EpochFile(os.path.join(directory, node.name, "epochFileCheckpoint")).entries


def client(net: Network, node: Node, directory: str, mode: str, namesrv: str, topic: str,
           *options: str) -> tuple[subprocess.Popen[str], str]:
    """A test client (``produce`` or ``consume``) in ``node``; the process and its history
    file."""
    history = os.path.join(directory, f"{node.name}.jsonl")
    proc = start(net, node, [CLIENT, mode, namesrv, topic, history, "--process", node.name,
                             *options], directory, node.name, ready="started")
    return proc, history


def stop(proc: subprocess.Popen, timeout: float = 15) -> int | None:
    """SIGTERM, then SIGKILL what has not exited in ``timeout`` s; the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def max_offset(addr: str) -> int | None:
    """A broker's CommitLog max offset (GET_BROKER_RUNTIME_INFO), None if it does not
    answer."""
    from rocketq.protocol import RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient, run

    async def ask() -> int | None:
        client = RemotingClient()
        try:
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.GET_BROKER_RUNTIME_INFO), 3)
            return int(json.loads(r.body)["table"]["commitLogMaxOffset"])
        except Exception:
            return None
        finally:
            await client.close()

    return run(ask())


def count_lines(path: str, needle: str = "") -> int:
    try:
        with open(path) as fh:
            return sum(needle in line for line in fh)
    except FileNotFoundError:
        return 0


def wait_until(check, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return bool(check())


def replica_info(controllers: list[str], group: str = "broker-a") -> dict:
    """The group's master, epoch and SyncStateSet as the first controller that answers
    says (GET_REPLICA_INFO; its ext fields and body merged); {} when none does."""
    from rocketq.protocol import RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient, run

    async def ask() -> dict:
        client = RemotingClient()
        try:
            for addr in controllers:
                try:
                    r = await client.invoke(addr, RemotingCommand.request(
                        RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": group}), 2)
                except Exception:
                    continue
                if r.code == 0:
                    return {**r.ext_fields, **json.loads(r.body or b"{}")}
            return {}
        finally:
            await client.close()

    return run(ask())


def controller_leader(controllers: list[str]) -> str | None:
    """The controller node that says it leads (CONTROLLER_GET_METADATA_INFO), if any."""
    from rocketq.protocol import RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient, run

    async def ask() -> str | None:
        client = RemotingClient()
        try:
            for addr in controllers:
                try:
                    r = await client.invoke(addr, RemotingCommand.request(
                        RequestCode.CONTROLLER_GET_METADATA_INFO), 2)
                except Exception:
                    continue
                if r.code == 0 and r.ext_fields.get("isLeader") in ("true", "True"):
                    return addr
            return None
        finally:
            await client.close()

    return run(ask())


class ControlledGroup:
    """A NameServer, controller nodes and one controller-mode broker group, each in its own
    namespace of ``net``; the first replica is started first, so it becomes the master."""

    def __init__(self, net: Network, directory: str, controllers: int = 1,
                 replicas: int = 3, **broker_conf: object) -> None:
        self.net, self.directory = net, directory
        self.ns = net.node("namesrv")
        self.namesrv = namesrv(net, self.ns, directory)
        self.controller_nodes = [net.node(f"ctl{i}") for i in range(controllers)]
        self.controllers = [controller(net, n, directory, self.controller_nodes)
                            for n in self.controller_nodes]
        #: node name -> its controller process (the last one started there).
        self.ctl_procs: dict[str, subprocess.Popen[str]] = dict(zip(  # noqa: B905
            (n.name for n in self.controller_nodes), net.procs[-controllers:]))
        self.nodes = [net.node(f"rep{i}") for i in range(replicas)]
        self.addrs: dict[str, Node] = {}
        self.broker_conf = broker_conf
        #: node name -> its broker process (the last one started there).
        self.procs: dict[str, subprocess.Popen[str]] = {}
        for i, node in enumerate(self.nodes):
            self.addrs[replica(net, node, directory, self.namesrv, self.controllers,
                               **broker_conf)] = node
            self.procs[node.name] = net.procs[-1]
            if i == 0:
                assert wait_until(lambda n=node: self.master() is n, 30), "no first master"
        assert wait_until(self.whole, 30), f"replicas not in sync: {self.info()}"

    def info(self) -> dict:
        """What the controller leader says of the group ({} when no node leads)."""
        leader = controller_leader(self.controllers)
        return replica_info([leader]) if leader else {}

    def master(self) -> Node | None:
        """The master the controllers name, if any answers."""
        return self.addrs.get(self.info().get("masterAddress", ""))

    def whole(self) -> bool:
        """Every replica in the SyncStateSet."""
        return len(self.info().get("syncStateSet", [])) == len(self.nodes)

    def addr_of(self, node: Node) -> str:
        return f"{node.addr}:{BROKER_PORT}"

    def epochs(self) -> list[tuple[int, int]]:
        """Every epoch and its start offset that any replica's epoch file names (the
        master's own entries first): the epoch each stored message was written under."""
        master = self.master()
        order = ([master] if master is not None else []) + \
            [n for n in self.nodes if n is not master]
        starts: dict[int, int] = {}
        for node in order:
            for epoch, start in epochs_of(self.directory, node):
                starts.setdefault(epoch, start)
        return sorted(starts.items())
