"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

The request's header becomes a StoreMessage (the body is stored as sent, compressed or not);
the store answers where it landed; the response carries RocketMQ's fields, all as strings.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple

from ..protocol import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    RETRY_GROUP_TOPIC_PREFIX,
    IllegalTopicError,
    Perm,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SysFlag,
    decode_properties,
    encode_properties,
    validate_topic,
)
from ..protocol.command import int_value
from ..protocol.message import MAX_PROPERTIES_SIZE, host_to_bytes, join_properties, property_value
from ..remoting import Connection
from ..store import (
    BatchMessage,
    DiskFullError,
    MessageIllegalError,
    PutResult,
    PutStatus,
    StoreMessage,
)
from ..store.errors import (
    InSyncReplicasNotEnoughError,
    SlaveNotWritableError,
    StoreClosedError,
)
from ..store.messages import batch_totals
from .clients import ClientTable
from .config import BrokerConfig
from .schedule.delay import delay_level_of, is_delayable, to_schedule
from .schedule.timer import TimerError, due_time, to_timer
from .send_back import dead_letter_topic
from .stats import Stats
from .subscription_groups import SubscriptionGroupTable
from .topics import TopicTable
from .transactions.half_messages import to_half

if TYPE_CHECKING:
    from ..store import MessageStore, MessageStoreConfig

log = logging.getLogger("rocketq.broker")

V2_CODES = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
            RequestCode.SEND_REPLY_MESSAGE_V2)
_REPLY_CODES = (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)


class _HeaderKeys(NamedTuple):
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


_V2_KEYS = _HeaderKeys("b", "c", "d", "e", "f", "g", "h", "i", "j", "m", "l")
_LONG_KEYS = _HeaderKeys("topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                         "bornTimestamp", "flag", "properties", "reconsumeTimes", "batch",
                         "maxReconsumeTimes")


#: The integer fields of a send header: attribute of _HeaderKeys, Java type, bounds.
_INT, _LONG = (JAVA_INT_MIN, JAVA_INT_MAX), (JAVA_LONG_MIN, JAVA_LONG_MAX)
_INT_FIELDS = (("queue_id", "int", *_INT), ("sysflag", "int", *_INT),
               ("born", "long", *_LONG), ("flag", "int", *_INT), ("reconsume", "int", *_INT))


def _bad_header(header: dict[str, str], names: _HeaderKeys) -> str:
    """The remark for a send header whose integers do not parse or do not fit the Java type
    of their field, naming the field (by its long name, and its short V2 key)."""
    for attr, java_type, low, high in _INT_FIELDS:
        key = getattr(names, attr)
        label = getattr(_LONG_KEYS, attr)
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


#: What a send is answered (all but SUCCESS still mean "stored on the master").
_STATUS_CODES = {PutStatus.PUT_OK: ResponseCode.SUCCESS,
                 PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
                 PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
                 PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT}

#: Looked up once: an enum's members cost a class attribute look-up each time.
_PUT_OK, _SUCCESS = PutStatus.PUT_OK, ResponseCode.SUCCESS
_SEND_BATCH = RequestCode.SEND_BATCH_MESSAGE

_TIMER_PROPERTIES = (Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_SEC,
                     Property.TIMER_DELAY_MS)

#: A single send waiting to be appended with the others of its loop iteration.
_Queued = tuple[Connection, RemotingCommand, StoreMessage, int]


