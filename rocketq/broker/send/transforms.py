"""Where a single message is stored, decided before it is: a retry past its attempts goes to
its group's dead-letter topic, a transactional half to the half topic, a delayed or timed
message to the topic where it waits (RocketMQ's SendMessageProcessor and its put hooks).

A plain message passes with its properties untouched: they are parsed once, and only when a
message needs transforming; the steps edit the parsed form and it is encoded once, at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...protocol import (
    RETRY_GROUP_TOPIC_PREFIX,
    Property,
    ResponseCode,
    SysFlag,
    decode_properties,
    encode_properties,
)
from ..put_outcomes import SendRefused
from ..schedule.delay import delay_level_of, is_delayable, to_schedule
from ..schedule.timer import TimerError, due_time, to_timer
from ..send_back import dead_letter_topic
from ..transactions.half_messages import to_half

if TYPE_CHECKING:
    from ...store import MessageStoreConfig
    from ..config import BrokerConfig
    from ..stats import Stats
    from ..subscription_groups import SubscriptionGroupTable
    from ..topics import TopicTable

_TIMER_PROPERTIES = (Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_SEC,
                     Property.TIMER_DELAY_MS)
_RETRY_PREFIX_LEN = len(RETRY_GROUP_TOPIC_PREFIX)
_TRANSACTION_MASK, _PREPARED = SysFlag.TRANSACTION_MASK, SysFlag.TRANSACTION_PREPARED


class Transforms:
    """The transforms of one broker's send path; :meth:`apply` is called for every single
    message stored for a client (a batch's elements are stored as sent)."""

    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig,
                 topics: TopicTable, subscription_groups: SubscriptionGroupTable,
                 stats: Stats, topics_changed: Callable[[], None]) -> None:
        self.config = config
        self.store_config = store_config
        self.topics = topics
        self.subscription_groups = subscription_groups
        self.stats = stats
        self.topics_changed = topics_changed

    def apply(self, topic: str, queue_id: int, props: str, sysflag: int, reconsume: int,
              max_reconsume: int | None = None) -> tuple[str, int, str, int]:
        """Where a single message is stored and with which properties. Returns ``(topic,
        queue id, properties, sysflag)``; raises SendRefused."""
        parsed = None
        changed = False
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            dead = self._dead_letter(topic, props, reconsume, max_reconsume)
            if dead is not None:
                topic, parsed, changed = dead
                queue_id = 0
        if sysflag & _TRANSACTION_MASK == _PREPARED:
            parsed = parsed if parsed is not None else decode_properties(props)
            topic, queue_id = to_half(topic, queue_id, parsed)
            sysflag &= ~_TRANSACTION_MASK
            changed = True
        elif "TIMER_" in props or "DELAY\x01" in props:
            parsed = parsed if parsed is not None else decode_properties(props)
            waiting = self._to_wait(topic, queue_id, parsed, sysflag)
            if waiting is not None:
                topic, queue_id = waiting
                changed = True
        if changed:
            assert parsed is not None
            props = encode_properties(parsed)
        return topic, queue_id, props, sysflag

    def _dead_letter(self, topic: str, props: str, reconsume: int, max_reconsume: int | None
                     ) -> tuple[str, dict[str, str] | None, bool] | None:
        """A retry consumed more often than its group allows goes to the group's dead-letter
        queue (created if need be), without the delay level a retry was stored with. Returns
        ``(dead-letter topic, the parsed properties or None, whether they changed)``, or None
        while the message has attempts left."""
        group_name = topic[_RETRY_PREFIX_LEN:]
        group = self.subscription_groups.get(group_name)
        max_times = max_reconsume if max_reconsume is not None else (
            16 if group is None else group.max_reconsume_times)
        if reconsume < max_times:
            return None
        self.stats.dlq(1, topic, group_name)
        topic = dead_letter_topic(self.topics, group_name, self.topics_changed)
        if "DELAY\x01" not in props:
            return topic, None, False
        parsed = decode_properties(props)
        return topic, parsed, parsed.pop(Property.DELAY, None) is not None

    def _to_wait(self, topic: str, queue_id: int, parsed: dict[str, str], sysflag: int
                 ) -> tuple[str, int] | None:
        """Where a message with a delay level or timer properties waits until it is due:
        ``(topic, queue id)``, or None when it is due already (or cannot be delayed). A delay
        level wins over timer properties, which go (as RocketMQ's
        HookUtils.checkIfTimerMessage does): one waiting place per message."""
        level = delay_level_of(parsed)
        if level > 0 and is_delayable(sysflag):
            for name in _TIMER_PROPERTIES:
                parsed.pop(name, None)
            return to_schedule(topic, queue_id, parsed, level,
                               len(self.store_config.delay_levels_ms))
        try:
            due = due_time(parsed, int(time.time() * 1000), self.config.timerMaxDelaySec)
        except TimerError as exc:
            raise SendRefused(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        if due is not None and due > time.time() * 1000 + 50:
            return to_timer(topic, queue_id, parsed, due)
        return None
