"""Messages between RocketMQ 5's protobuf form (``apache.rocketmq.v2.Message``) and the
broker's records, as the Java proxy's GrpcConverter and SendMessageActivity map them. No
I/O: protobuf in, properties and records out, and back.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from ..protocol import Property, SysFlag
from ..protocol.message import MessageRecord
from .proto import definition_pb2 as pb

#: Property names the broker gives meaning to (RocketMQ's MessageConst.STRING_HASH_SET, and
#: rocketq's own): never user properties, either way.
SYSTEM_PROPERTIES = frozenset({
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
    "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY",
    "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID",
    "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
    "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "_CATCHUP_", "TIMER_DELAY_LEVEL", "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "__transactionId__", "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "__SHARDINGKEY", "__BORNHOST", "BORN_TIMESTAMP",
    "TRACE_CONTEXT", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "INNER_MULTI_DISPATCH",
    "INNER_NUM", "INNER_BASE", "__SINK_NAME", "__SINK_BATCH", "__SINK_TXN",
})
#: The most user properties a message may carry, and their bytes (the proxy's limits).
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16 * 1024
#: A message group's longest UTF-8 length (the proxy refuses 64 bytes and more).
MAX_MESSAGE_GROUP_BYTES = 64
#: How far ahead a delivery timestamp may be (the proxy's maxDelayTimeMills: one day).
MAX_DELAY_MS = 24 * 3600 * 1000


class ConversionError(ValueError):
    """A message that cannot be stored as it is; ``code`` is the v2 status code to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def message_type_of(properties: dict[str, str]) -> int:
    """The v2 MessageType stored properties mean (TopicMessageType.parseFromMessageProperty)."""
    if properties.get(Property.TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if any(k in properties for k in ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
                                     "TIMER_DELAY_MS", "TIMER_OUT_MS")):
        return pb.DELAY
    if Property.SHARDING_KEY in properties:
        return pb.FIFO
    return pb.NORMAL


#: Topic attribute ``message.type`` -> the v2 types the topic takes.
ACCEPTED_TYPES = {
    "NORMAL": (pb.NORMAL,), "FIFO": (pb.FIFO,), "DELAY": (pb.DELAY,),
    "TRANSACTION": (pb.TRANSACTION,),
    "MIXED": (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION),
}
TYPE_NAMES = {pb.NORMAL: "NORMAL", pb.FIFO: "FIFO", pb.DELAY: "DELAY",
              pb.TRANSACTION: "TRANSACTION"}


