"""Sans-IO pieces of RocketMQ's remoting protocol: bytes in, objects out, no sockets.

The wire vocabulary every layer uses is exported here, each fact named once::

    from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode, Property, Perm

Submodules hold the rest: ``command`` (frames), ``message`` (records, properties, batches),
``topic`` (names and validation), ``filter`` and ``sql92`` (subscriptions), ``fastjson``.
"""

from .codes import CURRENT_VERSION, LanguageCode, PullSysFlag, RequestCode, ResponseCode
from .command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    MAX_FRAME_SIZE,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
)
from .message import (
    MessageFormatError,
    MessageRecord,
    Property,
    SysFlag,
    decode_properties,
    decode_record,
    decode_records,
    encode_properties,
    walk_records,
)
from .topic import (
    AUTO_CREATE_TOPIC_KEY,
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    IllegalTopicError,
    Perm,
    dlq_topic,
    is_retry_topic,
    retry_topic,
    validate_topic,
)

__all__ = [
    "AUTO_CREATE_TOPIC_KEY", "CURRENT_VERSION", "DLQ_GROUP_TOPIC_PREFIX", "FLAG_ONEWAY",
    "FLAG_RESPONSE", "JAVA_INT_MAX", "JAVA_INT_MIN", "JAVA_LONG_MAX", "JAVA_LONG_MIN",
    "MAX_FRAME_SIZE", "RETRY_GROUP_TOPIC_PREFIX", "SCHEDULE_TOPIC", "TIMER_TOPIC",
    "TRANS_HALF_TOPIC", "TRANS_OP_HALF_TOPIC", "FrameDecoder", "IllegalTopicError",
    "LanguageCode", "MessageFormatError", "MessageRecord", "Perm", "Property", "ProtocolError",
    "PullSysFlag", "RemotingCommand", "RequestCode", "ResponseCode", "SysFlag",
    "decode_properties", "decode_record", "decode_records", "dlq_topic", "encode_properties",
    "is_retry_topic", "retry_topic", "validate_topic", "walk_records",
]
