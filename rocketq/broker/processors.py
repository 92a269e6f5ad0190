"""Which part of the broker serves each request code (RocketMQ's
``BrokerController.registerProcessor``), and the one door every request comes in by.

Where requests go (RocketMQ's processors in brackets):

- ``send``: SEND_MESSAGE and its variants (SendMessageProcessor);
- ``send_back``: CONSUMER_SEND_MSG_BACK (SendMessageProcessor.consumerSendMsgBack);
- ``pull``: PULL_MESSAGE, LITE_PULL_MESSAGE, long polling (PullMessageProcessor);
- ``client_requests``: heartbeats, client and queue-lock requests (ClientManageProcessor);
- ``offset_requests`` (``offsets/``): consumer and queue offsets (ConsumerManageProcessor);
- ``message_queries``: messages by offset id and by key (QueryMessageProcessor);
- ``admin``, ``consumer_calls``, ``acl_requests`` and the group requests (all in ``admin/``):
  topics, config, stats, consumers' offsets and calls, groups, ACL (AdminBrokerProcessor);
- ``transactions/``: END_TRANSACTION and transaction checks (EndTransactionProcessor), and
  the exactly-once sinks' prepare and commit;
- ``pop/``: POP receive, ack and change of invisible time (PopMessageProcessor and kin);
- ``schedule/``: delay levels and the timer wheel (ScheduleMessageService, TimerMessageStore);
- ``registration`` (``replication/``): REGISTER_BROKER / UNREGISTER_BROKER to the NameServers;
- ``roles`` (``replication/``): master or slave, and in controller mode the switch between
  them (NOTIFY_BROKER_ROLE_CHANGED, GET_BROKER_EPOCH_CACHE).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ..protocol import RemotingCommand, RequestCode, ResponseCode
from ..remoting import Connection
from .admin.groups import subscription_group_handlers
from .admin.requests import guard_admin_fields

if TYPE_CHECKING:
    from ..store import MessageStore
    from .clients import ClientTable
    from .offsets.table import ConsumerOffsets
    from .pull import PullProcessor
    from .schedule.delay import DelayDelivery
    from .send import SendProcessor
    from .subscription_groups import SubscriptionGroupTable
    from .transactions.half_messages import Transactions

Handler = Callable[[Connection, RemotingCommand], Any]


class Part(Protocol):
    """A part that serves request codes of its own."""

    def handlers(self) -> dict[int, Handler]: ...


def handler_table(send: SendProcessor, pull: PullProcessor, transactions: Transactions,
                  schedule: DelayDelivery, subscription_groups: SubscriptionGroupTable,
                  offsets: ConsumerOffsets, parts: Iterable[Part]) -> dict[int, Handler]:
    """Request code -> the handler of the part that serves it: the send, pull and
    transaction codes, a slave's copy of the delay offsets, every code ``parts`` name, and
    the subscription-group requests; admin fields checked first (INVALID_PARAMETER)."""
    handlers: dict[int, Handler] = {
        RequestCode.SEND_MESSAGE: send.handle,
        RequestCode.SEND_MESSAGE_V2: send.handle,
        RequestCode.SEND_BATCH_MESSAGE: send.handle,
        RequestCode.SEND_REPLY_MESSAGE: send.handle,
        RequestCode.SEND_REPLY_MESSAGE_V2: send.handle,
        RequestCode.PULL_MESSAGE: pull.handle,
        RequestCode.LITE_PULL_MESSAGE: pull.handle,
        RequestCode.END_TRANSACTION: transactions.end_transaction,
        # What a slave copies from its master (SlaveSync; offsets: OffsetRequests).
        RequestCode.GET_ALL_DELAY_OFFSET: lambda conn, cmd: cmd.response(
            body=orjson.dumps(schedule.wrapper())),
    }
    for part in parts:
        handlers.update(part.handlers())
    handlers.update(subscription_group_handlers(subscription_groups, offsets))
    return guard_admin_fields(handlers)  # a bad admin field: INVALID_PARAMETER


class Processors:
    """Routes each request to its handler: a code no part serves is answered
    REQUEST_CODE_NOT_SUPPORTED, any request before the store is open SYSTEM_BUSY. A closed
    connection is forgotten by the client table."""

    def __init__(self, handlers: dict[int, Handler],
                 store: Callable[[], MessageStore | None], clients: ClientTable) -> None:
        self.handlers = handlers
        self._store = store
        self._clients = clients

    def handle(self, conn: Connection, cmd: RemotingCommand):
        handler = self.handlers.get(cmd.code)  # type: ignore[call-overload]
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                remark=f" request type {cmd.code} not supported")
        if self._store() is None:
            return cmd.response(ResponseCode.SYSTEM_BUSY, remark="the broker is starting")
        return handler(conn, cmd)

    def connection_closed(self, conn: Connection) -> None:
        self._clients.connection_closed(conn)
