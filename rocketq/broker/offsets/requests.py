"""Consumer offsets and the offsets of queues (RocketMQ's ConsumerManageProcessor offset
requests, and AdminBrokerProcessor's queue look-ups).

QUERY_CONSUMER_OFFSET (14) and UPDATE_CONSUMER_OFFSET (15) read and commit a group's offset in
a queue (a commit that changes the offset is written to the offset log, and answered SUCCESS
once the record is as safe as a send, an error when it is not: log.py; a queue id
beyond a Java int or an offset beyond a Java long is refused, INVALID_PARAMETER);
GET_ALL_CONSUMER_OFFSET (43) is the whole table, what slaves copy; GET_MAX_OFFSET (30),
GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29) and GET_EARLIEST_MSG_STORETIME (32) answer
from the store's ConsumeQueues.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...remoting import Connection
from .log import OffsetLog
from .table import ConsumerOffsets, check_commit

if TYPE_CHECKING:
    from ...store import MessageStore

Handler = Callable[[Connection, RemotingCommand], Any]


class OffsetRequests:
    """Serves consumer offsets and queue offsets from the offset table and the store."""

    def __init__(self, offsets: ConsumerOffsets, store: Callable[[], MessageStore],
                 offset_log: OffsetLog | None = None) -> None:
        self.offsets = offsets
        self._store = store  # the store exists once the broker has started
        #: Where commits are written and waited for (None: commits stay in memory).
        self.log = offset_log

    @property
    def store(self) -> MessageStore:
        return self._store()

    def handlers(self) -> dict[int, Handler]:
        """The request handlers to add to the broker's table."""
        return {RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
                RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
                RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offsets,
                RequestCode.GET_MAX_OFFSET: self.max_offset,
                RequestCode.GET_MIN_OFFSET: self.min_offset,
                RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
                RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time}

    def query_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET: the group's committed offset; 0 for a new group in a queue
        that still holds its first message, else QUERY_NOT_FOUND."""
        group, topic = cmd.field("consumerGroup") or "", cmd.field("topic") or ""
        queue_id = cmd.int_field("queueId")
        offset = self.offsets.query(group, topic, queue_id)
        if offset is not None:
            return cmd.response(ResponseCode.SUCCESS, {"offset": offset})
        if cmd.bool_field("setZeroIfNotFound") or self.store.get_min_offset(topic, queue_id) <= 0:
            # A young queue still holds its first message: a new group starts from it.
            return cmd.response(ResponseCode.SUCCESS, {"offset": 0})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                            remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot "
                                   "first")

    def update_consumer_offset(self, conn: Connection, cmd: RemotingCommand):
        """UPDATE_CONSUMER_OFFSET: commit the group's offset in a queue. Answered at once,
        unless the offset log wrote a record that must be flushed or replicated first, or
        the same offset's record is still settling (then a coroutine answers once it is: a
        commit answered SUCCESS survives a failover). A record that could not be written or
        did not settle answers an error (the offset stays committed here, and the next
        commit writes the record again)."""
        queue_id, offset = cmd.int_field("queueId"), cmd.int_field("commitOffset")
        try:
            check_commit(queue_id, offset)
        except ValueError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        done = self.offsets.commit(cmd.field("consumerGroup") or "", cmd.field("topic") or "",
                                   queue_id, offset)
        if done is None or self.log is None:
            return cmd.response()
        if done.appended is not None and not done.wait_at:
            return cmd.response()
        return self._answer_when_safe(cmd, done)

    async def _answer_when_safe(self, cmd: RemotingCommand, done: Any) -> RemotingCommand:
        assert self.log is not None
        failure = await self.log.wait(done)
        if failure is None:
            return cmd.response()
        code, remark = failure
        return cmd.response(code, remark=remark)

    def all_consumer_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_CONSUMER_OFFSET: the whole table (what a slave copies: SlaveSync)."""
        return cmd.response(body=orjson.dumps(self.offsets.wrapper()))

    def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_MAX_OFFSET: the offset the queue's next message will take."""
        return cmd.response(ResponseCode.SUCCESS, {"offset": self.store.get_max_offset(
            cmd.field("topic") or "", cmd.int_field("queueId"))})

    def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_MIN_OFFSET: the offset of the queue's oldest message still kept."""
        return cmd.response(ResponseCode.SUCCESS, {"offset": self.store.get_min_offset(
            cmd.field("topic") or "", cmd.int_field("queueId"))})

    def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first message stored at or after the time (LOWER),
        or the last stored at or before it (UPPER)."""
        store = self.store
        topic, queue_id = cmd.field("topic") or "", cmd.int_field("queueId")
        timestamp = cmd.int_field("timestamp")
        offset = store.get_offset_by_time(topic, queue_id, timestamp)
        if (cmd.field("boundaryType") or "LOWER").upper() == "UPPER":
            # The last message stored at or before the timestamp.
            upper = store.get_offset_by_time(topic, queue_id, timestamp + 1)
            offset = max(store.get_min_offset(topic, queue_id), upper - 1)
        return cmd.response(ResponseCode.SUCCESS, {"offset": offset})

    def earliest_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_EARLIEST_MSG_STORETIME: the store time of the queue's oldest message."""
        ts = self.store.get_earliest_message_time(cmd.field("topic") or "",
                                                  cmd.int_field("queueId"))
        if ts is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="no message in the queue")
        return cmd.response(ResponseCode.SUCCESS, {"timestamp": ts})
