"""Admin requests a broker carries out with a consumer group's members (RocketMQ's
AdminBrokerProcessor.resetOffset, getConsumerRunningInfo, consumeMessageDirectly, and
Broker2Client).

INVOKE_BROKER_TO_RESET_OFFSET (222, mqadmin ``resetOffsetByTime``) moves a group's offsets in a
topic to the first message stored at or after a time (``timestamp`` -1: to the end of each
queue). Each queue's new offset is worked out as Broker2Client.resetOffset does: the offset by
time, taken when ``isForce`` is true or when it is smaller than the group's committed offset.
RocketMQ 4.9 only tells the group's online members (RESET_CONSUMER_CLIENT_OFFSET, 220) and
answers CONSUMER_NOT_ONLINE when there are none, which makes mqadmin commit the offsets itself
through its older method. rocketq also commits the new offsets in its own offset table and
persists them before it tells the members, so an offline group is reset as well, and the
answer is SUCCESS with the new offsets either way.

What rocketq answers where RocketMQ's rules leave room:

- a topic this broker does not have: SYSTEM_ERROR, RocketMQ's remark;
- a group with no committed offset in the topic and no member online: SYSTEM_ERROR, RocketMQ's
  "consumer group not exist" remark; a mistyped group name is then refused instead of
  quietly creating offsets for a group nobody runs;
- a queue the group has no offset for yet (RocketMQ refuses the whole request): it takes the
  new offset, since there is nothing to compare it with;
- a header field missing or malformed (``timestamp`` not an int64, ``isForce`` not a
  boolean): INVALID_PARAMETER naming the field.

GET_CONSUMER_RUNNING_INFO (307, mqadmin ``consumerProgress -s``, ``consumerStatus``) and
CONSUME_MESSAGE_DIRECTLY (309, mqadmin ``consumeMessage``) are forwarded to the member named by
``clientId`` with the same extFields; a 309 carries the message, read from the store by its
offset message id, and the broker's name. The member's answer (code, remark, body) is the
answer. A member that does not answer within ``call_timeout`` gets CONSUME_MSG_TIMEOUT, as
Broker2Client.callClient's time-out does; the broker serves other requests meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from ...protocol import (
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    MessageFormatError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    fastjson,
)
from ...protocol.message import decode_offset_msg_id
from ...remoting import Connection, RemotingError, RemotingTimeoutError
from ..clients import ClientChannel, ClientTable
from ..offsets.table import ConsumerOffsets
from ..topics import TopicTable

if TYPE_CHECKING:
    from ...store import MessageStore

log = logging.getLogger("rocketq.broker")

Handler = Callable[[Connection, RemotingCommand], Any]

#: How long the broker waits for a consumer's answer (Broker2Client.callClient: 10 s).
CALL_TIMEOUT = 10.0

_INT64 = re.compile(r"-?[0-9]{1,19}")
_BOOLEANS = {"true": True, "false": False, "1": True, "0": False}


class BadField(ValueError):
    """A request header field that is missing or malformed; the message names it."""


def int64_field(cmd: RemotingCommand, name: str) -> int:
    """A required extField holding a Java long, written in plain decimal digits."""
    value = cmd.field(name)
    if value is None or value == "":
        raise BadField(f"the request lacks the field {name!r}")
    if not _INT64.fullmatch(value) or not JAVA_LONG_MIN <= int(value) <= JAVA_LONG_MAX:
        raise BadField(f"field {name!r} is not a 64-bit integer: {value[:40]!r}")
    return int(value)


def bool_field(cmd: RemotingCommand, name: str) -> bool:
    """A required extField holding a boolean: ``true``/``false`` (any case), or ``1``/``0``."""
    value = cmd.field(name)
    if value is None or value == "":
        raise BadField(f"the request lacks the field {name!r}")
    parsed = _BOOLEANS.get(value.strip().lower())
    if parsed is None:
        raise BadField(f"field {name!r} is not a boolean (true or false): {value[:40]!r}")
    return parsed


def text_field(cmd: RemotingCommand, name: str) -> str:
    value = cmd.field(name)
    if not value:
        raise BadField(f"the request lacks the field {name!r}")
    return value


def reset_offset_body(broker_name: str, topic: str, offsets: dict[int, int]) -> bytes:
    """ResetOffsetBody as Java's fastjson writes it: ``{"offsetTable":{<MessageQueue>:offset}}``
    with MessageQueue objects as keys."""
    return fastjson.dumps({"offsetTable": fastjson.ObjectKeyMap([
        ({"brokerName": broker_name, "queueId": qid, "topic": topic}, offset)
        for qid, offset in sorted(offsets.items())])})


def reset_offset_body_for_c(broker_name: str, topic: str, offsets: dict[int, int]) -> bytes:
    """ResetOffsetBodyForC: the same table as a list of MessageQueueForC, the form the C++
    client's ResetOffsetBody::Decode reads (``offsetTable[i].offset``)."""
    return orjson.dumps({"offsetTable": [
        {"brokerName": broker_name, "offset": offset, "queueId": qid, "topic": topic}
        for qid, offset in sorted(offsets.items())]})


