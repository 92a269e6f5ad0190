"""Receipt handles, what acks a popped message: RocketMQ's ``POP_CK`` text (its ExtraInfo,
``startOffset popTime invisibleTime reviveQid retryFlag brokerName queueId queueOffset``),
read back into its fields for an ack or a change of invisible time, and built from a POP
answer's header for a message that came without one. The simple consumer's requests are in
``simple``; this is the handle's format alone."""

from __future__ import annotations

import contextlib

from ..protocol import is_retry_topic
from .message import ReceivedMessage

#: The property a popped message's receipt handle travels in.
POP_CK = "POP_CK"


class ReceiptHandle:
    """The fields of a receipt handle (RocketMQ's ExtraInfo): ``startOffset popTime
    invisibleTime reviveQid retryFlag brokerName queueId queueOffset``."""

    def __init__(self, text: str) -> None:
        parts = text.split(" ")
        if len(parts) < 8:
            raise ValueError(text)
        self.retry = parts[4]
        self.broker = parts[5]
        self.queue_id = int(parts[6])
        self.queue_offset = int(parts[7])

    def real_topic(self, topic: str, group: str) -> str:
        """The topic the message was read from: ``topic``, or the group's pop retry topic
        (ExtraInfoUtil.getRealTopic)."""
        if self.retry == "1":
            return f"%RETRY%{group}_{topic}"
        if self.retry == "2":
            return f"%RETRY%{group}+{topic}"
        return topic


def offset_info(text: str | None) -> dict[str, int]:
    """``startOffsetInfo`` of a POP answer: ``"retryFlag queueId startOffset"`` entries
    joined by ``;``, keyed by ``"retryFlag queueId"``."""
    out: dict[str, int] = {}
    for entry in (text or "").split(";"):
        parts = entry.split(" ")
        if len(parts) == 3:
            with contextlib.suppress(ValueError):
                out[f"{parts[0]} {parts[1]}"] = int(parts[2])
    return out


def derived_handle(message: ReceivedMessage, header: dict[str, str], starts: dict[str, int],
                    broker: str) -> str:
    """The receipt handle of a message that came without ``POP_CK`` (Apache RocketMQ's
    brokers leave it to the client for messages of the topic itself), from the answer's
    header, as RocketMQ's MQClientAPIImpl.processPopResponse builds it."""
    flag = "0"
    if is_retry_topic(message.topic):
        flag = "2" if "+" in message.topic else "1"
    start = starts.get(f"{flag} {message.queue_id}", message.queue_offset)
    return (f"{start} {header.get('popTime', '0')} {header.get('invisibleTime', '0')} "
            f"{header.get('reviveQid', '0')} {flag} {broker} {message.queue_id} "
            f"{message.queue_offset}")
