"""Looking messages up (RocketMQ's QueryMessageProcessor and AdminBrokerProcessor.viewMessageById).

VIEW_MESSAGE_BY_ID (33) answers the record at a CommitLog offset (the offset part of an offset
message id); QUERY_MESSAGE (12) answers the records the IndexFile finds for a key in a time
range. Either body is the records' bytes as stored, which clients decode as a pull's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...remoting import Connection

if TYPE_CHECKING:
    from ...store import MessageStore

Handler = Callable[[Connection, RemotingCommand], Any]


class MessageQueries:
    """Serves message look-ups by offset and by key from the store."""

    def __init__(self, store: Callable[[], MessageStore]) -> None:
        self._store = store  # the store exists once the broker has started

    @property
    def store(self) -> MessageStore:
        return self._store()

    def handlers(self) -> dict[int, Handler]:
        """The request handlers to add to the broker's table."""
        return {RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
                RequestCode.QUERY_MESSAGE: self.query_message}

    def view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: the record stored at CommitLog offset ``offset``."""
        offset = cmd.int_field("offset")
        data = self.store.record_bytes(offset)
        if data is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"can not find message by the offset, {offset}")
        return cmd.response(ResponseCode.SUCCESS, body=data)

    def query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_MESSAGE: up to ``maxNum`` records of ``topic`` indexed under ``key`` and
        stored between ``beginTimestamp`` and ``endTimestamp``."""
        store = self.store
        found = store.query_messages(
            cmd.field("topic") or "", cmd.field("key") or "", cmd.int_field("maxNum", 32),
            cmd.int_field("beginTimestamp", 0), cmd.int_field("endTimestamp", 2**62))
        if not found:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                remark="can not find message, maybe time range not correct")
        records = [store.record_bytes(r.commitlog_offset) or b"" for r in found]
        return cmd.response(ResponseCode.SUCCESS, {
            "indexLastUpdateTimestamp": int(time.time() * 1000),
            "indexLastUpdatePhyoffset": store.commitlog.max_offset}, b"".join(records))
