"""``rocketq cluster``: a NameServer, a controller and broker groups in controller mode, each
its own child process on loopback, for trying automatic failover with one command.

Each broker's ``broker.conf``, store and log are under ``--data-dir``. Ctrl-C (or SIGTERM)
stops every child; killing one broker with ``kill -9`` shows a failover: the command says
which child exited and how, and which replica each group's master is, at start and whenever
that changes. A broker that exits is started again, as a supervisor would (it rejoins its
group as a slave): after 5 s, so that a killed master's group fails over first, doubling to
30 s while it keeps exiting within a minute of its start, and not after 5 such exits in a
row (``--no-restart``: never). The NameServer and the controller take the ACL
(``aclEnable``, ``aclFile``) and TLS (``tlsMode``, ``tls.*``) of the ``-c`` file, as the
brokers do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import string
import sys
from dataclasses import dataclass
from typing import Any

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]
#: Where ``rocketq cluster`` keeps its children's stores, configs and logs by default.
DEFAULT_DATA_DIR = "./rocketq-cluster"
#: How long the start waits for every group to have a master before it says which one.
ELECTION_WAIT = 20.0
#: How often the NameServer is asked for the masters, to report a change.
WATCH_INTERVAL = 1.0
#: A broker that exits is started again after RESTART_FIRST seconds (longer than a failover
#: takes: a master started again sooner could be elected again), doubling to
#: RESTART_MOST while each run lasts under STEADY seconds; after RESTART_LIMIT such short
#: runs in a row it is left down.
RESTART_FIRST = 5.0
RESTART_MOST = 30.0
STEADY = 60.0
RESTART_LIMIT = 5


def free_port(pair: bool = False, avoid: frozenset[int] = frozenset()) -> int:
    """A free loopback port (with ``pair``, one whose next port is free too), none of
    ``avoid`` (ports promised to the children's gRPC or metrics ports)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port in avoid or (pair and port + 1 in avoid):
                continue
            if not pair:
                return port
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise OSError("no free port pair on 127.0.0.1")


async def _spawn(args: list[str], log_path: str, timeout: float = 30
                 ) -> asyncio.subprocess.Process:
    """Start ``rocketq <args>`` and wait for its "listening" line; its log goes to a file."""
    with open(log_path, "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *ROCKETQ, *args, stdout=asyncio.subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(timeout):
            while True:
                line = await proc.stdout.readline()
                if not line:
                    code = await proc.wait()
                    raise OSError(f"rocketq {args[0]} {exit_text(code)}; see {log_path}")
                if b"listening" in line:
                    return proc
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise


def group_names(count: int) -> list[str]:
    """broker-a, broker-b, ... (then broker-aa, broker-ab, ...)."""
    letters = string.ascii_lowercase
    names = []
    for i in range(count):
        suffix = letters[i] if i < 26 else letters[i // 26 - 1] + letters[i % 26]
        names.append(f"broker-{suffix}")
    return names


def exit_text(code: int) -> str:
    """How a child process ended: its exit status, or the signal that killed it."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


@dataclass
class Child:
    """A child process of the cluster and what it is."""

    label: str  # "NameServer", "controller", "broker-a replica 0"
    proc: asyncio.subprocess.Process
    #: Whether the cluster cannot go on without it (the NameServer, the controller).
    essential: bool = False
    port: int | None = None
    #: How to start it again (``rocketq`` arguments, its log): set for brokers.
    argv: list[str] | None = None
    log_path: str = ""
    #: When it was last started (the loop's clock), and its short runs in a row.
    started: float = 0.0
    short_runs: int = 0

    def describe(self) -> str:
        return f"{self.label} (pid {self.proc.pid})"

    def restart_delay(self, now: float) -> float | None:
        """Seconds to wait before starting it again after an exit at ``now``, or None when
        it is to stay down (not a broker, or RESTART_LIMIT short runs in a row)."""
        if self.argv is None:
            return None
        self.short_runs = self.short_runs + 1 if now - self.started < STEADY else 1
        if self.short_runs > RESTART_LIMIT:
            return None
        return min(RESTART_FIRST * 2 ** (self.short_runs - 1), RESTART_MOST)


class MasterWatch:
    """Which replica each broker group's master is, as the NameServer sees it: printed once
    every group has one (or the wait is over), then again whenever one changes."""

    def __init__(self, namesrv: str, groups: list[str], brokers: list[Child],
                 **client: Any) -> None:
        from ..client.admin import AsyncAdmin

        self.admin = AsyncAdmin(namesrv, **client)
        self.groups = groups
        self.by_port = {child.port: child for child in brokers}
        self.current: dict[str, str | None] = {}
        #: Each group's last master seen, through an interregnum without one.
        self.last: dict[str, str] = {}

    async def masters(self) -> dict[str, str] | None:
        """``group -> master address``, or None when the NameServer does not answer."""
        from ..client.errors import ClientError

        try:
            return await self.admin.masters()
        except (ClientError, OSError):
            return None

    def line(self, group: str, addr: str | None) -> str:
        """``broker-a master: 127.0.0.1:PORT (replica 1, pid N)``, and what it was."""
        if addr is None:
            text = f"{group} master: none (until the controller elects one)"
        else:
            port = addr.rpartition(":")[2]
            child = self.by_port.get(int(port)) if port.isdigit() else None
            label = child.label.removeprefix(f"{group} ") if child else ""
            text = f"{group} master: {addr}" + (f" ({label}, pid {child.proc.pid})"
                                                 if child else "")
        before = self.last.get(group)
        return text + (f", was {before}" if before and before != addr else "")

    def _set(self, group: str, addr: str | None) -> None:
        self.current[group] = addr
        if addr is not None:
            self.last[group] = addr

    async def first(self, timeout: float = ELECTION_WAIT) -> None:
        """Wait until every group has a master, for at most ``timeout`` seconds; print them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        masters: dict[str, str] = {}
        while loop.time() < deadline:
            masters = await self.masters() or {}
            if all(group in masters for group in self.groups):
                break
            await asyncio.sleep(0.25)
        for group in self.groups:
            print(self.line(group, masters.get(group)), flush=True)
            self._set(group, masters.get(group))

    async def watch(self, interval: float = WATCH_INTERVAL) -> None:
        """Print each change of a group's master, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            masters = await self.masters()
            if masters is None:
                continue
            for group in self.groups:
                addr = masters.get(group)
                if addr != self.current.get(group):
                    print(self.line(group, addr), flush=True)
                    self._set(group, addr)

    async def close(self) -> None:
        await self.admin.close()


async def _restart(child: Child, delay: float) -> Child:
    """Start ``child`` again after ``delay`` seconds, with the arguments it had."""
    assert child.argv is not None
    await asyncio.sleep(delay)
    child.started = asyncio.get_running_loop().time()  # a failed start is a short run too
    child.proc = await _spawn(child.argv, child.log_path)
    print(f"{child.label} restarted: 127.0.0.1:{child.port} (pid {child.proc.pid})",
          flush=True)
    return child


async def _supervise(children: list[Child], watch: MasterWatch, stop: asyncio.Event,
                     restart: bool = True) -> None:
    """Until ``stop`` is set or an essential child exits: report each child that exits (a
    broker's exit is what a failover follows) and each change of master, and start an
    exited broker again (``restart``; see ``Child.restart_delay``)."""
    loop = asyncio.get_running_loop()
    waits = {asyncio.ensure_future(child.proc.wait()): child for child in children}
    restarts: dict[asyncio.Future[Child], Child] = {}
    stopping = asyncio.ensure_future(stop.wait())
    watching = asyncio.ensure_future(watch.watch())

    def again(child: Child, why: str) -> None:
        delay = child.restart_delay(loop.time()) if restart else None
        if delay is None:
            print(f"{child.label} is left down" + (
                f" ({why}; it exited {RESTART_LIMIT} times within {STEADY:g} s of its start; "
                f"see {child.log_path})" if restart and child.argv else
                " (--no-restart)" if child.argv else ""), flush=True)
            return
        print(f"restarting {child.label} in {delay:g} s", flush=True)
        restarts[asyncio.ensure_future(_restart(child, delay))] = child

    try:
        while True:
            done, _ = await asyncio.wait([stopping, *waits, *restarts],
                                         return_when=asyncio.FIRST_COMPLETED)
            if stopping in done:
                return
            for task in done:
                if task in restarts:
                    child = restarts.pop(task)
                    if task.exception() is not None:
                        print(f"{child.label} did not start again: {task.exception()}",
                              flush=True)
                        again(child, "it did not start")
                    else:
                        waits[asyncio.ensure_future(child.proc.wait())] = child
                    continue
                child = waits.pop(task)
                print(f"{child.describe()} {exit_text(task.result())}"
                      + ("; stopping the cluster" if child.essential else ""), flush=True)
                if child.essential:
                    return
                again(child, "it keeps exiting")
    finally:
        for task in (stopping, watching, *waits, *restarts):
            task.cancel()
        await asyncio.gather(stopping, watching, *waits, *restarts, return_exceptions=True)


def cluster_security(config: str | None, data: str) -> tuple[list[str], dict[str, Any]]:
    """The NameServer's and controller's ``--acl-file``/``--tls-config`` from the ACL and TLS
    keys of the brokers' ``-c`` file (written to ``<data>/tls.properties``), and what the
    command's own admin client needs to read the NameServer: its credentials (the ACL file's
    first admin account) and TLS context."""
    from ..acl import BROKER_ADMIN_CODES, AccessControl, Credentials
    from ..remoting.tls import DISABLED, outgoing_context
    from ..store.config import read_properties

    values = ({k: str(v).strip() for k, v in dict(read_properties(config)).items()}
              if config else {})
    args: list[str] = []
    client: dict[str, Any] = {}
    if values.get("aclEnable", "").lower() == "true":
        path = values.get("aclFile", "")
        if not path:
            raise ValueError(f"{config}: aclEnable=true needs aclFile=PATH in rocketq cluster "
                             "(the brokers, the NameServer and the controller read the same "
                             "accounts)")
        path = os.path.abspath(path)
        args += ["--acl-file", path]
        admin = AccessControl(path, BROKER_ADMIN_CODES).acl.first_admin()
        if admin is not None:
            client["credentials"] = Credentials(admin.access_key, admin.secret_key)
    tls = {k: v for k, v in values.items() if k == "tlsMode" or k.startswith("tls.")}
    if tls:
        path = os.path.join(data, "tls.properties")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in tls.items()))
        args += ["--tls-config", path]
        mode = (tls.get("tlsMode") or tls.get("tls.server.mode") or DISABLED).lower()
        context = outgoing_context(tls, mode)
        if context is not None:
            client["tls"] = context
    return args, client


async def run_cluster(args: argparse.Namespace, stop: asyncio.Event) -> None:
    from ..dirlock import DirectoryLock

    data = os.path.abspath(args.data_dir)
    # Before a broker.conf is written: a second ``rocketq cluster`` on this directory would
    # rewrite the running brokers' configs.
    lock = DirectoryLock.acquire(data, "rocketq cluster", what="cluster directory")
    children: list[Child] = []
    watch: MasterWatch | None = None
    try:
        namesrv = f"127.0.0.1:{args.namesrv_port}"
        # The brokers' ACL and TLS, for the NameServer and the controller too.
        security, client = cluster_security(args.config, data)
        # --metrics-port: the NameServer's, the controller's the next, then the brokers'.
        metrics = args.metrics_port
        children.append(Child("NameServer", await _spawn(
            ["namesrv", "--port", str(args.namesrv_port), *security,
             *metrics_args(metrics, 0)],
            os.path.join(data, "namesrv.log")), essential=True, port=args.namesrv_port))
        grpc_base = grpc_port_base(args)
        promised = promised_ports(metrics, grpc_base, args.groups * args.replicas)
        controller_port = args.controller_port or free_port(pair=True, avoid=promised)
        controller = f"127.0.0.1:{controller_port}"
        children.append(Child("controller", await _spawn(
            ["controller", "--port", str(controller_port),
             "--data-dir", os.path.join(data, "controller"), *security,
             *metrics_args(metrics, 1)],
            os.path.join(data, "controller.log")), essential=True, port=controller_port))
        print(f"NameServer {namesrv} (pid {children[0].proc.pid}){metrics_note(metrics, 0)}\n"
              f"Controller {controller} (pid {children[1].proc.pid}){metrics_note(metrics, 1)}",
              flush=True)
        index = 0
        for name in group_names(args.groups):
            for replica in range(args.replicas):
                grpc_port = grpc_base + index if grpc_base else 0
                metrics_conf = (f"metricsExporterType=PROM\nmetricsPromExporterPort="
                                f"{metrics + 2 + index}\n" if metrics is not None else "")
                metrics_text = metrics_note(metrics, 2 + index)
                index += 1
                root = os.path.join(data, f"{name}-{replica}")
                os.makedirs(root, exist_ok=True)
                conf = os.path.join(root, "broker.conf")
                port = free_port(pair=True, avoid=promised)  # haListenPort: port + 1
                with open(conf, "w") as fh:
                    fh.write(f"brokerClusterName=DefaultCluster\nbrokerName={name}\n"
                             f"namesrvAddr={namesrv}\nlistenPort={port}\nhaListenPort=0\n"
                             f"storePathRootDir={root}\nenableControllerMode=true\n"
                             f"controllerAddr={controller}\nallAckInSyncStateSet=true\n"
                             f"enableProxy=true\ngrpcServerPort={grpc_port}\n{metrics_conf}")
                    if args.config:
                        with open(args.config) as extra:
                            fh.write(extra.read())
                argv, log_path = ["broker", "-c", conf], os.path.join(root, "broker.log")
                proc = await _spawn(argv, log_path)
                children.append(Child(f"{name} replica {replica}", proc, port=port, argv=argv,
                                      log_path=log_path,
                                      started=asyncio.get_running_loop().time()))
                grpc_note = f", gRPC 127.0.0.1:{grpc_port}" if grpc_port else ""
                print(f"{name} replica {replica}: 127.0.0.1:{port}{grpc_note}{metrics_text} "
                      f"(pid {proc.pid}, data {root})", flush=True)
        watch = MasterWatch(namesrv, group_names(args.groups), children[2:], **client)
        await watch.first()
        print(f"connect clients with namesrv=\"{namesrv}\"; Ctrl-C stops all", flush=True)
        await _supervise(children, watch, stop, restart=not args.no_restart)
        print("stopping...", flush=True)
    finally:
        if watch is not None:
            await watch.close()
        for proc in reversed([child.proc for child in children]):  # the NameServer last
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                try:
                    async with asyncio.timeout(20):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        lock.release()


def metrics_args(base: int | None, index: int) -> list[str]:
    """A child's ``--metrics-port``: ``base`` plus its index (none without a base)."""
    return [] if base is None else ["--metrics-port", str(base + index)]


def promised_ports(metrics: int | None, grpc_base: int, brokers: int) -> frozenset[int]:
    """The ports the children are told to listen on, which the brokers' and controller's
    own (free) ports must not take: the metrics ports (``metrics``, then one per child
    after the NameServer's: the controller's and each broker's), and the brokers' gRPC ports
    (``grpc_base``, one per broker). 0 or None for either: ports the children pick."""
    ports: set[int] = set()
    if metrics:
        ports.update(range(metrics, metrics + 2 + brokers))
    if grpc_base:
        ports.update(range(grpc_base, grpc_base + brokers))
    return frozenset(ports)


def metrics_note(base: int | None, index: int) -> str:
    return "" if base is None else f", metrics http://127.0.0.1:{base + index}/metrics"


def grpc_port_base(args: argparse.Namespace) -> int:
    """The first broker's gRPC port: ``--grpc-port``, else ``ROCKETQ_GRPC_PORT``, else 8081."""
    if args.grpc_port is not None:
        return args.grpc_port
    env = os.environ.get("ROCKETQ_GRPC_PORT", "").strip()
    return int(env) if env.isdigit() else 8081


def add_cluster_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="run a NameServer, a controller and broker groups in "
                                       "controller mode, as child processes (automatic "
                                       "failover)")
    p.add_argument("--replicas", type=int, default=3, help="brokers per group (default 3)")
    p.add_argument("--groups", type=int, default=1, help="broker groups (default 1)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="stores, configs and logs")
    p.add_argument("--namesrv-port", type=int, default=9876, help="the NameServer's port")
    p.add_argument("--controller-port", type=int, default=0,
                   help="default: any free port (Raft uses the next one)")
    p.add_argument("--grpc-port", type=int,
                   help="the first broker's gRPC port for RocketMQ 5.x clients; the others "
                        "take the next ones (default 8081, or ROCKETQ_GRPC_PORT; 0: none)")
    p.add_argument("--metrics-port", type=int, metavar="BASE",
                   help="serve Prometheus metrics: the NameServer on BASE, the controller on "
                        "BASE+1, broker i (from 0) on BASE+2+i (default: off)")
    p.add_argument("-c", "--config", help="broker.conf lines added to every broker's (its ACL "
                                          "and TLS keys apply to the NameServer and the "
                                          "controller too)")
    p.add_argument("--no-restart", action="store_true",
                   help="leave a broker that exits down (default: start it again after 5 s, "
                        "doubling to 30 s, at most 5 times in a row within a minute of its "
                        "start)")
    p.set_defaults(func=_run)


async def _run(args: argparse.Namespace) -> None:
    from .common import _stop_on_signal

    if args.replicas < 1 or args.groups < 1:
        raise ValueError("--replicas and --groups must be at least 1")
    if args.metrics_port is not None and not 0 < args.metrics_port < 65536 - 2 - (
            args.groups * args.replicas):
        raise ValueError("--metrics-port is the first of consecutive ports (one per child): "
                         f"not {args.metrics_port}")
    await run_cluster(args, _stop_on_signal())
