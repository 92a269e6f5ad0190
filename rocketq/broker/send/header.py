"""The send request's header: its field names (SEND_MESSAGE's long ones, SEND_MESSAGE_V2's
one-letter ones), its integers checked against the Java types the record stores them as,
and the sender's address as a record holds it."""

from __future__ import annotations

from typing import NamedTuple

from ...protocol import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    RequestCode,
    ResponseCode,
    SysFlag,
)
from ...protocol.message import host_to_bytes
from ..put_outcomes import SendRefused

V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
            RequestCode.SEND_REPLY_MESSAGE_V2)


class HeaderKeys(NamedTuple):
    """The extFields key of each field of a send header."""

    topic: str
    default_topic: str
    default_queue_nums: str
    queue_id: str
    sysflag: str
    born: str
    flag: str
    properties: str
    reconsume: str
    batch: str
    max_reconsume: str


V2_KEYS = HeaderKeys("b", "c", "d", "e", "f", "g", "h", "i", "j", "m", "l")
LONG_KEYS = HeaderKeys("topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                       "bornTimestamp", "flag", "properties", "reconsumeTimes", "batch",
                       "maxReconsumeTimes")

#: The integer fields of a send header: attribute of HeaderKeys, Java type, bounds.
_INT, _LONG = (JAVA_INT_MIN, JAVA_INT_MAX), (JAVA_LONG_MIN, JAVA_LONG_MAX)
_INT_FIELDS = (("queue_id", "int", *_INT), ("sysflag", "int", *_INT),
               ("born", "long", *_LONG), ("flag", "int", *_INT), ("reconsume", "int", *_INT))
#: The host flags are the broker's to set, from the socket, as RocketMQ's are: a client's
#: IPv6 bits on the IPv4 hosts stored here would make the record unreadable.
_NOT_HOST_FLAGS = ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)


def header_integers(ext: dict[str, str], names: HeaderKeys) -> tuple[int, int, int, int, int]:
    """The header's ``(queue id, sysflag, born timestamp, flag, reconsume times)``, the
    sysflag without host flags. Raises SendRefused for one that does not parse or does not
    fit its Java type: the record stores them as Java ints and a long, refused here, never
    by the store."""
    get = ext.get
    try:
        queue_id = int(get(names.queue_id) or 0)
        sysflag = int(get(names.sysflag) or 0)
        born = int(get(names.born) or 0)
        flag = int(get(names.flag) or 0)
        reconsume = int(get(names.reconsume) or 0)
    except ValueError:
        raise SendRefused(ResponseCode.INVALID_PARAMETER, bad_header(ext, names)) from None
    if (min(queue_id, sysflag, flag, reconsume) < JAVA_INT_MIN
            or max(queue_id, sysflag, flag, reconsume) > JAVA_INT_MAX
            or not JAVA_LONG_MIN <= born <= JAVA_LONG_MAX):
        raise SendRefused(ResponseCode.INVALID_PARAMETER, bad_header(ext, names))
    return queue_id, sysflag & _NOT_HOST_FLAGS, born, flag, reconsume


def bad_header(header: dict[str, str], names: HeaderKeys) -> str:
    """The remark for a send header whose integers do not parse or do not fit the Java type
    of their field, naming the field (by its long name, and its short V2 key)."""
    for attr, java_type, low, high in _INT_FIELDS:
        key = getattr(names, attr)
        label = getattr(LONG_KEYS, attr)
        label = label if key == label else f"{label} ({key})"
        value = header.get(key) or "0"
        try:
            number = int(value)
        except ValueError:
            return f"the header field {label} is not an integer: {value[:40]!r}"
        if not low <= number <= high:
            return (f"the header field {label} is out of range for a Java {java_type}: "
                    f"{value[:40]}")
    return "bad send header"


def peer_ip(host: str) -> bytes:
    """The sender's IPv4 address as a record's born host holds it."""
    try:
        return host_to_bytes(host)
    except ValueError:  # an IPv6 peer: v1 records carry IPv4 hosts only
        return b"\x7f\x00\x00\x01"
