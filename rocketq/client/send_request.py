"""What a send puts on the wire and reads back (RocketMQ's MQClientAPIImpl.sendMessage and
the checks of its Validators): a message validated, its body compressed when that helps, its
properties encoded once and checked against the limits, the SEND_MESSAGE_V2 (or batch, or
reply) request for a queue, and the SendResult of the broker's answer.

``SendRequests`` is a part of ``producer.AsyncProducer``.
"""

from __future__ import annotations

import time
import zlib

from ..protocol import (
    AUTO_CREATE_TOPIC_KEY,
    FLAG_ONEWAY,
    MAX_FRAME_SIZE,
    IllegalTopicError,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SysFlag,
    encode_properties,
    is_retry_topic,
    validate_topic,
)
from ..protocol.message import MAX_PROPERTIES_SIZE
from .checks import type_name
from .errors import ArgumentTypeError, BrokerError, MessageValidationError
from .instance import ClientInstance
from .message import Message, MessageQueue, SendResult, SendStatus
from .unique_ids import unique_ids

#: The answers that mean stored, and the SendStatus each reports.
_STATUS = {ResponseCode.SUCCESS: SendStatus.SEND_OK,
           ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
           ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
           ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE}
#: Room a send request's header needs besides the properties and the names it repeats (the
#: other send header fields and the command's own), when a request is checked against the
#: remoting frame limit before it is sent.
_HEADER_ROOM = 2048
#: The encoding of ``{UNIQ_KEY: id, WAIT: "true"}`` around the id (RocketMQ's name \x01
#: value \x02 per property).
_UNIQ_KEY_PREFIX = f"{Property.UNIQ_KEY}\x01"
_WAIT_TRUE = f"\x02{Property.WAIT}\x01true\x02"


