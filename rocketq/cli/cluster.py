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
import socket
import string
from typing import Any

from .cluster_children import Child, spawn, supervise
from .cluster_masters import MasterWatch

#: Where ``rocketq cluster`` keeps its children's stores, configs and logs by default.
DEFAULT_DATA_DIR = "./rocketq-cluster"


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


def group_names(count: int) -> list[str]:
    """broker-a, broker-b, ... (then broker-aa, broker-ab, ...)."""
    letters = string.ascii_lowercase
    names = []
    for i in range(count):
        suffix = letters[i] if i < 26 else letters[i // 26 - 1] + letters[i % 26]
        names.append(f"broker-{suffix}")
    return names


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
        children.append(Child("NameServer", await spawn(
            ["namesrv", "--port", str(args.namesrv_port), *security,
             *metrics_args(metrics, 0)],
            os.path.join(data, "namesrv.log")), essential=True, port=args.namesrv_port))
        grpc_base = grpc_port_base(args)
        promised = promised_ports(metrics, grpc_base, args.groups * args.replicas)
        controller_port = args.controller_port or free_port(pair=True, avoid=promised)
        controller = f"127.0.0.1:{controller_port}"
        children.append(Child("controller", await spawn(
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
                proc = await spawn(argv, log_path)
                children.append(Child(f"{name} replica {replica}", proc, port=port, argv=argv,
                                      log_path=log_path,
                                      started=asyncio.get_running_loop().time()))
                grpc_note = f", gRPC 127.0.0.1:{grpc_port}" if grpc_port else ""
                print(f"{name} replica {replica}: 127.0.0.1:{port}{grpc_note}{metrics_text} "
                      f"(pid {proc.pid}, data {root})", flush=True)
        watch = MasterWatch(namesrv, group_names(args.groups), children[2:], **client)
        await watch.first()
        print(f"connect clients with namesrv=\"{namesrv}\"; Ctrl-C stops all", flush=True)
        await supervise(children, watch, stop, restart=not args.no_restart)
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
