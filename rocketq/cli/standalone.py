"""``rocketq standalone``: a NameServer and a Broker (and, with ``--slaves``, its slaves, with
``--dashboard-port``, the dashboard) in one process; and ``spawn_standalone``, which starts one
in a child process for examples, benchmarks and tests."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from .._version import __version__
from .broker import (
    _broker_overrides,
    _grpc_note,
    _grpc_port_default,
    _report_unknown_keys,
    _serve_grpc,
    broker_options,
)
from .common import _listening, _stop_on_signal


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


def add_standalone_parser(sub: argparse._SubParsersAction) -> None:
    """``rocketq standalone``: the broker options, the NameServer's, slaves, the dashboard."""
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
    from .dashboard import add_standalone_options

    add_standalone_options(p)
    p.set_defaults(func=_run_standalone)