class SendRequests:
    """Validation, encoding, the request and its answer: a part of
    :class:`producer.AsyncProducer`, whose settings (declared below) it reads."""

    group: str
    instance: ClientInstance
    compress_over: int
    compress_level: int
    max_message_size: int
    default_topic_queue_nums: int
    _valid_topics: set[str]

    def _validate(self, message: Message) -> None:
        if type(message) is not Message and not isinstance(message, Message):
            raise ArgumentTypeError(
                f"message: a send takes a Message, not {type_name(message)}; e.g. "
                "producer.send(Message(topic, b'body'))")
        if message.topic not in self._valid_topics:
            try:
                validate_topic(message.topic)
            except IllegalTopicError as exc:
                raise MessageValidationError(str(exc)) from None
            if message.topic == AUTO_CREATE_TOPIC_KEY:
                raise MessageValidationError(
                    f"the topic {message.topic} is reserved by the system")
            # Only topics a message may be sent to: _prepare skips validation for these.
            if len(self._valid_topics) < 10_000:
                self._valid_topics.add(message.topic)
        if not message.body:
            raise MessageValidationError("the message body is empty")
        if len(message.body) > self.max_message_size:
            raise MessageValidationError(
                f"the message body is {len(message.body)} bytes; the maximum is "
                f"{self.max_message_size}")

    def _prepare(self, message: Message) -> tuple[bytes, int, str]:
        """Body as sent, sysFlag, property string; sets UNIQ_KEY and WAIT."""
        # What _validate checks, in one test for the common case (a Message to a topic
        # already checked, its body within the limit): a pipelined send pays for every call.
        if type(message) is not Message or message.topic not in self._valid_topics \
                or not message.body or len(message.body) > self.max_message_size:
            self._validate(message)
        props = message.properties
        body = message.body
        if props:
            if Property.UNIQ_KEY not in props:
                props[Property.UNIQ_KEY] = unique_ids.next()
            props.setdefault(Property.WAIT, "true")
            encoded = encode_properties(props)
            # Bytes on the wire; an ASCII string (nearly all) is as long as its encoding.
            props_size = len(encoded) if encoded.isascii() else len(encoded.encode())
            if props_size > MAX_PROPERTIES_SIZE:
                raise MessageValidationError(
                    f"the message properties are over {MAX_PROPERTIES_SIZE} bytes")
        else:
            # A message without properties of its own gets these two, whose encoding is
            # known (encode_properties would give the same string).
            unique_id = unique_ids.next()
            props[Property.UNIQ_KEY] = unique_id
            props[Property.WAIT] = "true"
            encoded = f"{_UNIQ_KEY_PREFIX}{unique_id}{_WAIT_TRUE}"
            props_size = len(encoded)
        sysflag = 0
        if len(body) >= self.compress_over:
            # Kept only when smaller: a body that does not compress (random or already
            # compressed data) would grow, and could then pass the size check here and be
            # refused by the broker, which checks the body as sent.
            compressed = zlib.compress(body, self.compress_level)
            if len(compressed) < len(body):
                body = compressed
                sysflag |= SysFlag.COMPRESSED
        if len(body) + props_size + len(self.group) + 2 * len(message.topic) + _HEADER_ROOM \
                > MAX_FRAME_SIZE:
            self._check_frame(message.topic, len(body), props_size, "the message body")
        return body, sysflag, encoded

    def _check_frame(self, topic: str, body_size: int, props_size: int, what: str) -> None:
        """Refuse a request over the remoting protocol's frame limit before it is sent: the
        broker would close the connection on reading its length, and every retry would end
        the same way."""
        if body_size + props_size + len(self.group) + 2 * len(topic) + _HEADER_ROOM \
                > MAX_FRAME_SIZE:
            raise MessageValidationError(
                f"{what} is {body_size} bytes as sent; with its header that is over the "
                f"{MAX_FRAME_SIZE}-byte ({MAX_FRAME_SIZE >> 20} MiB) frame limit of the "
                "remoting protocol, which brokers refuse")

    def _request(self, mq: MessageQueue, message: Message, body: bytes, sysflag: int,
                 props: str, oneway: bool, batch: bool) -> RemotingCommand:
        """The send request for ``mq``: SEND_MESSAGE_V2's short field names, every value a
        string, as on the wire."""
        ext = {"a": self.group, "b": mq.topic, "c": AUTO_CREATE_TOPIC_KEY,
               "d": str(self.default_topic_queue_nums), "e": str(mq.queue_id), "f": str(sysflag),
               "g": str(int(time.time() * 1000)), "h": str(message.flag), "i": props,
               "j": "0", "k": "false", "m": "true" if batch else "false",
               "n": mq.broker_name}
        if is_retry_topic(mq.topic):
            # A consumer's hand-back: the retry counters travel in the header.
            ext["j"] = message.properties.get(Property.RECONSUME_TIME, "0")
            max_times = message.properties.get(Property.MAX_RECONSUME_TIMES)
            if max_times is not None:
                ext["l"] = max_times
        if batch:
            code = RequestCode.SEND_BATCH_MESSAGE
        elif message.properties.get(Property.MSG_TYPE) == "reply":
            code = RequestCode.SEND_REPLY_MESSAGE_V2
        else:
            code = RequestCode.SEND_MESSAGE_V2
        return RemotingCommand.request_text(code, ext, body,
                                            flag=FLAG_ONEWAY if oneway else 0)

    @staticmethod
    def _result(response: RemotingCommand, mq: MessageQueue, message: Message) -> SendResult:
        """The SendResult a broker's answer describes; BrokerError for a refusal."""
        status = _STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError(response.code, f"send to {mq} refused: {response.remark}")
        ext_out = response.ext_fields
        queue_id = ext_out.get("queueId")
        queue = mq if queue_id is None or queue_id == str(mq.queue_id) else \
            MessageQueue(mq.topic, mq.broker_name, int(queue_id))
        return SendResult(status, message.properties.get(Property.UNIQ_KEY, ""),
                          ext_out.get("msgId", ""), queue, int(ext_out.get("queueOffset", -1)),
                          ext_out.get("transactionId") or None)

    async def _send_to(self, mq: MessageQueue, message: Message, body: bytes, sysflag: int,
                       props: str, timeout: float, oneway: bool, batch: bool
                       ) -> SendResult | None:
        cmd = self._request(mq, message, body, sysflag, props, oneway, batch)
        instance = self.instance
        addr = instance.broker_addr(mq.broker_name) or \
            await instance.broker_addr_or_refresh(mq.broker_name, mq.topic)
        remoting = instance.remoting
        if oneway:
            await remoting.invoke_oneway(addr, cmd)
            return None
        return self._result(await remoting.invoke(addr, cmd, timeout), mq, message)


__all__ = ["SendRequests"]