class SendRefused(Exception):
    """A message the broker will not store: ``code`` is the response code to answer with."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


class SendProcessor:
    """Handles the send requests of one broker: checks them against the broker's config,
    topics and subscription groups, stores them, counts them in its stats; replies are
    pushed to the requester found in the client table."""

    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig,
                 store: Callable[[], MessageStore],
                 put: Callable[..., Awaitable[list[PutResult]]], topics: TopicTable,
                 subscription_groups: SubscriptionGroupTable, clients: ClientTable,
                 stats: Stats, topics_changed: Callable[[], None]) -> None:
        self.config = config
        self.store_config = store_config
        self._store = store  # the store exists once the broker has started
        #: How the broker's loop writes to the store when the sender waits for the flush.
        self.put = put
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.clients = clients
        self.stats = stats
        self.topics_changed = topics_changed
        #: Added to every stored message's properties, encoded.
        self.cluster_property = f"CLUSTER\x01{config.brokerClusterName}\x02".encode()
        self.region = config.regionId
        self.trace_on = "true" if config.traceOn else "false"
        self._queued: list[_Queued] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: Messages of put_one waiting for the end of this turn of the loop.
        self._one_by_one: list[tuple[StoreMessage, asyncio.Future[PutResult]]] = []
        #: When a refusal for a full disk was last logged: once per 10 s is enough, the
        #: store logs when it becomes full and when it takes sends again.
        self._disk_full_logged = -10.0

    @property
    def store(self) -> MessageStore:
        return self._store()

    @property
    def queued(self) -> int:
        """Sends read and waiting to be appended at the end of the loop iteration."""
        return len(self._queued)

    def handle(self, conn: Connection, cmd: RemotingCommand):
        """Answer at once when the store need not wait for a flush, else return a coroutine;
        or return None for a single send that more of the same read follow: it is appended
        with them at the end of the loop iteration and answered then (_append_queued)."""
        config = self.config
        ext = cmd.ext_fields
        get = ext.get
        code = cmd.code
        names = _V2_KEYS if code in V2_CODES else _LONG_KEYS
        topic = get(names.topic) or ""
        if not config.brokerPermission & Perm.WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                remark=f"the broker[{config.brokerName}] sending message "
                                       "is forbidden")
        try:
            queue_id = int(get(names.queue_id) or 0)
            sysflag = int(get(names.sysflag) or 0)
            born = int(get(names.born) or 0)
            flag = int(get(names.flag) or 0)
            reconsume = int(get(names.reconsume) or 0)
        except ValueError:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=_bad_header(ext, names))
        # The record stores them as Java ints and a long: refused here, never by the store.
        if (min(queue_id, sysflag, flag, reconsume) < JAVA_INT_MIN
                or max(queue_id, sysflag, flag, reconsume) > JAVA_INT_MAX
                or not JAVA_LONG_MIN <= born <= JAVA_LONG_MAX):
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=_bad_header(ext, names))
        # The host flags are the broker's to set, from the socket, as RocketMQ's are: a
        # client's IPv6 bits on the IPv4 hosts stored here would make the record unreadable.
        sysflag &= ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
        topic_config = self.topics.topics.get(topic)  # a known topic's name is valid
        if topic_config is None:
            try:
                validate_topic(topic)
            except IllegalTopicError as exc:
                return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
            topic_config = self.topics.create_in_send(
                topic, get(names.default_topic) or "TBW102",
                int_value(ext, names.default_queue_nums, 4))
            if topic_config is None:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                    remark=f"topic[{topic}] not exist, apply first please!")
            self.topics_changed()
        if not topic_config.perm & Perm.WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                remark=f"the topic[{topic}] sending message is forbidden")
        if queue_id < 0:
            queue_id = random.randrange(topic_config.write_queue_nums)
        elif queue_id >= topic_config.write_queue_nums:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark=f"request queueId[{queue_id}] is illegal, topic "
                                       f"{topic} has {topic_config.write_queue_nums} write "
                                       "queues")
        props = get(names.properties) or ""
        attrs = conn.attributes
        born_host = attrs.get("peer_ip")
        if born_host is None:
            born_host = attrs["peer_ip"] = _peer_ip(conn.peer[0])
        born_port = conn.peer[1]
        batch = code == _SEND_BATCH or (get(names.batch) or "").lower() in ("true", "1")
        message: StoreMessage | BatchMessage
        if batch and sysflag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_PREPARED:
            # As RocketMQ's store refuses it: a batch's elements would be stored visible.
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                remark="a batch of messages cannot be a transactional half")
        if batch:
            # The elements go from the request's body straight into records.
            message = BatchMessage(topic, cmd.body, queue_id, suffix=self.cluster_property,
                                   properties=props.encode(), sysflag=sysflag,
                                   born_timestamp=born, born_host=born_host,
                                   born_port=born_port, reconsume_times=reconsume)
        else:
            try:
                max_reconsume = (int_value(ext, names.max_reconsume)
                                 if get(names.max_reconsume) else None)
                topic, stored_queue, props, sysflag = self.transform(
                    topic, queue_id, props, sysflag, reconsume, max_reconsume)
            except SendRefused as exc:
                return cmd.response(exc.code, remark=str(exc))
            raw_props = join_properties(props.encode(), self.cluster_property)
            if len(raw_props) > MAX_PROPERTIES_SIZE:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                    remark=f"message properties are {len(raw_props)} "
                                           f"bytes; the limit is {MAX_PROPERTIES_SIZE}")
            message = StoreMessage(topic, cmd.body, stored_queue, properties=raw_props,
                                   flag=flag, sysflag=sysflag, born_timestamp=born,
                                   born_host=born_host, born_port=born_port,
                                   reconsume_times=reconsume)
        reply = not batch and code in _REPLY_CODES
        if not batch and not reply and (self._queued or conn.more_to_serve):
            # Appended with the other sends of this loop iteration, by _append_queued.
            self._queued.append((conn, cmd, message, queue_id))
            if len(self._queued) == 1:
                asyncio.get_running_loop().call_soon(self._append_queued)
            return None
        if self._queued:
            self._append_queued()  # the sends that came first are stored first
        if reply:
            return self._reply(cmd, ext, names, message)  # type: ignore[arg-type]
        store = self._store()
        if store.config.answers_when_safe:
            return self._put_async(cmd, message, queue_id, batch)
        try:
            results = store.put_messages(message if batch else (message,))
        except Exception as exc:
            return self._store_error(cmd, exc)
        return self._response(cmd, message, results, queue_id, batch)

    def transform(self, topic: str, queue_id: int, props: str, sysflag: int, reconsume: int,
                  max_reconsume: int | None = None) -> tuple[str, int, str, int]:
        """Where a single message is stored and with which properties: a retry past its
        attempts goes to the dead-letter topic, a transactional half to the half topic, a
        delayed or timed message to where it waits. Returns ``(topic, queue id, properties,
        sysflag)``; raises SendRefused."""
        config = self.config
        tran = sysflag & SysFlag.TRANSACTION_MASK
        # The properties are parsed once, and only when a message needs transforming
        # (dead letter, half, timer, delay); the transforms edit the parsed form.
        parsed = None
        changed = False
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = self.subscription_groups.get(topic[len(RETRY_GROUP_TOPIC_PREFIX):])
            max_times = max_reconsume if max_reconsume is not None else (
                16 if group is None else group.max_reconsume_times)
            if reconsume >= max_times:
                # Retried too often: the message goes to the group's dead-letter queue.
                self.stats.dlq(1, topic, topic[len(RETRY_GROUP_TOPIC_PREFIX):])
                topic = dead_letter_topic(self.topics, topic[len(RETRY_GROUP_TOPIC_PREFIX):],
                                          self.topics_changed)
                queue_id = 0
                if "DELAY\x01" in props:
                    parsed = decode_properties(props)
                    changed = parsed.pop(Property.DELAY, None) is not None
        if tran == SysFlag.TRANSACTION_PREPARED:
            # A half message: stored out of consumers' sight until END_TRANSACTION.
            parsed = parsed if parsed is not None else decode_properties(props)
            topic, queue_id = to_half(topic, queue_id, parsed)
            sysflag &= ~SysFlag.TRANSACTION_MASK
            changed = True
        elif "TIMER_" in props or "DELAY\x01" in props:
            parsed = parsed if parsed is not None else decode_properties(props)
            level = delay_level_of(parsed)
            if level > 0 and is_delayable(sysflag):
                # A delay level wins over timer properties, which go (as RocketMQ's
                # HookUtils.checkIfTimerMessage does): one waiting place per message.
                for name in _TIMER_PROPERTIES:
                    parsed.pop(name, None)
                topic, queue_id = to_schedule(
                    topic, queue_id, parsed, level, len(self.store_config.delay_levels_ms))
                changed = True
            else:
                try:
                    due = due_time(parsed, int(time.time() * 1000),
                                   config.timerMaxDelaySec)
                except TimerError as exc:
                    raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
                if due is not None and due > time.time() * 1000 + 50:
                    topic, queue_id = to_timer(topic, queue_id, parsed, due)
                    changed = True
        if changed:
            assert parsed is not None
            props = encode_properties(parsed)
        return topic, queue_id, props, sysflag

    def _append_queued(self) -> None:
        """Append the single messages that arrived together in one CommitLog call (one lock,
        one copy into the file) and answer each; with SYNC_FLUSH they also share the wait for
        the flush. A message the store refuses makes the rest go one by one, so that only it
        is refused."""
        queued, self._queued = self._queued, []
        if not queued:
            return  # already appended, ahead of a send that had to go after them
        store = self.store
        if store.config.answers_when_safe:
            task = asyncio.get_running_loop().create_task(self._append_queued_durable(queued))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        try:
            results = store.put_messages([q[2] for q in queued])
        except Exception:
            answers = [self._put_alone(cmd, message, queue_id)
                       for _, cmd, message, queue_id in queued]
        else:
            answers = self._answers(queued, results)
        self._send_answers(queued, answers)

    async def _append_queued_durable(self, queued: list[_Queued]) -> None:
        try:
            results = await self.put([q[2] for q in queued])
        except Exception:
            answers = []
            for _, cmd, message, queue_id in queued:
                try:
                    answers.append(await self._put_async(cmd, message, queue_id, False))
                except Exception as exc:
                    answers.append(self._error_answer(cmd, exc))
        else:
            answers = self._answers(queued, results)
        self._send_answers(queued, answers)

    def _answers(self, queued: list[_Queued], results: list[PutResult]
                 ) -> list[RemotingCommand]:
        return [self._response(cmd, message, results[i:i + 1], queue_id, False)
                for i, (_, cmd, message, queue_id) in enumerate(queued)]

    def _put_alone(self, cmd: RemotingCommand, message: StoreMessage,
                   queue_id: int) -> RemotingCommand:
        try:
            return self._response(cmd, message, self.store.put_messages((message,)),
                                  queue_id, False)
        except Exception as exc:
            return self._error_answer(cmd, exc)

    def _error_answer(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        try:
            return self._store_error(cmd, exc)
        except Exception:
            log.exception("send failed")
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")

    @staticmethod
    def _send_answers(queued: list[_Queued], answers: list[RemotingCommand]) -> None:
        conns = set()
        for (conn, cmd, _, _), answer in zip(queued, answers, strict=True):
            if not cmd.is_oneway:
                conn.send(answer)
                conns.add(conn)
        for conn in conns:
            conn.flush()  # answers first, then the dispatch the appends scheduled

    async def _reply(self, cmd: RemotingCommand, ext: dict[str, str], names: _HeaderKeys,
                     message: StoreMessage) -> RemotingCommand:
        """SEND_REPLY_MESSAGE(_V2): store the reply and push it (PUSH_REPLY_MESSAGE_TO_CLIENT)
        to the requesting client, found by the REPLY_TO_CLIENT property."""
        raw = property_value(message.properties, Property.REPLY_TO_CLIENT.encode())
        client_id = raw.decode("utf-8", "replace") if raw else ""
        channel = self.clients.client_channel(client_id)
        try:
            results = await self.put([message])
        except Exception as exc:
            return self._store_error(cmd, exc)
        if channel is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"push reply message failed: client {client_id!r} is "
                                       "not online")
        store_host = self.config.broker_addr
        push = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, {
            "producerGroup": ext.get("a") or ext.get("producerGroup") or "",
            "topic": message.topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": message.queue_id, "sysFlag": message.sysflag,
            "bornTimestamp": message.born_timestamp, "flag": message.flag,
            "properties": message.properties.decode(), "reconsumeTimes": 0, "unitMode": False,
            "bornHost": f"{socket.inet_ntoa(message.born_host)}:{message.born_port}",
            "storeHost": store_host,
            "storeTimestamp": results[0].store_timestamp}, message.body)
        try:
            response = await channel.connection.request(push, 3)
        except Exception as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"push reply message to {client_id} failed: {exc}")
        if response.code != ResponseCode.SUCCESS:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"the client refused the reply: {response.remark}")
        return self._response(cmd, message, results, message.queue_id, False)

    async def _put_async(self, cmd: RemotingCommand, message: StoreMessage | BatchMessage,
                         queue_id: int, batch: bool) -> RemotingCommand:
        try:
            results = await self.put(message if batch else (message,))
        except Exception as exc:
            return self._store_error(cmd, exc)
        return self._response(cmd, message, results, queue_id, batch)

    def _store_error(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        refused = store_refusal(exc, self)
        return cmd.response(refused.code, remark=str(refused))

    def refusal(self, exc: Exception) -> SendRefused:
        """What to answer for a put the store refused; raises ``exc`` again when it is not
        a refusal but a fault."""
        return store_refusal(exc, self)

    async def put_one(self, topic: str, body: bytes, queue_id: int, properties: str, *,
                      born_timestamp: int, born_host: bytes, born_port: int, flag: int = 0,
                      sysflag: int = 0) -> tuple[StoreMessage, PutResult]:
        """Store one message sent by another path than SEND_MESSAGE (the gRPC endpoint), with
        the same checks and transforms. The topic must exist. Raises SendRefused."""
        if not self.config.brokerPermission & Perm.WRITE:
            raise SendRefused(ResponseCode.NO_PERMISSION,
                              f"the broker[{self.config.brokerName}] sending message is "
                              "forbidden")
        topic_config = self.topics.topics.get(topic)
        if topic_config is None:
            raise SendRefused(ResponseCode.TOPIC_NOT_EXIST,
                              f"topic[{topic}] not exist, apply first please!")
        if not topic_config.perm & Perm.WRITE:
            raise SendRefused(ResponseCode.NO_PERMISSION,
                              f"the topic[{topic}] sending message is forbidden")
        if not 0 <= queue_id < topic_config.write_queue_nums:
            raise SendRefused(ResponseCode.INVALID_PARAMETER,
                              f"queueId[{queue_id}] is illegal, topic {topic} has "
                              f"{topic_config.write_queue_nums} write queues")
        stored_topic, stored_queue, properties, sysflag = self.transform(
            topic, queue_id, properties, sysflag, 0)
        raw_props = join_properties(properties.encode(), self.cluster_property)
        if len(raw_props) > MAX_PROPERTIES_SIZE:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                              f"message properties are {len(raw_props)} bytes; the limit is "
                              f"{MAX_PROPERTIES_SIZE}")
        message = StoreMessage(stored_topic, body, stored_queue, properties=raw_props,
                               flag=flag, sysflag=sysflag, born_timestamp=born_timestamp,
                               born_host=born_host, born_port=born_port)
        store = self.store
        if not store.config.answers_when_safe:
            # Answered once appended: appended now, and the call never waits (a gRPC call
            # that does stays in grpc's set of calls in flight, which it walks per call).
            try:
                result = store.put_messages((message,))[0]
            except Exception as exc:
                raise self.refusal(exc) from None
            self.stats.put(1, topic, result.size)
            return message, result
        # Appended with the other messages of this turn of the event loop (the gRPC sends
        # of many clients, each its own call): one CommitLog append, one wait.
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutResult] = loop.create_future()
        if not self._one_by_one:
            loop.call_soon(self._put_together)
        self._one_by_one.append((message, fut))
        result = await fut
        self.stats.put(1, topic, result.size)
        return message, result

    def _put_together(self) -> None:
        queued, self._one_by_one = self._one_by_one, []
        task = asyncio.get_running_loop().create_task(self._put_queued(queued))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _put_queued(self, queued: list[tuple[StoreMessage, asyncio.Future[PutResult]]]
                          ) -> None:
        try:
            results = await self.put([message for message, _ in queued])
        except Exception:
            # One of them is refused: each alone, so that only it is.
            for message, fut in queued:
                try:
                    result = (await self.put([message]))[0]
                except Exception as exc:
                    try:
                        refused = self.refusal(exc)
                    except Exception as fault:
                        refused = fault  # type: ignore[assignment]
                    if not fut.done():
                        fut.set_exception(refused)
                else:
                    if not fut.done():
                        fut.set_result(result)
            return
        for (_, fut), result in zip(queued, results, strict=True):
            if not fut.done():
                fut.set_result(result)

    def _response(self, cmd: RemotingCommand, message: StoreMessage | BatchMessage,
                  results: list[PutResult], queue_id: int, batch: bool) -> RemotingCommand:
        """The answer: where the message (a batch's first) landed, the offset ids, and the
        transaction id (the request's UNIQ_KEY, a batch's own for a batch)."""
        first = results[0]
        status = first.status
        uniq = property_value(message.properties, b"UNIQ_KEY")
        if batch:
            size, msg_id = batch_totals(results)
            self.stats.put(len(results), message.topic, size)
        else:
            msg_id = first.msg_id
            self.stats.put(1, message.topic, first.size)
        return cmd.response_text(_SUCCESS if status is _PUT_OK else _STATUS_CODES[status], {
            "msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(first.queue_offset),
            "transactionId": uniq.decode() if uniq else "", "MSG_REGION": self.region,
            "TRACE_ON": self.trace_on})


def store_refusal(exc: Exception, processor: SendProcessor | None = None) -> SendRefused:
    """What to answer for a put the store refused (``processor`` logs a full disk, once in
    10 s); raises ``exc`` again when it is not a refusal but a fault."""
    if isinstance(exc, SendRefused):
        return exc
    if isinstance(exc, MessageIllegalError):
        return SendRefused(ResponseCode.MESSAGE_ILLEGAL, str(exc))
    if isinstance(exc, SlaveNotWritableError):
        # RocketMQ answers a send to a slave the same way (PutMessageStatus
        # SERVICE_NOT_AVAILABLE: "message store is slave mode").
        return SendRefused(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc))
    if isinstance(exc, InSyncReplicasNotEnoughError):
        # RocketMQ's answer, word for word: a failure the client may resend elsewhere.
        return SendRefused(ResponseCode.SYSTEM_ERROR, str(exc))
    if isinstance(exc, DiskFullError):
        # RocketMQ answers a store that is not writable the same way; the remark says the
        # disk is full and which directory, and the client may send to another broker.
        now = time.monotonic()
        if processor is not None and now - processor._disk_full_logged >= 10:
            processor._disk_full_logged = now
            log.error("send refused (and any more for 10 s, unlogged): %s", exc)
        return SendRefused(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc))
    if isinstance(exc, StoreClosedError):
        return SendRefused(ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is shutting down")
    if isinstance(exc, (struct.error, OverflowError, ValueError)):
        # A value the record cannot hold that no check before caught: the sender's error,
        # answered as such; the broker logs no traceback for it.
        return SendRefused(ResponseCode.MESSAGE_ILLEGAL, f"the message cannot be stored: {exc}")
    raise exc


def _peer_ip(host: str) -> bytes:
    try:
        return host_to_bytes(host)
    except ValueError:  # an IPv6 peer: v1 records carry IPv4 hosts only
        return b"\x7f\x00\x00\x01"
