"""Topic names: RocketMQ's validation rules and the system topics (TopicValidator)."""

from __future__ import annotations

import re

TOPIC_MAX_LENGTH = 127
#: Retry and dead-letter topics carry a group name, so they may be longer.
SYSTEM_TOPIC_MAX_LENGTH = 255

_LEGAL = re.compile(r"^[%|a-zA-Z0-9_-]+$")

AUTO_CREATE_TOPIC_KEY = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: rocketq's own: the decisions of exactly-once sinks (broker/transactions/sink.py).
SINK_LEDGER_TOPIC = "RMQ_SYS_SINK_LEDGER"
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: rocketq's own: every change of a committed consumer offset, so that it replicates with the
#: messages (broker/offsets/log.py).
OFFSET_LOG_TOPIC = "rmq_sys_CONSUMER_OFFSET_LOG"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: The topics brokers keep for themselves (TopicValidator.SYSTEM_TOPIC_SET, and rocketq's
#: sink ledger and offset log); names starting with ``rmq_sys_`` are system topics too.
SYSTEM_TOPICS = frozenset({
    AUTO_CREATE_TOPIC_KEY, SCHEDULE_TOPIC, "BenchmarkTest", TRANS_HALF_TOPIC,
    "RMQ_SYS_TRACE_TOPIC", TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT", SINK_LEDGER_TOPIC, OFFSET_LOG_TOPIC})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: Groups with this prefix are the brokers' own (RocketMQ's MixAll.isSysConsumerGroup); they
#: are created on first use even when autoCreateSubscriptionGroup is false.
SYS_GROUP_PREFIX = "CID_RMQ_SYS_"
#: Groups RocketMQ's SubscriptionGroupManager creates at start (tools, the ONS HTTP proxy).
SYSTEM_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                 "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                 "CID_ONSAPI_OWNER", "CID_SYS_RMQ_TRANS")


class Perm:
    """Permission bits of a topic or broker (RocketMQ's PermName)."""

    PRIORITY = 8
    READ = 4
    WRITE = 2
    INHERIT = 1  # the default topic's: auto-created topics inherit its queues

    @staticmethod
    def to_string(perm: int) -> str:
        """RocketMQ's rendering of permission bits, e.g. ``RW-``."""
        return (("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-")
                + ("X" if perm & Perm.INHERIT else "-"))


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_system_topic(topic: str) -> bool:
    """Whether ``topic`` is one brokers keep for themselves (TopicValidator.isSystemTopic);
    retry and dead-letter topics are not, they belong to their group."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_system_group(group: str) -> bool:
    """Whether ``group`` is one of the consumer groups brokers keep for themselves and their
    tools."""
    return group in SYSTEM_GROUPS or group.startswith(SYS_GROUP_PREFIX)


class IllegalTopicError(ValueError):
    """A topic name RocketMQ would refuse."""


def validate_topic(topic: str) -> None:
    """Raise IllegalTopicError unless ``topic`` is a name RocketMQ accepts."""
    if not isinstance(topic, str) or not topic.strip():
        raise IllegalTopicError("the topic name is empty")
    limit = (SYSTEM_TOPIC_MAX_LENGTH
             if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
             else TOPIC_MAX_LENGTH)
    if len(topic) > limit:
        raise IllegalTopicError(
            f"the topic name is {len(topic)} characters long; the limit is {limit}")
    if not _LEGAL.fullmatch(topic):  # not match: '$' would let a final newline pass
        raise IllegalTopicError(
            f"the topic name {topic!r} contains illegal characters; "
            "allowed are letters, digits, '%', '|', '_' and '-'")


def retry_topic(group: str) -> str:
    """The retry topic of a consumer group."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """The dead-letter topic of a consumer group."""
    return DLQ_GROUP_TOPIC_PREFIX + group
