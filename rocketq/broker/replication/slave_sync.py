"""A slave copies its master's metadata (RocketMQ's SlaveSynchronize): every 10 s the topic
table (GET_ALL_TOPIC_CONFIG 21), consumer offsets (GET_ALL_CONSUMER_OFFSET 43, the master's
win), delay offsets (GET_ALL_DELAY_OFFSET 45) and subscription groups
(GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201). So a slave serving reads while its master is gone
knows the topics and where each group stands; the master serves the same codes.

Consumer offsets reach a slave through the replicated log when both ends keep the offset log
(broker/offsets/log.py; the master's answer then says ``offsetLogOffset``, how far into the log
its table covers): the copy is then taken in full, removals included, and the records this
slave holds beyond that point are applied over it (``OffsetLog.take_copy``), so a copy older
than what the log brought sets nothing back, and one at least as new takes over."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson

from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...remoting import RemotingClient, RemotingError
from ..offsets.table import LOG_OFFSET_KEY, ConsumerOffsets
from ..schedule.delay import DelayDelivery
from ..subscription_groups import GroupConfigError, SubscriptionGroupTable
from ..topics import TopicTable

log = logging.getLogger("rocketq.broker")


class SlaveSync:
    """Copies the master's tables into this slave's, on a period, until cancelled."""

    def __init__(self, client: RemotingClient, master_addr: Callable[[], str],
                 topics: TopicTable, offsets: ConsumerOffsets, delay: DelayDelivery,
                 groups: SubscriptionGroupTable, interval: float = 10.0) -> None:
        self.client = client
        self.master_addr = master_addr
        self.topics = topics
        self.offsets = offsets
        self.delay = delay
        self.groups = groups
        self.interval = interval

    async def run(self) -> None:
        while True:
            await self.sync_once()
            await asyncio.sleep(self.interval)

    async def sync_once(self) -> bool:
        """One round; True when every table was copied."""
        addr = self.master_addr()
        if not addr:
            return False
        done = True
        for code, apply in ((RequestCode.GET_ALL_TOPIC_CONFIG, self._topics),
                            (RequestCode.GET_ALL_CONSUMER_OFFSET, self._offsets),
                            (RequestCode.GET_ALL_DELAY_OFFSET, self._delay_offsets),
                            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self._groups)):
            try:
                r = await self.client.invoke(addr, RemotingCommand.request(code), 3)
                if r.code != ResponseCode.SUCCESS:
                    raise ValueError(f"the master answered {r.code}: {r.remark}")
                apply(orjson.loads(r.body or b"{}"))
            except (RemotingError, OSError, ValueError, TypeError, AttributeError,
                    GroupConfigError) as exc:
                log.warning("cannot copy %s from master %s: %s", RequestCode(code).name, addr,
                            exc)
                done = False
        return done

    def _topics(self, body: dict) -> None:
        self.topics.take_all(body.get("topicConfigTable") or {})

    def _offsets(self, body: dict) -> None:
        table = body.get("offsetTable") or {}
        if self.offsets.logged and LOG_OFFSET_KEY in body:
            self.offsets.take_copy(table, int(body[LOG_OFFSET_KEY]))
        else:
            self.offsets.put_all(table)
        self.offsets.persist()

    def _delay_offsets(self, body: dict) -> None:
        table = body.get("offsetTable") or {}
        self.delay.offsets.update({int(k): int(v) for k, v in table.items()})
        self.delay.persist()

    def _groups(self, body: dict) -> None:
        self.groups.take_all(body.get("subscriptionGroupTable") or {})
