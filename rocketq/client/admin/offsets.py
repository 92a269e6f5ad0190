"""A consumer group's offsets moved by the brokers (mqadmin resetOffsetByTime,
skipAccumulatedMessage), and the offset of a point in time in a queue (searchOffset)."""

from __future__ import annotations

from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ..consumer_calls import parse_reset_offset_body
from ..errors import ClientError, NotFoundError
from ..message import MessageQueue
from .base import AdminBase

#: The ``timestamp`` of a reset that means "the end of each queue".
QUEUE_END = -1


class OffsetAdmin(AdminBase):
    """Consumer offsets."""

    async def reset_offset(self, group: str, topic: str, timestamp_ms: int, *,
                           force: bool = True) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets in ``topic`` to the first message stored at or after
        ``timestamp_ms`` in each queue (RocketMQ's resetOffsetByTime; ``-1``: the end of
        each queue). Each master broker of the topic commits the new offsets and tells the
        group's online members, which consume from there at once. Without ``force`` an offset
        only moves back: a queue whose committed offset is before the time keeps it. Returns
        each queue's new offset.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            NotFoundError: the topic has no route.
            ClientError: a broker refused (the group has no
                offsets in the topic and no member online); every broker is tried first.
        """
        route = await self.instance.fetch_route(topic)
        if route is None:
            raise NotFoundError(f"no route for topic {topic}")
        header = {"topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": force}
        offsets: dict[MessageQueue, int] = {}
        refused = []
        for name, addrs in sorted(route.broker_addrs.items()):
            if 0 not in addrs:
                continue
            r = await self.instance.remoting.invoke(addrs[0], RemotingCommand.request(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header))
            if r.code != ResponseCode.SUCCESS:
                refused.append(f"{name} ({addrs[0]}): {r.remark} (code {r.code})")
                continue
            offsets.update(parse_reset_offset_body(r.body))
        if refused:
            done = f" (reset on the other brokers: {len(offsets)} queues)" if offsets else ""
            raise ClientError("; ".join(refused) + done)
        return dict(sorted(offsets.items()))

    async def skip_accumulated(self, group: str, topic: str) -> dict[MessageQueue, int]:
        """Move ``group`` to the end of every queue of ``topic``, so that it skips what has
        piled up and consumes only what comes next (mqadmin skipAccumulatedMessage). Returns
        each queue's new offset.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            NotFoundError: the topic has no route.
            ClientError: a broker refused.
        """
        return await self.reset_offset(group, topic, QUEUE_END)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms``.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            ClientError: the broker refused the query.
        """
        r = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": mq.topic, "queueId": mq.queue_id,
                                                     "timestamp": timestamp_ms}), 3, mq.topic)
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"offset search on {mq}: {r.remark}")
        return int(r.ext_fields.get("offset", "0"))
