"""Requests brokers make of consumers (RocketMQ's ClientRemotingProcessor):

- RESET_CONSUMER_CLIENT_OFFSET (220, oneway, after an admin's reset of the group's offsets):
  the consumer moves its queues of the topic to the offsets in the body;
- GET_CONSUMER_RUNNING_INFO (307): the consumer's ConsumerRunningInfo;
- CONSUME_MESSAGE_DIRECTLY (309): the push consumer's listener consumes the message in the body.

Each names its consumer group; a ClientInstance may carry several consumers, so the calls go
to the one registered for the group in ``instance.consumers``.
"""

from __future__ import annotations

import logging
from typing import Any

from ..protocol import (
    MessageFormatError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_record,
    fastjson,
)
from ..remoting import Connection
from .instance import ClientInstance
from .message import MessageQueue, ReceivedMessage
from .running_info import consume_message_directly, consumer_running_info

log = logging.getLogger("rocketq.client")


def parse_reset_offset_body(body: bytes) -> dict[MessageQueue, int]:
    """The offsets of a RESET_CONSUMER_CLIENT_OFFSET body: ResetOffsetBody
    (``{"offsetTable":{<MessageQueue>:offset}}``, fastjson's object-keyed map) or
    ResetOffsetBodyForC (``{"offsetTable":[{"topic":..,"offset":..}]}``)."""
    table = fastjson.loads(body).get("offsetTable") if body else None
    if isinstance(table, fastjson.ObjectKeyMap):
        pairs = [(k, v) for k, v in table.items]
    elif isinstance(table, list):
        pairs = [(entry, entry.get("offset")) for entry in table]
    elif table in (None, {}):
        pairs = []
    else:
        raise ValueError("offsetTable is neither a map keyed by MessageQueue nor a list")
    return {MessageQueue(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])):
            int(offset) for mq, offset in pairs}


class ConsumerCalls:
    """The handlers of one ClientInstance's consumer calls."""

    def __init__(self, instance: ClientInstance) -> None:
        self.instance = instance

    def register(self) -> None:
        on_request = self.instance.on_request
        on_request[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = self.reset_offset
        on_request[RequestCode.GET_CONSUMER_RUNNING_INFO] = self.running_info
        on_request[RequestCode.CONSUME_MESSAGE_DIRECTLY] = self.consume_directly

    def _consumer(self, group: str | None) -> Any:
        return self.instance.consumers.get(group or "")

    async def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: answered with nothing, as it comes oneway."""
        topic, group = cmd.field("topic") or "", cmd.field("group")
        consumer = self._consumer(group)
        if consumer is None:
            log.info("reset offset of group %s: no such consumer here", group)
            return None
        try:
            offsets = parse_reset_offset_body(cmd.body)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("reset offset of group %s in %s: unreadable body: %s", group, topic, exc)
            return None
        log.info("group %s resets its offsets in %s from %s:%d", group, topic, *conn.peer)
        await consumer.reset_offsets(topic, {mq: o for mq, o in offsets.items()
                                             if mq.topic == topic})
        return None

    def running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO: the ConsumerRunningInfo of the group's consumer."""
        group = cmd.field("consumerGroup")
        consumer = self._consumer(group)
        if consumer is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"The Consumer Group <{group}> not exist in this consumer")
        return cmd.response(ResponseCode.SUCCESS, body=consumer_running_info(
            consumer, cmd.bool_field("jstackEnable")))

    async def consume_directly(self, conn: Connection, cmd: RemotingCommand
                               ) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY: the listener's verdict on the message in the body."""
        group = cmd.field("consumerGroup")
        consumer = self._consumer(group)
        if consumer is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"The Consumer Group <{group}> not exist in this consumer")
        if getattr(consumer, "listener", None) is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"The Consumer Group <{group}> is a pull consumer here: "
                                       "it has no listener to consume a message with")
        try:
            record = decode_record(cmd.body)
        except MessageFormatError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"the body is not a message record: {exc}")
        message = ReceivedMessage.from_record(record, cmd.field("brokerName") or "")
        return cmd.response(ResponseCode.SUCCESS,
                            body=await consume_message_directly(consumer, message))


def serve_consumer_calls(instance: ClientInstance, consumer: Any) -> None:
    """Route the instance's consumer calls for ``consumer.group`` to ``consumer``."""
    instance.consumers[consumer.group] = consumer
    ConsumerCalls(instance).register()


def stop_consumer_calls(instance: ClientInstance, consumer: Any) -> None:
    """Stop routing calls to ``consumer`` (it leaves its group)."""
    if instance.consumers.get(consumer.group) is consumer:
        del instance.consumers[consumer.group]
