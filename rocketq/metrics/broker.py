"""A broker's metrics under RocketMQ 5's names and labels (BrokerMetricsManager,
DefaultStoreMetricsManager), read when Prometheus asks from what the broker keeps anyway: its
``Stats`` counters, topic and subscription group tables, client table, store offsets, and the
sink ledger's counts.

Every sample carries ``cluster`` (brokerClusterName), ``node_type`` (``broker``) and
``node_id`` (brokerName), as RocketMQ's do. Where rocketq's counting differs from RocketMQ's it
is said in ``docs/metrics.md``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from ..broker.stats import SIZE_BUCKETS, earliest_message_time
from ..store.retention import disk_space
from .labels import (
    CONSUME_MODES,
    Node,
    flag,
    is_retry,
    is_retry_or_dlq,
    is_system,
    is_system_group,
    language,
    message_type,
    version,
)
from .lag import LagTable

if TYPE_CHECKING:
    from ..broker import Broker


def broker_node(broker: Broker) -> Node:
    """The labels of a broker's samples."""
    return Node("broker", broker.config.brokerName, broker.config.brokerClusterName)


class BrokerCollector:
    """RocketMQ 5's broker metrics of one broker."""

    def __init__(self, broker: Broker, lags: LagTable) -> None:
        self.broker = broker
        self.node = broker_node(broker)
        self.lags = lags

    def collect(self) -> Iterator[Metric]:
        yield from self._traffic()
        yield from self._tables()
        yield from self._connections()
        yield from self._lags()
        if self.broker.store is not None:
            yield from self._storage()
        yield from self._sinks()

    # ------------------------------------------------------------------ messages in and out
    def _traffic(self) -> Iterator[Metric]:
        node, stats, topics = self.node, self.broker.stats, self.broker.topics.topics
        messages_in = node.counter("rocketmq_messages_in_total", "Messages stored for "
                                   "producers", "topic", "message_type", "is_system")
        bytes_in = node.counter("rocketmq_throughput_in_total", "Bytes stored for producers",
                                "topic", "message_type", "is_system")
        sizes = node.histogram("rocketmq_message_size", "Sizes of the messages stored for "
                               "producers, in bytes", "topic", "message_type", "is_system")
        size_buckets = stats.size_buckets
        for topic, count in list(stats.put_by_topic.items()):
            if is_retry_or_dlq(topic):
                continue  # RocketMQ leaves retries and dead letters out of messages in
            config = topics.get(topic)
            labels = [topic, message_type(topic, config.attributes if config else None),
                      flag(is_system(topic))]
            total = stats.put_bytes_by_topic.get(topic, 0)
            node.add(messages_in, labels, count)
            node.add(bytes_in, labels, total)
            buckets = size_buckets.get(topic)
            if buckets is not None:
                node.add_histogram(sizes, labels, SIZE_BUCKETS, buckets, total)
        yield from (messages_in, bytes_in, sizes)
        messages_out = node.counter("rocketmq_messages_out_total", "Messages handed to "
                                    "consumers", "topic", "consumer_group", "is_retry",
                                    "is_system")
        bytes_out = node.counter("rocketmq_throughput_out_total", "Bytes handed to consumers",
                                 "topic", "consumer_group", "is_retry", "is_system")
        for (topic, group), count in list(stats.get_by_topic_group.items()):
            labels = [topic, group, flag(is_retry(topic)), flag(is_system(topic, group))]
            node.add(messages_out, labels, count)
            node.add(bytes_out, labels, stats.get_bytes_by_topic_group.get((topic, group), 0))
        dlq = node.counter("rocketmq_send_to_dlq_messages_total", "Messages consumers failed "
                           "too often, sent to their group's dead-letter topic", "topic",
                           "consumer_group", "is_system")
        for (topic, group), count in list(stats.dlq_by_topic_group.items()):
            node.add(dlq, [topic, group, flag(is_system(topic, group))], count)
        yield from (messages_out, bytes_out, dlq)

    # ------------------------------------------------------------------ tables and state
    def _tables(self) -> Iterator[Metric]:
        node, broker = self.node, self.broker
        topics = node.gauge("rocketmq_topic_number", "Topics of this broker")
        node.add(topics, [], len(broker.topics.topics))
        groups = node.gauge("rocketmq_consumer_group_number", "Subscription groups of this "
                            "broker")
        node.add(groups, [], len(broker.subscription_groups.groups))
        permission = node.gauge("rocketmq_broker_permission", "brokerPermission (4 read, "
                                "2 write)")
        node.add(permission, [], broker.config.brokerPermission)
        # rocketq serves every request on one event loop, not on thread pools: what waits
        # is the sends read and queued to be appended together, and the pulls held.
        watermark = node.gauge("rocketmq_processor_watermark", "Requests waiting, by kind",
                               "processor")
        node.add(watermark, ["send"], broker.send.queued)
        node.add(watermark, ["pull"], broker.pull.held)
        loop_lag = node.gauge("rocketq_event_loop_lag_seconds", "How late the broker's "
                              "event loop ran a timer due now (sampled every second)")
        node.add(loop_lag, [], broker.stats.loop_lag)
        yield from (topics, groups, permission, watermark, loop_lag)

    def _connections(self) -> Iterator[Metric]:
        node, clients = self.node, self.broker.clients
        producers: dict[tuple[str, str], int] = {}
        for members in list(clients.producers.values()):
            for channel in list(members.values()):
                key = (language(channel.language), version(channel.version))
                producers[key] = producers.get(key, 0) + 1
        family = node.gauge("rocketmq_producer_connections", "Producer clients connected, "
                            "per group they heartbeat for", "language", "version",
                            "protocol_type")
        for (lang, ver), count in producers.items():
            node.add(family, [lang, ver, "remoting"], count)
        yield family
        consumers: dict[tuple[str, str, str, str], int] = {}
        for name, group in list(clients.consumers.items()):
            mode = CONSUME_MODES.get(group.consume_type, group.consume_type.lower())
            for channel in list(group.channels.values()):
                key = (name, language(channel.language), version(channel.version), mode)
                consumers[key] = consumers.get(key, 0) + 1
        family = node.gauge("rocketmq_consumer_connections", "Consumer clients connected",
                            "consumer_group", "language", "version", "consume_mode",
                            "protocol_type", "is_system")
        for (group_name, lang, ver, mode), count in consumers.items():
            node.add(family, [group_name, lang, ver, mode, "remoting",
                              flag(is_system_group(group_name))], count)
        yield family

    def _lags(self) -> Iterator[Metric]:
        node = self.node
        names = ("consumer_group", "topic", "is_retry", "is_system")
        lag = node.gauge("rocketmq_consumer_lag_messages", "Messages the group has not "
                         "consumed yet", *names)
        latency = node.gauge("rocketmq_consumer_lag_latency", "How long the oldest message "
                             "the group has not consumed has been stored, in milliseconds",
                             *names)
        inflight = node.gauge("rocketmq_consumer_inflight_messages", "Messages handed to the "
                              "group's consumers and not consumed yet", *names)
        queueing = node.gauge("rocketmq_consumer_queueing_latency", "How long the oldest "
                              "message the group has not pulled yet has been stored, in "
                              "milliseconds", *names)
        ready = node.gauge("rocketmq_consumer_ready_messages", "Messages waiting to be pulled "
                           "by the group", *names)
        for row in self.lags.rows():
            labels = [row.group, row.topic, flag(is_retry(row.topic)),
                      flag(is_system(row.topic, row.group))]
            node.add(lag, labels, row.lag)
            node.add(latency, labels, row.lag_latency_ms)
            node.add(inflight, labels, row.inflight)
            node.add(queueing, labels, row.queueing_latency_ms)
            node.add(ready, labels, row.ready)
        yield from (lag, latency, inflight, queueing, ready)

    def _storage(self) -> Iterator[Metric]:
        node, store = self.node, self.broker.store
        names = ("storage_type", "storage_medium")
        local = ["local", "disk"]
        size = node.gauge("rocketmq_storage_size", "Bytes in use on the disk that holds the "
                          "store (storePathRootDir)", *names)
        root = store.config.storePathRootDir
        if os.path.isdir(root):
            # DefaultStoreMetricsManager: getTotalSpace - getFreeSpace, df's Used.
            node.add(size, local, disk_space(root).used)
        commitlog = store.commitlog
        flush = node.gauge("rocketmq_storage_flush_behind_bytes", "CommitLog bytes not "
                           "flushed to disk yet", *names)
        node.add(flush, local, max(0, commitlog.max_offset - commitlog.files.flushed_offset))
        dispatch = node.gauge("rocketmq_storage_dispatch_behind_bytes", "CommitLog bytes not "
                              "dispatched to the consume queues yet", *names)
        node.add(dispatch, local, max(0, commitlog.max_offset - store.reput_offset))
        reserve = node.gauge("rocketmq_storage_message_reserve_time", "How long the oldest "
                             "message in the CommitLog has been stored, in milliseconds",
                             *names)
        earliest = earliest_message_time(store)
        if earliest > 0:
            node.add(reserve, local, max(0, int(time.time() * 1000) - earliest))
        yield from (size, flush, dispatch, reserve)

    def _sinks(self) -> Iterator[Metric]:
        node, sinks = self.node, self.broker.sinks
        commits = node.counter("rocketq_sink_commits_total", "Exactly-once sink decisions "
                               "asked of this broker, by outcome", "sink", "result")
        for (sink, result), count in list(sinks.outcomes.items()):
            node.add(commits, [sink, result], count)
        resolved = node.counter("rocketq_sink_messages_total", "Sink messages (transactional "
                                "halves) committed or rolled back", "sink", "action")
        for (sink, action), count in list(sinks.resolved.items()):
            node.add(resolved, [sink, action], count)
        yield from (commits, resolved)
