"""The names and labels of apache/rocketmq-exporter (the 4.x-era exporter, an admin client
that polls a cluster), so that Grafana dashboards built on it work against rocketq's brokers
unchanged.

That exporter asks each master for its stats items and offsets and publishes them under its
own labels (``cluster``, ``broker``, ``topic``, ``group``, ``brokerIP``); each rocketq broker
publishes its own share of the same series. Rates are the exporter's: the last minute's
``tps`` of RocketMQ's stats items (``TOPIC_PUT_NUMS``, ``GROUP_GET_NUMS``, ...), from the
windows the broker keeps for mqadmin's ``statsAll`` (``broker/stats/stats_items.py``). A series the
exporter computes cluster-wide (``rocketmq_group_diff``) is this broker's part here: sum it
over brokers, as a dashboard does when it sums over instances.

The exporter reads masters only. A slave publishes the families with no per-topic or
per-group samples (they would carry its master's labels, and be counted twice), and only its
own ``rocketmq_broker_tps`` and ``rocketmq_broker_qps``, which its ``brokerIP`` tells apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric

from ..broker.stats.stats_items import (
    BROKER_GET_NUMS,
    BROKER_KEY,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    MINUTE,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
)
from ..protocol.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from .lag import LagTable

if TYPE_CHECKING:
    from ..broker import Broker

#: The exporter's label names, per kind of series.
TOPIC_LABELS = ("cluster", "broker", "topic")
GROUP_LABELS = ("cluster", "broker", "topic", "group")
DIFF_LABELS = ("group", "topic", "countOfOnlineConsumers", "msgModel")
BROKER_LABELS = ("cluster", "brokerIP", "broker")
#: MessageModel.CLUSTERING.ordinal(), as the exporter writes msgModel.
CLUSTERING = "1"


class LegacyCollector:
    """rocketmq-exporter's series for one broker."""

    def __init__(self, broker: Broker, lags: LagTable) -> None:
        self.broker = broker
        self.lags = lags

    def _minute_tps(self, name: str) -> dict[Any, float]:
        """Every key of stats item ``name`` with its rate over the last minute."""
        items = self.broker.stats.items
        item_set = items.sets.get(name)
        if item_set is None or items.last is None:
            return {}
        return {key: item_set.snapshot(key, MINUTE, items.last).tps
                for key in list(item_set.counters())}

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        cluster, name = broker.config.brokerClusterName, broker.config.brokerName
        master = broker.config.brokerId == 0  # a slave's topics and groups are its master's
        # Messages and bytes per second, per topic and per (topic, group).
        for metric, item, doc in (
                ("rocketmq_producer_tps", TOPIC_PUT_NUMS, "TopicPutNums"),
                ("rocketmq_producer_message_size", TOPIC_PUT_SIZE, "TopicPutMessageSize")):
            family = GaugeMetricFamily(metric, doc, labels=TOPIC_LABELS)
            for topic, tps in (self._minute_tps(item) if master else {}).items():
                if not topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
                    family.add_metric([cluster, name, topic], tps)
            yield family
        for metric, item, doc in (
                ("rocketmq_consumer_tps", GROUP_GET_NUMS, "GroupGetNums"),
                ("rocketmq_consumer_message_size", GROUP_GET_SIZE, "GroupGetMessageSize")):
            family = GaugeMetricFamily(metric, doc, labels=GROUP_LABELS)
            for (topic, group), tps in (self._minute_tps(item) if master else {}).items():
                family.add_metric([cluster, name, topic, group], tps)
            yield family
        yield from self._offsets(cluster, name, master)
        yield from self._diffs(cluster, name, master)
        for metric, item, doc in (("rocketmq_broker_tps", BROKER_PUT_NUMS, "BrokerPutNums"),
                                  ("rocketmq_broker_qps", BROKER_GET_NUMS, "BrokerGetNums")):
            family = GaugeMetricFamily(metric, doc, labels=BROKER_LABELS)
            family.add_metric([cluster, broker.address, name],
                              self._minute_tps(item).get(BROKER_KEY, 0.0))
            yield family

    def _offsets(self, cluster: str, name: str, master: bool) -> Iterator[Metric]:
        """The queues' max offsets summed per topic (retry and dead-letter topics apart, as
        the exporter keeps them); no samples on a slave."""
        store = self.broker.store if master else None
        offsets = GaugeMetricFamily("rocketmq_producer_offset", "TopicOffset",
                                    labels=TOPIC_LABELS)
        retry = GaugeMetricFamily("rocketmq_topic_retry_offset", "TopicRetryOffset",
                                  labels=TOPIC_LABELS)
        dlq = GaugeMetricFamily("rocketmq_topic_dlq_offset", "TopicDLQOffset",
                                labels=("cluster", "broker", "group"))
        if store is not None:
            for topic in sorted(store.topics()):
                total = sum(store.get_max_offset(topic, q) for q in store.queue_ids(topic))
                if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    retry.add_metric([cluster, name, topic], total)
                elif topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                    dlq.add_metric([cluster, name, topic[len(DLQ_GROUP_TOPIC_PREFIX):]], total)
                else:
                    offsets.add_metric([cluster, name, topic], total)
        yield from (offsets, retry, dlq)

    def _diffs(self, cluster: str, name: str, master: bool) -> Iterator[Metric]:
        """Consumer offsets, lags and lag latencies of clustering groups; no samples on a
        slave."""
        consumers = self.broker.clients.consumers
        consumer_offset = GaugeMetricFamily("rocketmq_consumer_offset",
                                            "GroupBrokerTotalOffset", labels=GROUP_LABELS)
        latency = GaugeMetricFamily("rocketmq_group_get_latency_by_storetime",
                                    "GroupGetLatencyByStoreTime", labels=GROUP_LABELS)
        diff = GaugeMetricFamily("rocketmq_group_diff", "GroupDiff", labels=DIFF_LABELS)
        retry_diff = GaugeMetricFamily("rocketmq_group_retrydiff", "GroupRetryDiff",
                                       labels=DIFF_LABELS)
        dlq_diff = GaugeMetricFamily("rocketmq_group_dlqdiff", "GroupDLQDiff",
                                     labels=DIFF_LABELS)
        seen_dlq = set()
        for row in self.lags.rows() if master else ():
            group = consumers.get(row.group)
            if group is not None and group.message_model != "CLUSTERING":
                continue
            online = str(len(group.channels)) if group is not None else "0"
            labels = [row.group, row.topic, online, CLUSTERING]
            if row.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                retry_diff.add_metric(labels, row.lag)
            elif row.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                dlq_diff.add_metric(labels, row.lag)
                seen_dlq.add(row.topic)
            else:
                diff.add_metric(labels, row.lag)
                consumer_offset.add_metric([cluster, name, row.topic, row.group],
                                           row.consumer_offset)
                latency.add_metric([cluster, name, row.topic, row.group], row.lag_latency_ms)
        # A dead-letter topic nobody consumes: all of it is the group's DLQ backlog.
        store = self.broker.store if master else None
        if store is not None:
            for topic in sorted(store.topics()):
                if topic.startswith(DLQ_GROUP_TOPIC_PREFIX) and topic not in seen_dlq:
                    group_name = topic[len(DLQ_GROUP_TOPIC_PREFIX):]
                    group = consumers.get(group_name)
                    online = str(len(group.channels)) if group is not None else "0"
                    backlog = sum(store.get_max_offset(topic, q) - store.get_min_offset(topic, q)
                                  for q in store.queue_ids(topic))
                    dlq_diff.add_metric([group_name, topic, online, CLUSTERING], backlog)
        yield from (consumer_offset, latency, diff, retry_diff, dlq_diff)
