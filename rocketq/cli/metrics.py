"""The ``--metrics-port`` and ``--metrics-host`` options of the server commands, and the start
of a process's Prometheus exporter (``metrics.Exporter``), as ``_serve_grpc`` starts a broker's
gRPC port: the servers themselves never import the metrics layer."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from .common import _listening

log = logging.getLogger("rocketq")


def metrics_options(p: argparse.ArgumentParser, host_default: str, keys: bool = False) -> None:
    """``--metrics-port`` and ``--metrics-host`` of a server command (``keys``: a broker's,
    which broker.conf can also set)."""
    conf = (" (metricsExporterType=PROM and metricsPromExporterPort in broker.conf)"
            if keys else "")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help=f"serve Prometheus metrics on http://HOST:PORT/metrics{conf}; 0: any "
                        "free port (default: off)")
    p.add_argument("--metrics-host", metavar="HOST",
                   help=f"the address the metrics port listens on (default: {host_default}"
                        + (", or metricsPromExporterHost" if keys else "") + ")")


async def _serve_metrics(host: str, port: int | None, *, brokers: tuple[Any, ...] = (),
                         namesrv: Any = None, controller: Any = None) -> Any:
    """The Prometheus exporter of this process's servers on ``host:port`` (0: a free port),
    unless ``port`` is None (metrics off, the default)."""
    if port is None:
        return None
    from ..metrics import Exporter

    exporter = Exporter(host, port)
    for broker in brokers:
        exporter.add_broker(broker)
    if namesrv is not None:
        exporter.add_namesrv(namesrv)
    if controller is not None:
        exporter.add_controller(controller)
    with _listening("metrics exporter"):
        await exporter.start()
    return exporter


def _broker_metrics(config: Any) -> tuple[str, int | None]:
    """Where a broker's exporter listens: ``metricsPromExporterHost`` (--metrics-host), else
    brokerIP1, as RocketMQ; its port when ``metricsExporterType`` is PROM (--metrics-port)."""
    port = config.metricsPromExporterPort if config.metricsExporterType == "PROM" else None
    return config.metricsPromExporterHost or config.brokerIP1, port


def _metrics_note(exporter: Any) -> str:
    return f", metrics {exporter.url}" if exporter is not None else ""


async def _stop_all(*servers: Any) -> None:
    """Stop what started, in order (the exporter first), skipping what did not. Each is
    stopped even when one before it fails; the first failure is raised once all were."""
    failure: BaseException | None = None
    for server in servers:
        if server is None:
            continue
        try:
            await server.stop()
        except BaseException as exc:  # a Ctrl-C while stopping too: the others still stop
            if failure is None:
                failure = exc
            else:
                log.error("stopping %s failed as well: %r", type(server).__name__, exc)
    if failure is not None:
        raise failure