def to_properties(message: pb.Message, now_ms: int, max_body: int
                  ) -> tuple[dict[str, str], bytes, int, int]:
    """A v2 Message as the broker stores it: ``(properties, body, sysflag, born timestamp)``.
    Checks what the Java proxy checks, with its codes; raises ConversionError."""
    sp = message.system_properties
    body = bytes(message.body)
    if sp.body_encoding == pb.GZIP:
        body = _inflate(body, max_body, zlib.MAX_WBITS | 16)
    if not body:
        raise ConversionError(pb.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > max_body:
        raise ConversionError(pb.MESSAGE_BODY_TOO_LARGE,
                              f"the message body is {len(body)} bytes; this broker takes at "
                              f"most {max_body} (maxMessageSize)")
    user = dict(message.user_properties)
    if len(user) > MAX_USER_PROPERTIES:
        raise ConversionError(pb.MESSAGE_PROPERTIES_TOO_LARGE,
                              f"the message has {len(user)} user properties; the limit is "
                              f"{MAX_USER_PROPERTIES}")
    size = 0
    for key, value in user.items():
        if key in SYSTEM_PROPERTIES:
            raise ConversionError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
                                  f"property is used by system: {key}")
        if not key or _has_control(key) or _has_control(value):
            raise ConversionError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
                                  f"property {key[:40]!r} has an empty name or a control "
                                  "character")
        size += len(key.encode()) + len(value.encode())
    props = dict(user)
    if sp.HasField("tag"):
        tag = sp.tag
        if tag and (not tag.strip() or "|" in tag or _has_control(tag)):
            raise ConversionError(pb.ILLEGAL_MESSAGE_TAG,
                                  f"tag {tag[:40]!r} is blank, holds '|' or a control "
                                  "character")
        if tag:
            props[Property.TAGS] = tag
            size += len(tag.encode())
    keys = list(sp.keys)
    for key in keys:
        if not key.strip() or _has_control(key) or " " in key:
            raise ConversionError(pb.ILLEGAL_MESSAGE_KEY,
                                  f"key {key[:40]!r} is blank, holds a space or a control "
                                  "character")
        size += len(key.encode())
    if keys:
        props[Property.KEYS] = " ".join(keys)
    if size > MAX_USER_PROPERTY_BYTES:
        raise ConversionError(pb.MESSAGE_PROPERTIES_TOO_LARGE,
                              f"the user properties, tag and keys are {size} bytes; the "
                              f"limit is {MAX_USER_PROPERTY_BYTES}")
    if not sp.message_id.strip():
        raise ConversionError(pb.ILLEGAL_MESSAGE_ID, "the message has no message_id")
    props[Property.UNIQ_KEY] = sp.message_id
    sysflag = 0
    kind = sp.message_type
    if kind == pb.TRANSACTION:
        props[Property.TRANSACTION_PREPARED] = "true"
        sysflag |= SysFlag.TRANSACTION_PREPARED
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = sp.orphaned_transaction_recovery_duration.seconds
            if not 0 <= seconds <= 3600:
                raise ConversionError(pb.BAD_REQUEST,
                                      "orphaned_transaction_recovery_duration must be within "
                                      f"0..3600 s, not {seconds}")
            props[Property.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
    if sp.HasField("delivery_timestamp"):
        due = sp.delivery_timestamp.ToMilliseconds()
        if due - now_ms > MAX_DELAY_MS:
            raise ConversionError(pb.ILLEGAL_DELIVERY_TIME,
                                  f"the delivery timestamp is {(due - now_ms) // 1000} s ahead; "
                                  f"the limit is {MAX_DELAY_MS // 1000} s")
        props[Property.TIMER_DELIVER_MS] = str(due)
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group.strip() or len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES \
                or _has_control(group):
            raise ConversionError(pb.ILLEGAL_MESSAGE_GROUP,
                                  f"message group {group[:40]!r} is blank, holds a control "
                                  f"character, or is {MAX_MESSAGE_GROUP_BYTES} bytes or more")
        props[Property.SHARDING_KEY] = group
    if sp.HasField("trace_context") and sp.trace_context:
        props["TRACE_CONTEXT"] = sp.trace_context
    if sp.born_host:
        props["__BORNHOST"] = sp.born_host
    born = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else now_ms
    return props, body, sysflag, born


def _inflate(body: bytes, limit: int, wbits: int) -> bytes:
    """``body`` decompressed, refused once it passes ``limit`` bytes (never more is made:
    a small compressed body may stand for gigabytes)."""
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ConversionError(pb.MESSAGE_CORRUPTED,
                              f"the body does not decompress: {exc}") from None
    if len(out) > limit:
        raise ConversionError(pb.MESSAGE_BODY_TOO_LARGE,
                              f"the body decompresses to more than {limit} bytes "
                              "(maxMessageSize)")
    return out


def timestamp(ms: int) -> Timestamp:
    ts = Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def duration(ms: int) -> Duration:
    d = Duration()
    d.FromMilliseconds(ms)
    return d


def to_message(record: MessageRecord, topic: str, namespace: str = "", *,
               receipt_handle: str | None = None, delivery_attempt: int | None = None,
               invisible_ms: int | None = None, max_inflated: int = 64 << 20) -> pb.Message:
    """A stored record as a v2 Message (GrpcConverter.buildMessage): ``topic`` is the one
    the consumer asked for (a retry's record is in the group's retry topic)."""
    props = record.properties
    body = record.body
    encoding = pb.IDENTITY
    if record.sysflag & SysFlag.COMPRESSED:
        # Stored zlib-compressed by a 4.x producer: handed over plain, which every v2
        # client reads (GZIP would need recompressing), up to the largest body a broker
        # takes.
        try:
            body = _inflate(body, max_inflated, zlib.MAX_WBITS)
        except ConversionError:
            encoding = pb.ENCODING_UNSPECIFIED
    sp = pb.SystemProperties(
        message_id=props.get(Property.UNIQ_KEY) or record.offset_msg_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=encoding,
        message_type=message_type_of(props),
        born_timestamp=timestamp(record.born_timestamp),
        born_host=props.get("__BORNHOST") or record.born_host[0],
        store_timestamp=timestamp(record.store_timestamp),
        store_host=f"{record.store_host[0]}:{record.store_host[1]}",
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        delivery_attempt=(delivery_attempt if delivery_attempt is not None
                          else record.reconsume_times + 1),
    )
    tag = props.get(Property.TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(Property.KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(" ") if k)
    due = props.get(Property.TIMER_DELIVER_MS) or props.get(Property.TIMER_OUT_MS)
    if due and due.isdigit():
        sp.delivery_timestamp.CopyFrom(timestamp(int(due)))
    group = props.get(Property.SHARDING_KEY)
    if group is not None:
        sp.message_group = group
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(duration(invisible_ms))
    trace = props.get("TRACE_CONTEXT")
    if trace:
        sp.trace_context = trace
    dlq_topic, dlq_id = props.get(Property.DLQ_ORIGIN_TOPIC), props.get(
        Property.DLQ_ORIGIN_MESSAGE_ID)
    if dlq_topic and dlq_id:
        sp.dead_letter_queue.CopyFrom(pb.DeadLetterQueue(topic=dlq_topic, message_id=dlq_id))
    return pb.Message(
        topic=pb.Resource(name=topic, resource_namespace=namespace),
        user_properties=user_properties(props.items()),
        system_properties=sp, body=body)


def user_properties(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {k: v for k, v in items if k not in SYSTEM_PROPERTIES}


__all__ = ["ACCEPTED_TYPES", "ConversionError", "SYSTEM_PROPERTIES", "TYPE_NAMES", "duration",
           "message_type_of", "timestamp", "to_message", "to_properties", "user_properties"]
