"""Prometheus metrics of rocketq's server processes (brokers, NameServers, controllers).

Everything is read when Prometheus asks, from counters and tables the servers keep anyway:
the send and pull paths count nothing more for it (the broker's ``Stats`` are the counters),
and a server times its requests only while an exporter is attached. Modules:

- ``exporter``: one process's registry and HTTP port; what the CLI starts.
- ``http``: the HTTP server, on the process's event loop.
- ``broker``: RocketMQ 5's broker metrics (``rocketmq_messages_in_total``, ...).
- ``lag``: consumer lag, in flight, ready, and their latencies.
- ``legacy``: apache/rocketmq-exporter's names (``rocketmq_group_diff``, ...).
- ``rpc``: ``rocketmq_rpc_latency``, from the remoting server's observer.
- ``replication``, ``acl``, ``namesrv``, ``controller``: rocketq's own ``rocketq_*``.
- ``labels``: label values as RocketMQ writes them.

The metric list, with each one's labels and source, is in ``docs/metrics.md``.
"""

from __future__ import annotations

from .exporter import Exporter
from .http import MetricsServer

__all__ = ["Exporter", "MetricsServer"]
