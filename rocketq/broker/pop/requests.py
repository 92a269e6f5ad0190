"""POP over remoting: POP_MESSAGE (200050), ACK_MESSAGE (200051),
CHANGE_MESSAGE_INVISIBLETIME (200053) and BATCH_ACK_MESSAGE (200151), with RocketMQ 5's
headers, served by the same POP service as the gRPC endpoint.

A popped message is sent as its record with the property ``POP_CK`` (RocketMQ's ExtraInfo:
``startOffset popTime invisibleTime reviveQid retryFlag brokerName queueId queueOffset``),
under the topic the consumer asked for; an ack carries that text back as ``extraInfo``. The
headers also carry RocketMQ's ``startOffsetInfo`` and ``msgOffsetInfo``, from which Java
clients build the same text, and ``orderCountInfo`` for FIFO pops.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson

from ...protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from ...protocol.filter import Subscription
from ...protocol.message import encode_record
from ...protocol.sql92 import SqlError
from ...remoting import Connection
from ..topics import TopicTable
from .service import (
    NORMAL_TOPIC,
    RETRY_TOPIC,
    PopError,
    PopService,
    ReceiptHandle,
    pop_retry_topic,
)

Handler = Callable[[Connection, RemotingCommand], Any]

#: The property a popped message's receipt handle travels in.
POP_CK = "POP_CK"
#: reviveQid of a FIFO pop (RocketMQ's POP_ORDER_REVIVE_QUEUE).
ORDER_REVIVE_QUEUE = 999
#: The longest long poll of a POP_MESSAGE, in ms.
MAX_POLL_MS = 60_000
#: The longest bit set a BATCH_ACK_MESSAGE entry may carry.
MAX_BITSET_BYTES = 1024

_CODES = {"handle": ResponseCode.NO_MESSAGE, "expired": ResponseCode.NO_MESSAGE,
          "argument": ResponseCode.INVALID_PARAMETER, "topic": ResponseCode.TOPIC_NOT_EXIST,
          "group": ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
          "permission": ResponseCode.NO_PERMISSION}


def origin_topic(group: str, topic: str) -> str:
    """The topic a consumer asked for, from the one an ack names (a retry's is the group's
    pop retry topic, ``%RETRY%<group>_<topic>``)."""
    prefix = pop_retry_topic(group, "")
    return topic[len(prefix):] if topic.startswith(prefix) else topic


class PopRequests:
    """The remoting face of :class:`PopService`."""

    def __init__(self, pop: PopService, topics: TopicTable) -> None:
        self.pop = pop
        self.topics = topics

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.POP_MESSAGE: self.pop_message,
                RequestCode.ACK_MESSAGE: self.ack_message,
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible_time,
                RequestCode.BATCH_ACK_MESSAGE: self.batch_ack}

    async def pop_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.field("consumerGroup") or ""
        topic = cmd.field("topic") or ""
        order = (cmd.field("order") or "false").lower() == "true"
        try:
            queue_id = cmd.int_field("queueId", -1)
            max_nums = cmd.int_field("maxMsgNums", 32)
            invisible = cmd.int_field("invisibleTime")
            poll = cmd.int_field("pollTime", 0)
        except Exception as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if max_nums > 32:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark=f"the max number is greater than 32: {max_nums}")
        try:
            sub = Subscription.parse(topic, cmd.field("exp") or "*",
                                     cmd.field("expType") or "TAG")
            result = await self.pop.pop(group, topic, max(queue_id, -1), max_nums, invisible,
                                        min(max(poll, 0), MAX_POLL_MS), sub,
                                        fifo=True if order else None)
        except PopError as exc:
            return cmd.response(_CODES.get(exc.kind, ResponseCode.SYSTEM_ERROR),
                                remark=str(exc))
        except SqlError as exc:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark=str(exc))
        except Exception as exc:  # the checkpoint could not be written (a full disk, ...)
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"the pop failed: {exc}")
        header: dict[str, Any] = {"popTime": result.pop_time,
                                  "invisibleTime": result.invisible_ms,
                                  "reviveQid": ORDER_REVIVE_QUEUE if order else 0,
                                  "restNum": result.rest}
        if not result.messages:
            return cmd.response(ResponseCode.POLLING_TIMEOUT, header, remark="no new message")
        starts: dict[str, int] = {}
        offsets: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        parts = []
        broker = self.pop.config.brokerName
        for popped in result.messages:
            record = popped.record
            flag = RETRY_TOPIC if popped.retry else NORMAL_TOPIC
            handle = ReceiptHandle.decode(popped.handle)
            key = f"{flag} {record.queue_id}"
            starts.setdefault(key, handle.start_offset)
            offsets.setdefault(key, []).append(record.queue_offset)
            extra = (f"{handle.start_offset} {handle.pop_time} {handle.invisible_ms} "
                     f"{ORDER_REVIVE_QUEUE if order else 0} {flag} {broker} "
                     f"{record.queue_id} {record.queue_offset}")
            record.properties = {**record.properties, POP_CK: extra}
            record.topic = popped.topic
            record.reconsume_times = popped.attempt - 1
            if order:
                counts[key] = popped.attempt - 1
            parts.append(encode_record(record))
        header["startOffsetInfo"] = ";".join(f"{k} {v}" for k, v in starts.items())
        header["msgOffsetInfo"] = ";".join(f"{k} {','.join(map(str, v))}"
                                           for k, v in offsets.items())
        if order:
            header["orderCountInfo"] = ";".join(f"{k} {v}" for k, v in counts.items())
        response = cmd.response(ResponseCode.SUCCESS, header, remark="FOUND")
        response.body = b"".join(parts)
        return response

    def _handle(self, cmd: RemotingCommand) -> tuple[str, str, str]:
        """``(group, topic asked for, receipt handle)`` of an ack or a change; the topic of
        the header may be the retry topic the message was read from."""
        group = cmd.field("consumerGroup") or ""
        topic = origin_topic(group, cmd.field("topic") or "")
        extra = cmd.field("extraInfo") or ""
        handle = ReceiptHandle.decode(extra)
        offset = cmd.field("offset")
        if offset not in (None, ""):
            handle.queue_offset = int(offset)
        return group, topic, handle.encode()

    async def ack_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            group, topic, handle = self._handle(cmd)
            if self.topics.get(topic) is None:
                raise PopError("topic", f"topic [{topic}] does not exist")
            await self.pop.ack(group, topic, handle)
        except PopError as exc:
            return cmd.response(_CODES.get(exc.kind, ResponseCode.SYSTEM_ERROR),
                                remark=str(exc))
        except ValueError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        except Exception as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"the ack failed: {exc}")
        return cmd.response()

    async def change_invisible_time(self, conn: Connection, cmd: RemotingCommand
                                    ) -> RemotingCommand:
        try:
            group, topic, handle = self._handle(cmd)
            if self.topics.get(topic) is None:
                raise PopError("topic", f"topic [{topic}] does not exist")
            new = ReceiptHandle.decode(await self.pop.change_invisible(
                group, topic, handle, cmd.int_field("invisibleTime")))
        except PopError as exc:
            return cmd.response(_CODES.get(exc.kind, ResponseCode.SYSTEM_ERROR),
                                remark=str(exc))
        except ValueError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        return cmd.response(ResponseCode.SUCCESS, {
            "popTime": new.pop_time, "invisibleTime": new.invisible_ms,
            "reviveQid": new.revive_queue})

    async def batch_ack(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """BATCH_ACK_MESSAGE: ``{"brokerName", "acks": [{"c" group, "t" topic, "r" retry
        flag, "so" start offset, "q" queue, "rq" revive queue, "pt" pop time, "it"
        invisible time, "b" Base64 of a Java BitSet of offsets from "so"}]}``."""
        try:
            data = orjson.loads(cmd.body or b"")
        except orjson.JSONDecodeError:
            try:
                data = fastjson.loads(cmd.body or b"")
            except ValueError as exc:
                return cmd.response(ResponseCode.INVALID_PARAMETER,
                                    remark=f"the batch ack body is not JSON: {exc}")
        acks = data.get("acks") if isinstance(data, dict) else None
        if not acks:
            return cmd.response(ResponseCode.NO_MESSAGE, remark="no ack in the request")
        broker = self.pop.config.brokerName
        failed = []
        for ack in acks:
            try:
                group, topic = str(ack["c"]), str(ack["t"])
                flag = str(ack.get("r", NORMAL_TOPIC))
                start, queue_id = int(ack["so"]), int(ack["q"])
                pop_time, invisible = int(ack["pt"]), int(ack["it"])
                bits = base64.b64decode(ack.get("b") or "")
            except (KeyError, TypeError, ValueError) as exc:
                return cmd.response(ResponseCode.INVALID_PARAMETER,
                                    remark=f"a batch ack entry is malformed: {exc}")
            if len(bits) > MAX_BITSET_BYTES:
                return cmd.response(ResponseCode.INVALID_PARAMETER,
                                    remark=f"a batch ack's bit set is {len(bits)} bytes; a "
                                           f"pop hands out offsets within "
                                           f"{MAX_BITSET_BYTES * 8} of its first")
            handles = [ReceiptHandle(start, pop_time, invisible, 0, flag, broker, queue_id,
                                     start + i, -1).encode()
                       for i in range(len(bits) * 8) if bits[i // 8] >> (i % 8) & 1]
            errors = await self.pop.ack_many(group, origin_topic(group, topic), handles)
            failed.extend(str(e) for e in errors if e is not None)
        if failed:
            return cmd.response(ResponseCode.NO_MESSAGE,
                                remark=f"{len(failed)} of the acks failed: {failed[0]}")
        return cmd.response()


__all__ = ["POP_CK", "PopRequests", "origin_topic"]
