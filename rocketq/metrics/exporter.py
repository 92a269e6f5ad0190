"""The Prometheus exporter of one server process: the collectors of the brokers, NameServer
and controller it runs, merged into one registry, and the HTTP server that serves them.

Attaching a server also attaches a request timer to its remoting port
(``RemotingServer.set_observer``), which ``stop`` detaches again: without an exporter the
servers time nothing. The CLI builds one when ``--metrics-port`` or the broker's
``metricsExporterType=PROM`` asks for it; nothing else imports this layer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric

from .acl import AclCollector
from .broker import BrokerCollector, broker_node
from .controller import ControllerCollector
from .http import MetricsServer
from .lag import LagTable
from .legacy import LegacyCollector
from .namesrv import NameServerCollector, namesrv_node
from .replication import ReplicationCollector
from .rpc import RpcLatency

if TYPE_CHECKING:
    from ..broker import Broker
    from ..controller import Controller
    from ..namesrv import NameServer
    from ..remoting import RemotingServer

log = logging.getLogger("rocketq.metrics")


class Source(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class _Merged:
    """The families of every source as one collector: two sources may give samples of one
    family (the broker's and the NameServer's rpc latencies in a standalone process), which
    the exposition must show once. A source that fails is left out of that scrape, and
    logged, rather than failing the scrape."""

    def __init__(self, sources: list[Source]) -> None:
        self.sources = sources
        self.failed: set[int] = set()

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for source in list(self.sources):
            try:
                families = list(source.collect())
            except Exception:
                if id(source) not in self.failed:
                    self.failed.add(id(source))
                    log.exception("metrics: %s failed; left out of the scrape",
                                  type(source).__name__)
                continue
            for family in families:
                have = merged.get(family.name)
                if have is None:
                    merged[family.name] = family
                else:
                    have.samples.extend(family.samples)
        yield from merged.values()


class _Restricted:
    """The samples of a registry whose names were asked for (``?name[]=``): a sample is kept
    when its own name (``rocketmq_rpc_latency_count``) or its family's is among them."""

    def __init__(self, registry: CollectorRegistry, names: Iterable[str]) -> None:
        self.registry = registry
        self.names = set(names)

    def collect(self) -> Iterator[Metric]:
        names = self.names
        for family in self.registry.collect():
            whole = family.name in names
            samples = [s for s in family.samples if whole or s.name in names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


class _Registry(CollectorRegistry):
    """A registry whose ``name[]`` filter sees every collector. prometheus_client's own looks
    a name up among those collectors declared (``describe``), which ``_Merged`` cannot: its
    families come with the servers added after it is registered. This one collects once and
    keeps the samples asked for."""

    def restricted_registry(self, names: Iterable[str]) -> Any:
        return _Restricted(self, names)


class Exporter:
    """Metrics of the servers added, on ``host:port`` once started (port 0: a free one)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = _Registry(auto_describe=False)
        self.sources: list[Source] = []
        self.registry.register(_Merged(self.sources))  # type: ignore[arg-type]
        # The process: CPU, memory, open files, and the Python runtime.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.http = MetricsServer(self.registry, host, port)
        self._timed: list[RemotingServer] = []

    @property
    def url(self) -> str:
        """Where the metrics are served: ``http://host:port/metrics``."""
        return self.http.url

    def _time(self, server: RemotingServer, timer: RpcLatency) -> None:
        self.sources.append(timer)
        server.set_observer(timer.observe)
        self._timed.append(server)

    def add_broker(self, broker: Broker) -> None:
        """RocketMQ 5's broker metrics, rocketmq-exporter's, replication lag, ACL refusals
        and sink commits of ``broker``, and the timing of its requests."""
        lags = LagTable(broker)
        node = broker_node(broker)
        self.sources += [BrokerCollector(broker, lags), LegacyCollector(broker, lags),
                         ReplicationCollector(broker), AclCollector(node, lambda: broker.acl)]
        self._time(broker.server, RpcLatency(node))

    def add_namesrv(self, ns: NameServer) -> None:
        """The route table's metrics and ACL refusals of ``ns``, and its requests' timing."""
        node = namesrv_node(ns)
        self.sources += [NameServerCollector(ns), AclCollector(node, lambda: ns.acl)]
        self._time(ns.server, RpcLatency(node))

    def add_controller(self, controller: Controller) -> None:
        """Epochs, SyncStateSets and elections of ``controller``, and its requests' timing."""
        collector = ControllerCollector(controller)
        self.sources.append(collector)
        self._time(controller.server, RpcLatency(collector.node))

    async def start(self) -> None:
        """Serve; raises OSError when the port cannot be bound (the timers are detached
        again then)."""
        try:
            await self.http.start()
        except BaseException:
            self._untime()
            raise

    async def stop(self) -> None:
        self._untime()
        await self.http.stop()

    def _untime(self) -> None:
        for server in self._timed:
            server.set_observer(None)
        self._timed = []
