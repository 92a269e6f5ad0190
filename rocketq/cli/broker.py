"""``rocketq broker``: a Broker from a broker.conf and the command line's overrides, with its
gRPC port for RocketMQ 5.x clients when asked; the broker options ``rocketq standalone``
shares."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from .common import _listening, _stop_on_signal
from .metrics import metrics_options

log = logging.getLogger("rocketq")


def _broker_overrides(args: argparse.Namespace) -> dict[str, Any]:
    flush = getattr(args, "flush", None)
    return {
        "namesrvAddr": getattr(args, "namesrv", None),
        "listenPort": getattr(args, "broker_port", None),
        "grpcServerPort": getattr(args, "grpc_port", None),
        # --enable-proxy, or a gRPC port named on the command line, turns gRPC on.
        "enableProxy": True if getattr(args, "enable_proxy", False)
        or getattr(args, "grpc_port", None) else None,
        # --metrics-port turns the Prometheus exporter on, whatever the file says.
        "metricsExporterType": "PROM" if getattr(args, "metrics_port", None) is not None
        else None,
        "metricsPromExporterPort": getattr(args, "metrics_port", None),
        "metricsPromExporterHost": getattr(args, "metrics_host", None),
        "brokerName": getattr(args, "broker_name", None),
        "brokerClusterName": getattr(args, "cluster", None),
        "storePathRootDir": getattr(args, "data_dir", None),
        "brokerIP1": getattr(args, "broker_ip", None),
        "flushDiskType": {"async": "ASYNC_FLUSH", "sync": "SYNC_FLUSH"}.get(flush or "", None),
        # Naming an ACL file turns the ACL on, as aclEnable=true does.
        "aclFile": getattr(args, "acl_file", None),
        "aclEnable": True if getattr(args, "acl_file", None) else None,
    }


def _grpc_port_default(args: argparse.Namespace, config: Any) -> None:
    """``ROCKETQ_GRPC_PORT`` sets the gRPC port when neither ``--grpc-port`` nor the
    broker.conf does (a test run, say, sets it to 0 for every broker it starts)."""
    from ..store.config import read_properties

    if getattr(args, "grpc_port", None) is not None:
        return
    env = os.environ.get("ROCKETQ_GRPC_PORT", "").strip()
    if not env:
        return
    if args.config and "grpcServerPort" in dict(read_properties(args.config)):
        return
    try:
        config.grpcServerPort = int(env)
    except ValueError:
        raise ValueError(f"ROCKETQ_GRPC_PORT must be a port number, not {env!r}") from None


def _grpc_opt_in(args: argparse.Namespace, config: Any) -> None:
    """``rocketq broker`` serves gRPC only when asked (``enableProxy``, ``--enable-proxy`` or
    a non-zero ``--grpc-port``), as RocketMQ's ``mqbroker`` opens no gRPC port without
    ``--enable-proxy``: a master and a slave from plain 4.x broker.conf files then share a
    host. Off, ``grpcServerPort`` becomes 0, which GET_BROKER_CONFIG tells other brokers."""
    from ..store.config import read_properties

    if config.enableProxy:
        return
    if (config.grpcServerPort and args.config
            and "grpcServerPort" in dict(read_properties(args.config))):
        log.warning("grpcServerPort=%d in %s, but gRPC is off: add enableProxy=true (or "
                    "--enable-proxy) to serve RocketMQ 5.x clients", config.grpcServerPort,
                    args.config)
    config.grpcServerPort = 0


async def _serve_grpc(broker: Any) -> Any:
    """The broker's gRPC port for RocketMQ 5.x clients, unless ``grpcServerPort`` is 0; on
    failure the broker is stopped again."""
    if not broker.config.grpcServerPort:
        return None
    from ..grpc import GrpcServer

    server = GrpcServer(broker)
    try:
        with _listening("broker"):
            await server.start()
    except BaseException:
        await broker.stop()
        raise
    return server


def _grpc_note(server: Any) -> str:
    return f", gRPC {server.host}:{server.port}" if server is not None else ""


def _report_unknown_keys(args: argparse.Namespace, unknown: dict[str, str]) -> None:
    """Warn once for each key of the broker.conf that rocketq does not read, naming what it
    is or the nearest known key, so that a misspelt setting does not pass unnoticed."""
    from ..broker.unknown_keys import unknown_key_warnings

    for line in unknown_key_warnings(unknown, args.config or "broker.conf"):
        log.warning("%s", line)


async def _run_broker(args: argparse.Namespace) -> None:
    from ..broker import Broker, load_broker_conf
    from ..store.lock import StoreLock
    from .metrics import _broker_metrics, _metrics_note, _serve_metrics, _stop_all

    stop = _stop_on_signal()
    config, store_config = load_broker_conf(args.config, **_broker_overrides(args))
    _grpc_port_default(args, config)
    _grpc_opt_in(args, config)
    # Before the broker reads its config directory, binds or registers: a second broker on a
    # store in use stops here (StoreLockedError), and the first one goes on undisturbed.
    lock = StoreLock.acquire(store_config.storePathRootDir, f"rocketq broker "
                             f"{config.brokerName} (starting)")
    broker = Broker(config, store_config, store_lock=lock)
    _report_unknown_keys(args, broker.config.unknown)
    with _listening("broker"):
        await broker.start()
    grpc = await _serve_grpc(broker)
    try:
        metrics = await _serve_metrics(*_broker_metrics(broker.config), brokers=(broker,))
    except BaseException:
        await _stop_all(grpc, broker)
        raise
    print(f"Broker {broker.config.brokerName} listening on {broker.address}"
          f"{_grpc_note(grpc)}{_metrics_note(metrics)} (NameServer "
          f"{broker.config.namesrvAddr})", flush=True)
    await stop.wait()
    await _stop_all(metrics, grpc, broker)


def broker_options(p: argparse.ArgumentParser, standalone: bool) -> None:
    p.add_argument("-c", "--config", help="a RocketMQ-style broker.conf")
    if not standalone:
        p.add_argument("--namesrv", help="NameServer addresses (namesrvAddr), ';'-separated")
        p.add_argument("--data-dir", help="store root (storePathRootDir)")
    p.add_argument("--broker-port", type=int, help="listen port (listenPort, default 10911)")
    if standalone:
        p.add_argument("--grpc-port", type=int,
                       help="the gRPC port for RocketMQ 5.x clients (grpcServerPort, "
                            "default 8081, or ROCKETQ_GRPC_PORT; 0: none)")
    else:
        p.add_argument("--enable-proxy", action="store_true",
                       help="serve RocketMQ 5.x clients over gRPC on grpcServerPort, as "
                            "RocketMQ's mqbroker --enable-proxy (broker key enableProxy; "
                            "default: off)")
        p.add_argument("--grpc-port", type=int,
                       help="the gRPC port for RocketMQ 5.x clients (grpcServerPort, "
                            "default 8081, or ROCKETQ_GRPC_PORT; 0: none); a port given "
                            "here turns gRPC on, as --enable-proxy does")
    p.add_argument("--broker-name", help="brokerName (default broker-a)")
    p.add_argument("--cluster", help="brokerClusterName (default DefaultCluster)")
    p.add_argument("--broker-ip", help="address written into message ids (brokerIP1)")
    p.add_argument("--flush", choices=["async", "sync"], help="flushDiskType")
    p.add_argument("--acl-file", metavar="PATH",
                   help="check requests against this plain_acl.yml (turns aclEnable on; "
                        "default file: <data dir>/config/plain_acl.yml)")
    metrics_options(p, "brokerIP1", keys=True)


def add_broker_parser(sub: argparse._SubParsersAction) -> None:
    """``rocketq broker``: one Broker, from a broker.conf and the options above."""
    p = sub.add_parser("broker", help="run a Broker")
    broker_options(p, standalone=False)
    p.set_defaults(func=_run_broker)
