"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361), with long polling.

A pull that finds nothing and may be suspended is held until a matching unit is dispatched to
its queue or ``suspendTimeoutMillis`` passes, then answered with the original opaque. The body
of a found answer is the CommitLog's record bytes, handed to the transport as memoryviews.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol import Perm, PullSysFlag, RemotingCommand, ResponseCode
from ..protocol.filter import EXPRESSION_SQL92, Subscription
from ..protocol.message import record_properties
from ..protocol.sql92 import SqlError, compile_selector
from ..remoting import Connection
from ..store import GetStatus
from .clients import ClientTable
from .config import BrokerConfig
from .offsets.table import ConsumerOffsets
from .stats import Stats
from .subscription_groups import SubscriptionGroupConfig, SubscriptionGroupTable
from .topics import TopicConfig, TopicTable

if TYPE_CHECKING:
    from ..store import GetResult, MessageStore

MAX_SUSPEND_SECONDS = 60.0

_STATUS_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


class PullProcessor:
    """Serves pulls and holds the ones that wait for messages: checks them against the
    broker's config, subscription groups, topics and the subscriptions in the client table,
    commits the offsets they carry, reads the store and counts them in its stats."""

    def __init__(self, config: BrokerConfig, store: Callable[[], MessageStore],
                 topics: TopicTable, subscription_groups: SubscriptionGroupTable,
                 clients: ClientTable, offsets: ConsumerOffsets, stats: Stats) -> None:
        self.config = config
        self._store = store  # the store exists once the broker has started
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.clients = clients
        self.offsets = offsets
        self.stats = stats
        self.waiting: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._subscriptions: dict[tuple[str, str, str], Subscription] = {}

    @property
    def store(self) -> MessageStore:
        return self._store()

    @property
    def held(self) -> int:
        """Pulls held until a message arrives or they time out."""
        return sum(len(w) for w in self.waiting.values())

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on ``loop``'s thread."""
        self.loop = loop
        self._loop_thread = threading.get_ident()
        self.store.add_dispatch_listener(self._on_dispatch)

    def stop(self) -> None:
        self.store.remove_dispatch_listener(self._on_dispatch)
        for waiters in self.waiting.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    # ------------------------------------------------------------------ handling
    def handle(self, conn: Connection, cmd: RemotingCommand):
        response = self.pull(cmd, allow_suspend=True)
        if response is not None:
            return response
        return self._hold(cmd)

    #: A slave's: whether it serves pulls now (``slaveReadEnable``, or its master is gone);
    #: None on a master.
    slave_serves: Callable[[], bool] | None = None

    def pull(self, cmd: RemotingCommand, allow_suspend: bool) -> RemotingCommand | None:
        """Answer a pull, or return None when it should be held for new messages."""
        config = self.config
        ext = cmd.ext_fields
        group = ext.get("consumerGroup") or ""
        topic = ext.get("topic") or ""
        queue_id = cmd.int_field("queueId")
        offset = cmd.int_field("queueOffset")
        max_nums = cmd.int_field("maxMsgNums", 32)
        sysflag = cmd.int_field("sysFlag", 0)
        if not config.brokerPermission & Perm.READ:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                remark=f"the broker[{config.brokerName}] pulling "
                                       "message is forbidden")
        group_config = self.subscription_groups.find_or_create(group)
        if group_config is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                remark=f"subscription group [{group}] does not exist")
        if not group_config.consume_enable:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                remark=f"subscription group no permission, {group}")
        topic_config = self.topics.get(topic)
        if topic_config is None and self.slave_serves is not None:
            topic_config = self._learn_topic(topic)
        if topic_config is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                remark=f"topic[{topic}] not exist, apply first please!")
        if not topic_config.perm & Perm.READ:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                remark=f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= topic_config.read_queue_nums:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                       f"topicConfig.readQueueNums:"
                                       f"[{topic_config.read_queue_nums}]")
        if sysflag & PullSysFlag.SUBSCRIPTION:
            expression = ext.get("subscription") or "*"
            kind = ext.get("expressionType") or "TAG"
            key = (topic, expression, kind)
            sub = self._subscriptions.get(key)
            if sub is None:
                sub = Subscription.parse(topic, expression, kind)
                if len(self._subscriptions) < 10_000:
                    self._subscriptions[key] = sub
        else:
            # Only a pull that relies on the heartbeat's subscription is checked against the
            # group's message model (PullMessageProcessor): one that carries its own
            # subscription is not.
            members = self.clients.consumers.get(group)
            if (not group_config.consume_broadcast_enable and members is not None
                    and members.message_model == "BROADCASTING"):
                return cmd.response(ResponseCode.NO_PERMISSION,
                                    remark=f"the consumer group[{group}] can not consume by "
                                           "broadcast way")
            sub = self.clients.subscription(group, topic)
            if sub is None:
                return cmd.response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                    remark=f"the consumer's subscription not exist, group: "
                                           f"{group}, topic: {topic}")
            if sub.sub_version < cmd.int_field("subVersion", 0):
                return cmd.response(ResponseCode.SUBSCRIPTION_NOT_LATEST,
                                    remark="the consumer's subscription not latest")
        record_filter = None
        if sub.expression_type == EXPRESSION_SQL92:
            if not config.enablePropertyFilter:
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    remark="The broker does not support consumer to filter "
                                           "message by SQL92")
            try:
                selector = compile_selector(sub.expression)
            except SqlError as exc:
                return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark=str(exc))

            def record_filter(view: memoryview) -> bool:
                return selector(record_properties(view))
        slave_serves = self.slave_serves
        if slave_serves is not None and not slave_serves():
            # RocketMQ's slave without slaveReadEnable: "ask the master" (suggest id 0).
            return cmd.response(ResponseCode.PULL_RETRY_IMMEDIATELY, {
                "suggestWhichBrokerId": 0, "nextBeginOffset": offset,
                "minOffset": self.store.get_min_offset(topic, queue_id),
                "maxOffset": self.store.get_max_offset(topic, queue_id)},
                remark="this slave serves pulls only when its master is gone")
        # Committed on the first run only (RocketMQ's storeOffsetEnable): a held pull run
        # again when it wakes must not set the group back to what it carried then.
        if sysflag & PullSysFlag.COMMIT_OFFSET and slave_serves is None and allow_suspend:
            commit = cmd.int_field("commitOffset", -1)
            if commit >= 0:
                self.offsets.commit(group, topic, queue_id, commit)
        store = self.store
        store.catch_up()
        result = store.get_messages(topic, queue_id, offset, max_nums, sub.codes, record_filter)
        status = result.status
        if status is GetStatus.FOUND:
            self.stats.get(result.message_count, topic, group, result.total_size, queue_id,
                           result.next_begin_offset)
            response = cmd.response(ResponseCode.SUCCESS, {
                "suggestWhichBrokerId": self._suggest(group_config, result),
                "nextBeginOffset": result.next_begin_offset,
                "minOffset": result.min_offset, "maxOffset": result.max_offset},
                remark="FOUND")
            response.body_parts = result.buffers
            return response
        self.stats.miss()
        if status in (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE):
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
            next_offset = 0
        else:
            code = _STATUS_CODES[status]
            next_offset = result.next_begin_offset
        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and sysflag & PullSysFlag.SUSPEND:
            return None
        return cmd.response(code, {
            "suggestWhichBrokerId": self._suggest(group_config, result),
            "nextBeginOffset": next_offset,
            "minOffset": result.min_offset, "maxOffset": result.max_offset},
            remark=status.value)

    def _learn_topic(self, topic: str) -> TopicConfig | None:
        """A slave's topic that its master created after the last metadata copy: the
        replicated log has its queues, so the slave serves them now rather than up to 10 s
        later (the next copy brings the master's exact config)."""
        return self.topics.learn(topic, self.store.queues.queue_ids(topic))

    def _suggest(self, group: SubscriptionGroupConfig, result: GetResult) -> int:
        """Which broker of the group the consumer should pull from next, by RocketMQ's rule:
        the master unless ``slaveReadEnable``; with it, the group's
        ``whichBrokerWhenConsumeSlowly`` when the store says the reader is too far behind for
        its data to be in memory, else the group's ``brokerId``."""
        if not self.config.slaveReadEnable:
            return 0
        if result.suggest_slave:
            return group.which_broker_when_consume_slowly
        return group.broker_id

    # ------------------------------------------------------------------ long polling
    async def _hold(self, cmd: RemotingCommand) -> RemotingCommand:
        assert self.loop is not None
        ext = cmd.ext_fields
        key = (ext.get("topic") or "", cmd.int_field("queueId"))
        offset = cmd.int_field("queueOffset")
        if self.config.longPollingEnable:
            timeout = min(cmd.int_field("suspendTimeoutMillis", 15000) / 1000,
                          MAX_SUSPEND_SECONDS)
        else:
            timeout = self.config.shortPollingTimeMills / 1000
        fut: asyncio.Future[None] = self.loop.create_future()
        waiter = (offset, fut)
        self.waiting.setdefault(key, []).append(waiter)
        try:
            # A unit may have landed between the read and the registration above.
            if self.store.get_max_offset(*key) <= offset:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await fut
        finally:
            waiters = self.waiting.get(key)
            if waiters is not None:
                if waiter in waiters:
                    waiters.remove(waiter)
                if not waiters:
                    del self.waiting[key]
        response = self.pull(cmd, allow_suspend=False)
        assert response is not None
        return response

    def _on_dispatch(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Runs where the store dispatches: on the broker's loop, or on its own thread."""
        if (topic, queue_id) in self.waiting and self.loop is not None:
            if threading.get_ident() == self._loop_thread:
                self._wake(topic, queue_id, max_offset)
                return
            try:
                self.loop.call_soon_threadsafe(self._wake, topic, queue_id, max_offset)
            except RuntimeError:
                pass  # the loop is closed

    def _wake(self, topic: str, queue_id: int, max_offset: int) -> None:
        for offset, fut in self.waiting.get((topic, queue_id), ()):
            if offset < max_offset and not fut.done():
                fut.set_result(None)
