"""A NameServer's metrics (rocketq's own; RocketMQ's NameServer exports none): the brokers
alive in its route table per cluster, the broker groups and topics it routes. Its requests
are counted, by code, in ``rocketmq_rpc_latency`` (``node_type`` ``nameserver``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from .labels import Node

if TYPE_CHECKING:
    from ..namesrv import NameServer


def namesrv_node(ns: NameServer) -> Node:
    return Node("nameserver", ns.address)


class NameServerCollector:
    """The route table of one NameServer."""

    def __init__(self, ns: NameServer) -> None:
        self.ns = ns
        self.node = namesrv_node(ns)

    def collect(self) -> Iterator[Metric]:
        node, routes = self.node, self.ns.routes
        with routes.lock:
            live = [(info.cluster, info.broker_id) for info in routes.live.values()]
            clusters = {name: len(groups) for name, groups in routes.clusters.items()}
            topics = len(routes.topic_queues)
        brokers = node.gauge("rocketq_namesrv_brokers", "Brokers alive in the route table "
                             "(registered, not expired)", "cluster", "role")
        counts: dict[tuple[str, str], int] = {}
        for cluster, broker_id in live:
            key = (cluster, "master" if broker_id == 0 else "slave")
            counts[key] = counts.get(key, 0) + 1
        for (cluster, role), count in sorted(counts.items()):
            node.add(brokers, [cluster, role], count)
        groups = node.gauge("rocketq_namesrv_broker_groups", "Broker groups (broker names) "
                            "per cluster", "cluster")
        for cluster, count in sorted(clusters.items()):
            node.add(groups, [cluster], count)
        topic_number = node.gauge("rocketq_namesrv_topics", "Topics routed")
        node.add(topic_number, [], topics)
        yield from (brokers, groups, topic_number)
