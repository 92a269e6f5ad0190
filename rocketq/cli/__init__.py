"""The ``rocketq`` command: run a NameServer, a Broker, both (standalone), or administer.

    rocketq standalone                      # NameServer + Broker in one process
    rocketq namesrv --port 9876
    rocketq broker -c broker.conf
    rocketq admin topic list --namesrv 127.0.0.1:9876
    rocketq bench produce --start-broker --mode async --count 100000
    rocketq dashboard --namesrv 127.0.0.1:9876 --port 8080
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time

from .. import __version__
from .broker import (
    _broker_overrides,
    _grpc_note,
    _grpc_port_default,
    _report_unknown_keys,
    _serve_grpc,
    add_broker_parser,
    broker_options,
)
from .common import (
    ListenError,
    Parser,
    _listening,
    _stop_on_signal,
    failure_reason,
)
from .controller import add_controller_parser
from .namesrv import add_namesrv_parser

log = logging.getLogger("rocketq")


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
                        stream=sys.stderr)


async def _run_standalone(args: argparse.Namespace) -> None:
    from ..broker import Broker, load_broker_conf
    from ..broker.security import acl_file, tls_settings
    from ..namesrv import NameServer
    from ..store.lock import StoreLock
    from .metrics import _broker_metrics, _metrics_note, _serve_metrics, _stop_all

    stop = _stop_on_signal()
    overrides = _broker_overrides(args)
    overrides["storePathRootDir"] = os.path.abspath(args.data_dir)
    if args.slaves:
        overrides["brokerRole"] = "SYNC_MASTER" if args.sync_master else "ASYNC_MASTER"
    config, store_config = load_broker_conf(args.config, **overrides)
    _grpc_port_default(args, config)
    if args.dashboard_port is not None:  # with the ACL on, the dashboard needs its logins
        from .dashboard import refuse_unguarded

        refuse_unguarded(config.aclEnable, args.dashboard_users, "--dashboard-users")
    # The store's lock before anything listens: a second standalone on the same data
    # directory (the default one, say) stops here, and the first one goes on undisturbed.
    lock = StoreLock.acquire(store_config.storePathRootDir,
                             f"rocketq standalone {config.brokerName} (starting)")
    _report_unknown_keys(args, config.unknown)  # once: the slaves read the same file
    # The NameServer shares the broker's accounts and TLS settings.
    ns = NameServer(args.host, args.namesrv_port, tls=tls_settings(config), acl_file=acl_file(
        config, os.path.join(store_config.storePathRootDir, "config"))
        if config.aclEnable else None)
    with _listening("NameServer"):
        await ns.start()
    overrides["namesrvAddr"] = config.namesrvAddr = ns.address
    broker = Broker(config, store_config, store_lock=lock)
    with _listening("broker"):
        await broker.start()
    try:
        grpc = await _serve_grpc(broker)
    except BaseException:
        await ns.stop()
        raise
    try:
        # One port for the process: the NameServer and the master (not the slaves: they
        # share the master's labels, and its replication metrics cover them).
        metrics = await _serve_metrics(*_broker_metrics(broker.config), brokers=(broker,),
                                       namesrv=ns)
    except BaseException:
        await _stop_all(grpc, broker, ns)
        raise
    brokers = [broker]
    dashboard = None
    print(f"rocketq {__version__} standalone: NameServer {ns.address}, Broker "
          f"{broker.config.brokerName} {broker.address}{_grpc_note(grpc)}, data in "
          f"{broker.store_config.storePathRootDir}{_metrics_note(metrics)}", flush=True)
    try:
        for i in range(1, args.slaves + 1):
            # Each slave: its own store beside the master's, its own ports, the master's name.
            slave_overrides = {
                **overrides, "brokerRole": "SLAVE", "brokerId": i,
                "storePathRootDir": os.path.join(overrides["storePathRootDir"], f"slave-{i}"),
                "listenPort": 0, "grpcServerPort": 0,
                "haMasterAddress": broker.ha_server.address if broker.ha_server else None}
            slave = Broker(*load_broker_conf(args.config, **slave_overrides))
            with _listening(f"slave {i}"):
                await slave.start()
            brokers.append(slave)
            print(f"slave {i} of {broker.config.brokerName}: {slave.address}, data in "
                  f"{slave.store_config.storePathRootDir}", flush=True)
        from .dashboard import start_for_standalone

        dashboard = await start_for_standalone(args, broker, ns.address)
        print(f"connect clients with namesrv=\"{ns.address}\"; Ctrl-C stops", flush=True)
        await stop.wait()
        print("stopping...", flush=True)
    finally:
        # Each part stops even when one before it fails (the dashboard's, say).
        await _stop_all(dashboard, metrics, grpc, *reversed(brokers), ns)


def spawn_standalone(data_dir: str, *, flush: str | None = None, config: str | None = None,
                     log_level: str = "WARNING", timeout: float = 30,
                     extra: list[str] | None = None, grpc_port: int = 0
                     ) -> tuple[subprocess.Popen[str], str]:
    """Start ``rocketq standalone`` in a child process on free ports, with its store in
    ``data_dir`` (and ``flush`` mode, ``config`` broker.conf, a gRPC port when
    ``grpc_port`` is not 0); return the process and its NameServer address once it serves.
    Stop it with ``terminate()``."""
    argv = [sys.executable, "-m", "rocketq.cli", "--log-level", log_level, "standalone",
            "--data-dir", data_dir, "--namesrv-port", "0", "--broker-port", "0",
            "--grpc-port", str(grpc_port)]
    if flush:
        argv += ["--flush", flush]
    if config:
        argv += ["-c", config]
    argv += extra or []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if 'namesrv="' in line:
            return proc, line.split('namesrv="', 1)[1].split('"', 1)[0]
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    raise RuntimeError("the standalone broker did not start")


def build_parser() -> argparse.ArgumentParser:

    parser = Parser(
        prog="rocketq", description="rocketq: a RocketMQ-compatible message queue in Python.")
    parser.add_argument("--version", action="version", version=f"rocketq {__version__}")
    parser.add_argument("--log-level", default=None,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="default INFO for servers, WARNING for admin")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_namesrv_parser(sub)

    add_controller_parser(sub)

    add_broker_parser(sub)

    p = sub.add_parser("standalone", help="run a NameServer and a Broker in one process")
    p.add_argument("--data-dir", default="./rocketq-data", help="store root (default "
                                                               "./rocketq-data)")
    p.add_argument("--host", default="127.0.0.1", help="NameServer listen address")
    p.add_argument("--namesrv-port", type=int, default=9876,
                   help="the NameServer's port (0: any free port)")
    p.add_argument("--slaves", type=int, default=0, metavar="N",
                   help="also run N slaves of the broker, replicating it (default 0)")
    p.add_argument("--sync-master", action="store_true",
                   help="with --slaves: answer sends once a slave holds them (SYNC_MASTER)")
    broker_options(p, standalone=True)
    from .dashboard import add_dashboard_parser, add_standalone_options

    add_standalone_options(p)
    p.set_defaults(func=_run_standalone)

    from .admin import add_admin_parser
    from .bench import add_bench_parser
    from .cluster import add_cluster_parser

    add_cluster_parser(sub)
    add_admin_parser(sub)
    add_bench_parser(sub)
    add_dashboard_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.log_level or ("WARNING" if args.command in ("admin", "bench")
                                      else "INFO"))
    if args.command == "standalone" and args.broker_port is None:
        args.broker_port = 10911
    from ..remoting import run

    try:
        result = run(args.func(args))
    except KeyboardInterrupt:
        return 130
    except ListenError as exc:
        print(f"rocketq {args.command}: {exc.strerror}", file=sys.stderr)
        return 1
    except Exception as exc:
        if args.command in ("admin", "bench") and isinstance(exc, _client_failures()):
            # What the user asked for and why it failed, on one line: no traceback.
            print(f"rocketq {args.command}: {_what(args)}: {failure_reason(exc)}",
                  file=sys.stderr)
            return 1
        if isinstance(exc, (OSError, ValueError)):
            print(f"rocketq: {exc}", file=sys.stderr)
            return 1
        raise
    return int(result or 0)


def _client_failures() -> tuple[type[BaseException], ...]:
    """What a client call raises when it cannot do what it was asked: ClientError (which the
    remoting errors derive from), and the OSErrors and ValueErrors of a network or an input
    that is not what it should be."""
    from ..client.errors import ClientError
    from ..remoting import RemotingError

    return (ClientError, RemotingError, OSError, ValueError)


def _what(args: argparse.Namespace) -> str:
    """The subcommand words of an admin or bench command line ("topic delete", "produce")."""
    words = [getattr(args, name, None) for name in ("admin_group", "action", "config_action",
                                                    "bench")]
    return " ".join(w for w in words if isinstance(w, str)) or args.command


if __name__ == "__main__":
    raise SystemExit(main())
