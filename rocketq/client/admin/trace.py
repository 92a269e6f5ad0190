"""Whether each group that consumes a topic has consumed one of its messages (RocketMQ's
messageTrackDetail, the dashboard's message track)."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

import orjson

from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...protocol.filter import EXPRESSION_TAG, Subscription
from ..errors import ClientError, NotFoundError
from ..message import MessageQueue
from .groups import GroupAdmin
from .messages import MessageAdmin


class TrackType(enum.StrEnum):
    """What a group has done with a message (RocketMQ's TrackType; RocketMQ spells the
    second ``NOT_CONSUME_YET``)."""

    #: The group's committed offset in the message's queue is past it.
    CONSUMED = "CONSUMED"
    #: Consumed (passed), but the group's tag subscription does not take the message.
    CONSUMED_BUT_FILTERED = "CONSUMED_BUT_FILTERED"
    #: The group's committed offset has not reached it.
    NOT_CONSUMED_YET = "NOT_CONSUMED_YET"
    #: No member of the group is connected, so its subscription is not known.
    NOT_ONLINE = "NOT_ONLINE"
    #: The group consumes by broadcasting (each member keeps its own offsets), or its state
    #: could not be read.
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class Delivery:
    """One group's dealing with a message (a row of RocketMQ's MessageTrack)."""

    group: str
    #: One of TrackType's values, as a str.
    status: str
    #: The group's committed offset in the message's queue, when known.
    consumer_offset: int | None = None
    #: How many members of the group are connected.
    members: int = 0
    #: Why the group's state could not be read (status UNKNOWN), if it could not.
    error: str | None = None


class TraceAdmin(MessageAdmin, GroupAdmin):
    """The message track."""

    async def message_trace(self, topic: str, msg_id: str) -> list[Delivery]:
        """For each group that consumes ``topic`` (its brokers' QUERY_TOPIC_CONSUME_BY_WHO:
        groups with offsets in it or subscribed to it), by name, whether it has consumed the
        message ``msg_id`` (either id): its committed offset in the message's queue is past
        the message (CONSUMED, or CONSUMED_BUT_FILTERED if its tag subscription does not
        take the message), or not yet (NOT_CONSUMED_YET). A group with no member online is
        NOT_ONLINE, one consuming by broadcasting UNKNOWN, as RocketMQ's messageTrackDetail
        answers (and UNKNOWN, with ``error``, for a group whose state could not be read).
        Pull consumers are judged by their committed offsets too (RocketMQ answers PULL for
        them without looking).

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            InvalidArgumentError: ``msg_id`` is not a message id.
            NotFoundError: the message was not found, or the topic has no route.
            ClientError: a broker refused a query.
        """
        message = await self.message_by_id(msg_id, topic)
        if message.topic != topic:
            raise NotFoundError(f"message {msg_id} is in {message.topic}, not in {topic}")
        queue = MessageQueue(topic, message.broker_name, message.queue_id)
        groups = await self._consumed_by(topic)

        async def one(group: str) -> Delivery:
            try:
                return await track(group)
            except (ClientError, OSError) as exc:  # one group's broker away: the others stand
                return Delivery(group, TrackType.UNKNOWN.value, error=str(exc) or repr(exc))

        async def track(group: str) -> Delivery:
            members = await self.consumer_connections(group)
            if not members:
                return Delivery(group, TrackType.NOT_ONLINE.value)
            if members[0].message_model == "BROADCASTING":
                return Delivery(group, TrackType.UNKNOWN.value, members=len(members))
            progress = await self.consumer_progress(group, topic)
            offset = next((q.consumer_offset for q in progress.queues if q.queue == queue),
                          None)
            if offset is None or offset <= message.queue_offset:
                return Delivery(group, TrackType.NOT_CONSUMED_YET.value, offset, len(members))
            expression = members[0].subscriptions.get(topic, "*")
            kind = members[0].subscription_types.get(topic, EXPRESSION_TAG)
            if kind == EXPRESSION_TAG and not Subscription.parse(
                    topic, expression).matches_tags(message.tags):
                return Delivery(group, TrackType.CONSUMED_BUT_FILTERED.value, offset,
                                len(members))
            return Delivery(group, TrackType.CONSUMED.value, offset, len(members))

        return list(await asyncio.gather(*(one(g) for g in groups)))

    async def _consumed_by(self, topic: str) -> list[str]:
        """The groups the topic's master brokers say consume it, sorted."""
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            raise NotFoundError(f"No route info of this topic: {topic}")
        groups: set[str] = set()
        for name in sorted(route.broker_addrs):
            addr = self.instance.broker_addr(name)
            if addr is None:
                continue
            r = await self.instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}))
            if r.code != ResponseCode.SUCCESS:
                raise ClientError(f"groups of {topic} on {name}: {r.remark} (code {r.code})")
            groups.update(orjson.loads(r.body).get("groupList") or ())
        return sorted(groups)
