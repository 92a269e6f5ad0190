"""CONSUMER_SEND_MSG_BACK (36): a consumer failed a message (RocketMQ's
SendMessageProcessor.consumerSendMsgBack).

The message is stored again for the group's retry topic, delayed by a level that grows with
each attempt, or in the group's dead-letter topic once it has been tried ``maxReconsumeTimes``
times. Retry and dead-letter topics are created on first use.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..protocol import (
    Perm,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    dlq_topic,
    encode_properties,
    retry_topic,
)
from ..remoting import Connection
from ..store import MessageStoreConfig, StoreMessage
from .config import BrokerConfig
from .schedule.delay import to_schedule
from .stats import Stats
from .stats.stats_items import SNDBCK_PUT_NUMS, topic_group_key
from .subscription_groups import SubscriptionGroupTable
from .topics import TopicTable

if TYPE_CHECKING:
    from ..store import MessageStore, PutResult

Handler = Callable[[Connection, RemotingCommand], Any]


def dead_letter_topic(topics: TopicTable, group: str, topics_changed: Callable[[], None]) -> str:
    """The group's dead-letter topic, created on first use."""
    topic = dlq_topic(group)
    if topics.get(topic) is None:
        topics.create_system(topic, 1, Perm.READ | Perm.WRITE)
        topics_changed()
    return topic


class SendBack:
    """Stores the messages consumers send back, for a retry or for the dead-letter queue."""

    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig,
                 store: Callable[[], MessageStore],
                 put: Callable[..., Awaitable[list[PutResult]]], topics: TopicTable,
                 subscription_groups: SubscriptionGroupTable,
                 topics_changed: Callable[[], None], delayed: Callable[[], None],
                 stats: Stats) -> None:
        self.config = config
        self.store_config = store_config
        self._store = store  # the store exists once the broker has started
        self.put = put  # how the broker's loop writes to the store
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.topics_changed = topics_changed
        #: Called once a delayed retry is stored: wakes the delivery of delayed messages.
        self.delayed = delayed
        #: Messages sent back per (original topic, group): RocketMQ's SNDBCK_PUT_NUMS.
        self.sent_back: dict[tuple[str, str], int] = {}
        stats.items.watch(SNDBCK_PUT_NUMS, lambda: self.sent_back, topic_group_key)
        #: Where messages sent to a dead-letter topic are counted (rocketmq_send_to_dlq_*).
        self.stats = stats

    @property
    def store(self) -> MessageStore:
        return self._store()

    def handlers(self) -> dict[int, Handler]:
        """The request handlers to add to the broker's table."""
        return {RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back}

    def dead_letter_topic(self, group: str) -> str:
        """The group's dead-letter topic, created on first use."""
        return dead_letter_topic(self.topics, group, self.topics_changed)

    async def send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK: a consumer failed a message; store it again for the group's
        retry topic with a delay that grows with each attempt, or in its dead-letter queue
        once it has been tried ``maxReconsumeTimes`` times."""
        group = cmd.field("group") or ""
        offset = cmd.int_field("offset")
        record = self.store.look_message_by_offset(offset)
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"look message by offset failed, {offset}")
        if not group:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                remark="the group is missing")
        cfg = self.subscription_groups.find_or_create(group)
        if cfg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                remark=f"subscription group not exist, {group}")
        if cfg.retry_queue_nums <= 0:
            return cmd.response()  # the group takes no retries: RocketMQ drops the message
        retry = retry_topic(group)
        retry_config = self.topics.get(retry)
        if retry_config is None:
            retry_config = self.topics.create_system(retry, cfg.retry_queue_nums,
                                                     Perm.READ | Perm.WRITE)
            self.topics_changed()
        delay_level = cmd.int_field("delayLevel", 0)
        # The group's retryMaxTimes, unless the consumer says otherwise (clients since 3.4.9).
        max_times = cmd.int_field("maxReconsumeTimes", cfg.max_reconsume_times)
        times = record.reconsume_times
        props = dict(record.properties)
        props.setdefault(Property.RETRY_TOPIC, record.topic)
        props.setdefault(Property.ORIGIN_MESSAGE_ID,
                         cmd.field("originMsgId") or record.msg_id)
        props.pop(Property.DELAY, None)
        props[Property.CLUSTER] = self.config.brokerClusterName
        levels = len(self.store_config.delay_levels_ms)
        if times >= max_times or delay_level < 0:
            topic, queue_id = self.dead_letter_topic(group), 0
            encoded = encode_properties(props)
        else:
            level = delay_level if delay_level > 0 else 3 + times
            topic, queue_id = to_schedule(
                retry, random.randrange(max(1, retry_config.write_queue_nums)), props, level,
                levels)
            encoded = encode_properties(props)
        message = StoreMessage.from_record(
            record, topic, queue_id, encoded.encode(),
            reconsume_times=times + 1)
        try:
            await self.put([message])
        except Exception as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"send back failed: {exc}")
        key = (props[Property.RETRY_TOPIC], group)
        self.sent_back[key] = self.sent_back.get(key, 0) + 1
        if topic == dlq_topic(group):
            self.stats.dlq(1, key[0], group)
        self.delayed()
        return cmd.response()