class ConsumerCalls:
    """Serves 222, 307 and 309 with the broker's topics, offsets, client table and store."""

    def __init__(self, topics: TopicTable, offsets: ConsumerOffsets,
                 clients: ClientTable, broker_name: str,
                 store: Callable[[], MessageStore], call_timeout: float = CALL_TIMEOUT) -> None:
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.broker_name = broker_name
        self._store = store  # the store exists once the broker has started
        self.call_timeout = call_timeout

    def handlers(self) -> dict[int, Handler]:
        """The request handlers to add to the broker's table."""
        return {RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
                RequestCode.GET_CONSUMER_RUNNING_INFO: self.consumer_running_info,
                RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly}

    # ------------------------------------------------------------------ members
    def members(self, group: str) -> list[ClientChannel]:
        """The group's members whose connection is open."""
        info = self.clients.consumers.get(group)
        if info is None:
            return []
        return [ch for ch in info.channels.values() if ch.connection.is_open]

    def member(self, group: str, client_id: str) -> ClientChannel | None:
        """A member by client id (ConsumerManager.findChannel), if online."""
        info = self.clients.consumers.get(group)
        channel = info.channels.get(client_id) if info is not None else None
        return channel if channel is not None and channel.connection.is_open else None

    # ------------------------------------------------------------------ reset offset
    def new_offsets(self, group: str, topic: str, timestamp: int, force: bool
                    ) -> dict[int, int]:
        """Each readable queue's offset after a reset to ``timestamp`` (-1: the end)."""
        store = self._store()
        config = self.topics.get(topic)
        assert config is not None
        committed = self.offsets.table(group, topic)
        table = {}
        for qid in range(config.read_queue_nums):
            if timestamp == -1:
                offset = store.get_max_offset(topic, qid)
            else:
                offset = store.get_offset_by_time(topic, qid, timestamp)
            offset = max(offset, 0)
            current = committed.get(qid)
            table[qid] = offset if force or current is None or offset < current else current
        return table

    async def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: commit the new offsets, tell the members (220)."""
        try:
            topic = text_field(cmd, "topic")
            group = text_field(cmd, "group")
            timestamp = int64_field(cmd, "timestamp")
            force = bool_field(cmd, "isForce")
        except BadField as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        log.info("reset offset of group %s in %s to %d (force %s) asked by %s:%d", group, topic,
                 timestamp, force, *conn.peer)
        if self.topics.get(topic) is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark="[reset-offset] reset offset failed, no topic in this "
                                       f"broker. topic={topic}")
        members = self.members(group)
        if not members and not self.offsets.table(group, topic):
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"The consumer group <{group}> not exist: it has no "
                                       f"offset in topic {topic} and no consumer online")
        table = self.new_offsets(group, topic, timestamp, force)
        for qid, offset in table.items():
            self.offsets.commit(group, topic, qid, offset)
        # On disk before anyone is told: a broker restart keeps the reset.
        await asyncio.to_thread(self.offsets.persist)
        self.push_reset(members, group, topic, timestamp, force, table)
        return cmd.response(ResponseCode.SUCCESS,
                            body=reset_offset_body(self.broker_name, topic, table))

    def push_reset(self, members: list[ClientChannel], group: str, topic: str, timestamp: int,
                   force: bool, table: dict[int, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET, oneway, to each member: the list form to C++ clients,
        fastjson's object-keyed map to the others."""
        header = {"topic": topic, "group": group, "timestamp": timestamp, "isForce": force}
        bodies: dict[bool, bytes] = {}
        for channel in members:
            cpp = channel.language == "CPP"
            if cpp not in bodies:
                bodies[cpp] = (reset_offset_body_for_c if cpp else reset_offset_body)(
                    self.broker_name, topic, table)
            channel.connection.oneway(RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header, bodies[cpp], oneway=True))
            log.info("told consumer %s of group %s to reset its offsets in %s",
                     channel.client_id, group, topic)

    # ------------------------------------------------------------------ calls to one member
    async def consumer_running_info(self, conn: Connection, cmd: RemotingCommand
                                    ) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO: the member's ConsumerRunningInfo, as it answers."""
        return await self._call(cmd, cmd.body)

    async def consume_message_directly(self, conn: Connection, cmd: RemotingCommand
                                       ) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY: the member consumes the message ``msgId`` (an offset
        message id of this broker) and answers a ConsumeMessageDirectlyResult."""
        msg_id = cmd.field("msgId") or ""
        try:
            _host, _port, offset = decode_offset_msg_id(msg_id)
        except MessageFormatError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark=f"field 'msgId' is not an offset message id: {exc}")
        record = self._store().record_bytes(offset)
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"can not find message by the msgId {msg_id}")
        cmd.ext_fields["brokerName"] = self.broker_name
        return await self._call(cmd, record)

    async def _call(self, cmd: RemotingCommand, body: bytes) -> RemotingCommand:
        """Forward ``cmd`` (extFields as they are, ``body``) to the member it names."""
        try:
            group = text_field(cmd, "consumerGroup")
        except BadField as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        client_id = cmd.field("clientId") or ""
        channel = self.member(group, client_id)
        if channel is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"The Consumer <{group}> <{client_id}> not online")
        request = RemotingCommand.request(cmd.code, cmd.ext_fields, body)
        try:
            answer = await channel.connection.request(request, self.call_timeout)
        except RemotingTimeoutError as exc:
            return cmd.response(ResponseCode.CONSUME_MSG_TIMEOUT,
                                remark=f"consumer <{group}> <{client_id}> Timeout: {exc}")
        except (RemotingError, OSError) as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"invoke consumer <{group}> <{client_id}> Exception: "
                                       f"{exc}")
        return cmd.response(answer.code, answer.ext_fields, answer.body, answer.remark)
