"""SendProcessor: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320), as
a pipeline of named steps from the request to the store.

The request's header becomes a StoreMessage (the body is stored as sent, compressed or not);
the store answers where it landed; the response carries RocketMQ's fields, all as strings.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ...protocol import (
    IllegalTopicError,
    Perm,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SysFlag,
    validate_topic,
)
from ...protocol.command import int_value
from ...protocol.message import MAX_PROPERTIES_SIZE, join_properties
from ...remoting import Connection
from ...store import BatchMessage, PutResult, StoreMessage
from ..clients import ClientTable
from ..config import BrokerConfig
from ..put_outcomes import SendRefused
from ..stats import Stats
from ..subscription_groups import SubscriptionGroupTable
from ..topics import TopicConfig, TopicTable
from .answers import Answers, Queued
from .header import LONG_KEYS, V2_CODES, V2_KEYS, HeaderKeys, header_integers, peer_ip
from .transforms import Transforms

if TYPE_CHECKING:
    from ...store import MessageStore, MessageStoreConfig

_REPLY_CODES = (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)
_SEND_BATCH = RequestCode.SEND_BATCH_MESSAGE
_TRANSACTION_MASK, _PREPARED = SysFlag.TRANSACTION_MASK, SysFlag.TRANSACTION_PREPARED


class SendProcessor(Answers):
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
        #: Where a single message is stored (dead letter, half, delay, timer); see
        #: Transforms.apply. Bound once: the send path calls it directly.
        self.transform = Transforms(config, store_config, topics, subscription_groups, stats,
                                    topics_changed).apply
        #: Added to every stored message's properties, encoded.
        self.cluster_property = f"CLUSTER\x01{config.brokerClusterName}\x02".encode()
        self.region = config.regionId
        self.trace_on = "true" if config.traceOn else "false"
        self._queued: list[Queued] = []
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
        ext = cmd.ext_fields
        code = cmd.code
        names = V2_KEYS if code in V2_CODES else LONG_KEYS
        topic = ext.get(names.topic) or ""
        batch = code == _SEND_BATCH or (ext.get(names.batch) or "").lower() in ("true", "1")
        message: StoreMessage | BatchMessage
        try:
            self._check_broker_writable()
            queue_id, sysflag, born, flag, reconsume = header_integers(ext, names)
            topic_config = self._writable_topic(topic, ext, names)
            queue_id = self._queue_id(topic, topic_config, queue_id)
            if batch:
                message = self._batch_message(conn, cmd, ext, names, topic, queue_id, sysflag,
                                              born, reconsume)
            else:
                message = self._single_message(conn, cmd, ext, names, topic, queue_id, sysflag,
                                               born, flag, reconsume)
        except SendRefused as exc:
            return cmd.response(exc.code, remark=str(exc))
        if batch:
            return self._store_now(cmd, message, queue_id, True)
        if code in _REPLY_CODES:
            if self._queued:
                self._append_queued()  # the sends that came first are stored first
            return self._reply(cmd, ext, names, message)  # type: ignore[arg-type]
        if self._queued or conn.more_to_serve:
            return self._queue(conn, cmd, message, queue_id)  # type: ignore[arg-type]
        return self._store_now(cmd, message, queue_id, False)

    def _check_broker_writable(self) -> None:
        """Refuses every send while the broker's permission lacks WRITE."""
        if not self.config.brokerPermission & Perm.WRITE:
            raise SendRefused(ResponseCode.NO_PERMISSION,
                              f"the broker[{self.config.brokerName}] sending message is "
                              "forbidden")

    def _writable_topic(self, topic: str, ext: dict[str, str], names: HeaderKeys
                        ) -> TopicConfig:
        """The config of the topic sent to, created from the default topic when the broker
        auto-creates topics; refused when it is illegal, unknown or not writable."""
        topic_config = self.topics.topics.get(topic)  # a known topic's name is valid
        if topic_config is None:
            try:
                validate_topic(topic)
            except IllegalTopicError as exc:
                raise SendRefused(ResponseCode.INVALID_PARAMETER, str(exc)) from None
            topic_config = self.topics.create_in_send(
                topic, ext.get(names.default_topic) or "TBW102",
                int_value(ext, names.default_queue_nums, 4))
            if topic_config is None:
                raise SendRefused(ResponseCode.TOPIC_NOT_EXIST,
                                  f"topic[{topic}] not exist, apply first please!")
            self.topics_changed()
        if not topic_config.perm & Perm.WRITE:
            raise SendRefused(ResponseCode.NO_PERMISSION,
                              f"the topic[{topic}] sending message is forbidden")
        return topic_config

    @staticmethod
    def _queue_id(topic: str, topic_config: TopicConfig, queue_id: int) -> int:
        """The queue written: the one asked for, or a random one for a negative id."""
        if queue_id < 0:
            return random.randrange(topic_config.write_queue_nums)
        if queue_id >= topic_config.write_queue_nums:
            raise SendRefused(ResponseCode.INVALID_PARAMETER,
                              f"request queueId[{queue_id}] is illegal, topic "
                              f"{topic} has {topic_config.write_queue_nums} write queues")
        return queue_id

    def _batch_message(self, conn: Connection, cmd: RemotingCommand, ext: dict[str, str],
                       names: HeaderKeys, topic: str, queue_id: int, sysflag: int, born: int,
                       reconsume: int) -> BatchMessage:
        """A batch: its elements go from the request's body straight into records, as sent
        (no transform); a transactional half batch is refused, as RocketMQ's store refuses
        it, since its elements would be stored visible."""
        if sysflag & _TRANSACTION_MASK == _PREPARED:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                              "a batch of messages cannot be a transactional half")
        attrs = conn.attributes  # the sender's address, found once per connection
        born_host = attrs.get("peer_ip")
        if born_host is None:
            born_host = attrs["peer_ip"] = peer_ip(conn.peer[0])
        return BatchMessage(topic, cmd.body, queue_id, suffix=self.cluster_property,
                            properties=(ext.get(names.properties) or "").encode(),
                            sysflag=sysflag, born_timestamp=born, born_host=born_host,
                            born_port=conn.peer[1], reconsume_times=reconsume)

    def _single_message(self, conn: Connection, cmd: RemotingCommand, ext: dict[str, str],
                        names: HeaderKeys, topic: str, queue_id: int, sysflag: int, born: int,
                        flag: int, reconsume: int) -> StoreMessage:
        """A single message, transformed (dead letter, half, delay, timer) and given the
        cluster property; refused when its properties grow past what a record holds."""
        max_reconsume = (int_value(ext, names.max_reconsume)
                         if ext.get(names.max_reconsume) else None)
        topic, stored_queue, props, sysflag = self.transform(
            topic, queue_id, ext.get(names.properties) or "", sysflag, reconsume, max_reconsume)
        raw_props = join_properties(props.encode(), self.cluster_property)
        if len(raw_props) > MAX_PROPERTIES_SIZE:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL,
                              f"message properties are {len(raw_props)} bytes; the limit is "
                              f"{MAX_PROPERTIES_SIZE}")
        attrs = conn.attributes  # the sender's address, found once per connection
        born_host = attrs.get("peer_ip")
        if born_host is None:
            born_host = attrs["peer_ip"] = peer_ip(conn.peer[0])
        return StoreMessage(topic, cmd.body, stored_queue, properties=raw_props, flag=flag,
                            sysflag=sysflag, born_timestamp=born, born_host=born_host,
                            born_port=conn.peer[1], reconsume_times=reconsume)

    def _queue(self, conn: Connection, cmd: RemotingCommand, message: StoreMessage,
               queue_id: int) -> None:
        """Keep a single send to be appended with the other sends of this loop iteration,
        by _append_queued."""
        self._queued.append((conn, cmd, message, queue_id))
        if len(self._queued) == 1:
            asyncio.get_running_loop().call_soon(self._append_queued)

    def _store_now(self, cmd: RemotingCommand, message: StoreMessage | BatchMessage,
                   queue_id: int, batch: bool):
        """Store the message after the sends queued before it, and answer: at once, or by
        a coroutine when the answer waits for the flush."""
        if self._queued:
            self._append_queued()  # the sends that came first are stored first
        store = self._store()
        if store.config.answers_when_safe:
            return self._put_async(cmd, message, queue_id, batch)
        try:
            results = store.put_messages(message if batch else (message,))
        except Exception as exc:
            return self._store_error(cmd, exc)
        return self._response(cmd, message, results, queue_id, batch)

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

    async def _append_queued_durable(self, queued: list[Queued]) -> None:
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

    def _put_alone(self, cmd: RemotingCommand, message: StoreMessage,
                   queue_id: int) -> RemotingCommand:
        try:
            return self._response(cmd, message, self.store.put_messages((message,)),
                                  queue_id, False)
        except Exception as exc:
            return self._error_answer(cmd, exc)

    async def _put_async(self, cmd: RemotingCommand, message: StoreMessage | BatchMessage,
                         queue_id: int, batch: bool) -> RemotingCommand:
        try:
            results = await self.put(message if batch else (message,))
        except Exception as exc:
            return self._store_error(cmd, exc)
        return self._response(cmd, message, results, queue_id, batch)

    async def put_one(self, topic: str, body: bytes, queue_id: int, properties: str, *,
                      born_timestamp: int, born_host: bytes, born_port: int, flag: int = 0,
                      sysflag: int = 0) -> tuple[StoreMessage, PutResult]:
        """Store one message sent by another path than SEND_MESSAGE (the gRPC endpoint), with
        the same checks and transforms. The topic must exist. Raises SendRefused."""
        self._check_broker_writable()
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

