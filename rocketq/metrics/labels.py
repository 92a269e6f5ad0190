"""Label values written as RocketMQ 5's broker writes them (BrokerMetricsManager,
RemotingMetricsConstant, TopicMessageType): request and response codes by lower-case name,
client languages and versions, system topics and groups, a topic's message type, and booleans
as ``true``/``false``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from ..protocol import RequestCode, ResponseCode
from ..protocol.topic import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    is_system_topic,
)
from ..protocol.version import version_name

#: Consumer groups of the broker's own (MixAll.CID_RMQ_SYS_PREFIX), compared in lower case.
SYSTEM_GROUP_PREFIX = "cid_rmq_sys_"
#: What a consumer group's consume type is called in rocketmq_consumer_connections
#: (ConsumeType.getTypeCN, in lower case).
CONSUME_MODES = {"CONSUME_ACTIVELY": "pull", "CONSUME_PASSIVELY": "push", "CONSUME_POP": "pop"}


def flag(value: bool) -> str:
    """A boolean label value, as OpenTelemetry writes Java booleans."""
    return "true" if value else "false"


@lru_cache(maxsize=1024)
def request_code(code: int) -> str:
    """``send_message_v2`` for 310: RocketMQ's RequestCode field name in lower case; the number
    for a code rocketq does not name."""
    try:
        return RequestCode(code).name.lower()
    except ValueError:
        return str(code)


#: The ACL admin requests (50-54), whose refusals RocketMQ numbers as two other answers: an
#: IntEnum names 209 and 210 POLLING_FULL and POLLING_TIMEOUT, so their own names come from
#: here when the request is one of these.
_ACL_REQUESTS = frozenset(range(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
                                RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG + 1))
_ACL_FAILURES = {
    int(ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED): "update_and_create_acl_config_failed",
    int(ResponseCode.DELETE_ACL_CONFIG_FAILED): "delete_acl_config_failed"}


@lru_cache(maxsize=1024)
def response_code(code: int, request: int | None = None) -> str:
    """``success``, ``pull_not_found``, ...: RocketMQ's ResponseCode name in lower case, the
    name it has as the answer to ``request`` where two share a number (the ACL requests'
    ``update_and_create_acl_config_failed`` is 209, ``polling_full`` to a POP)."""
    if request in _ACL_REQUESTS and code in _ACL_FAILURES:
        return _ACL_FAILURES[code]
    try:
        return ResponseCode(code).name.lower()
    except ValueError:
        return str(code)


def version(number: int) -> str:
    """A client's version as RocketMQ labels it: ``v4_9_8`` (MQVersion.getVersionDesc)."""
    return version_name(number).lower()


def language(name: str) -> str:
    """A client's language (``JAVA``, ``PYTHON``, or its LanguageCode number) in lower case."""
    return str(name).lower()


def is_retry(topic: str) -> bool:
    """A retry topic: the 4.x ``%RETRY%group``, or POP's ``%RETRY%group_topic``."""
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_retry_or_dlq(topic: str) -> bool:
    return topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def is_system_group(group: str) -> bool:
    return group.lower().startswith(SYSTEM_GROUP_PREFIX)


def is_system(topic: str, group: str = "") -> bool:
    """BrokerMetricsManager.isSystem: a system topic, or a system group."""
    return is_system_topic(topic) or is_system_group(group)


def message_type(topic: str, attributes: Mapping[str, str] | None = None) -> str:
    """The ``message_type`` of messages stored in ``topic``: ``transaction`` for transactional
    halves and ``delay`` for messages waiting for their time, which RocketMQ's broker also
    counts under the system topic that holds them; otherwise the type the topic declares
    (its ``message.type`` attribute: normal, fifo, delay, transaction, mixed), else
    ``normal``. RocketMQ reads the type of each message from its properties; rocketq reads
    the topic's, so that the send path parses nothing for it."""
    if topic == TRANS_HALF_TOPIC:
        return "transaction"
    if topic == SCHEDULE_TOPIC or topic == TIMER_TOPIC:
        return "delay"
    declared = attributes.get("message.type") if attributes else None
    return declared.lower() if declared else "normal"


class Node:
    """The labels every sample of one server carries (RocketMQ's ``cluster``, ``node_type``,
    ``node_id``), and the metric families built with them first."""

    def __init__(self, node_type: str, node_id: str, cluster: str | None = None) -> None:
        pairs = [("cluster", cluster)] if cluster is not None else []
        pairs += [("node_type", node_type), ("node_id", node_id)]
        self.names = [k for k, _ in pairs]
        self.values = [v for _, v in pairs]

    def counter(self, name: str, doc: str, *labels: str) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=[*self.names, *labels])

    def gauge(self, name: str, doc: str, *labels: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*self.names, *labels])

    def histogram(self, name: str, doc: str, *labels: str) -> HistogramMetricFamily:
        return HistogramMetricFamily(name, doc, labels=[*self.names, *labels])

    def add(self, family: Metric, values: Sequence[str], value: float) -> None:
        """A sample of ``family`` with this node's labels, then ``values``."""
        family.add_metric([*self.values, *values], value)  # type: ignore[attr-defined]

    def add_histogram(self, family: HistogramMetricFamily, values: Sequence[str],
                      bounds: Sequence[float], counts: Sequence[int], total: float) -> None:
        """A histogram sample from per-bucket ``counts`` (one per bound, then one past the
        last) and the sum of what was observed."""
        family.add_metric([*self.values, *values], cumulative(bounds, counts), total)


def cumulative(bounds: Sequence[float], counts: Sequence[int]) -> list[tuple[str, float]]:
    """Prometheus buckets (``le`` and the count at or below it) from per-bucket counts."""
    out = []
    running = 0
    for bound, count in zip(bounds, counts, strict=False):
        running += count
        out.append((floatToGoString(bound), running))
    out.append(("+Inf", running + counts[len(bounds)]))
    return out
