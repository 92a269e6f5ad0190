"""Transactional producer: a half message, the local transaction, then commit or rollback;
the broker asks back (CHECK_TRANSACTION_STATE) about transactions left UNKNOWN."""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from ..protocol import Property, RemotingCommand, RequestCode, SysFlag, decode_record
from ..protocol.message import decode_offset_msg_id
from ..remoting import Connection, RemotingError
from .errors import ClientError
from .instance import ClientInstance
from .message import Message, ReceivedMessage, SendResult, SendStatus
from .producer import AsyncProducer

log = logging.getLogger("rocketq.client")


class LocalTransactionState(enum.Enum):
    """The outcome of a local transaction, as the listener reports it."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"


_WIRE = {LocalTransactionState.COMMIT: SysFlag.TRANSACTION_COMMIT,
         LocalTransactionState.ROLLBACK: SysFlag.TRANSACTION_ROLLBACK,
         LocalTransactionState.UNKNOWN: 0}


class TransactionListener(Protocol):
    """What a transactional producer calls: ``execute_local_transaction`` right after the half
    message is stored, ``check_local_transaction`` when the broker asks about one left open."""

    def execute_local_transaction(self, message: Message, arg: Any) -> LocalTransactionState:
        ...

    def check_local_transaction(self, message: ReceivedMessage) -> LocalTransactionState: ...


@dataclass
class TransactionSendResult(SendResult):
    local_state: LocalTransactionState = LocalTransactionState.UNKNOWN


class AsyncTransactionProducer(AsyncProducer):
    """``send_message_in_transaction`` runs the listener's local transaction between storing
    the half message and committing or rolling it back. The listener also answers the
    brokers' checks of transactions left open, on ``check_threads`` threads (a coroutine
    function runs on the event loop). The other options are AsyncProducer's.

    Raises:
        ArgumentTypeError: ``group`` or ``namesrv`` is not a str.
        InvalidArgumentError: ``group`` breaks RocketMQ's group name rule, or ``namesrv`` is not
            ``host:port[;host:port...]``.
    """

    def __init__(self, group: str, listener: TransactionListener, namesrv: str, *,
                 check_threads: int = 4, instance: ClientInstance | None = None,
                 **options: Any) -> None:
        super().__init__(group, namesrv, instance=instance, **options)
        self.listener = listener
        self.executor = concurrent.futures.ThreadPoolExecutor(
            check_threads, thread_name_prefix=f"rocketq-tx-{group}")
        self._checks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        """Start the producer and tell the brokers of its group at once, so they can ask it
        about open transactions.

        Raises:
            Nothing.
        """
        self.instance.on_request[RequestCode.CHECK_TRANSACTION_STATE] = self._on_check
        await super().start()
        await self.instance.heartbeat_all()

    async def shutdown(self) -> None:
        """Stop the producer and the threads of the listener's checks.

        Raises:
            Nothing.
        """
        await super().shutdown()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def _call(self, fn: Any, *args: Any) -> LocalTransactionState:
        try:
            if inspect.iscoroutinefunction(fn):
                state = await fn(*args)
            else:
                state = await asyncio.get_running_loop().run_in_executor(self.executor, fn,
                                                                         *args)
        except Exception:
            log.exception("transaction listener failed; the state stays UNKNOWN")
            return LocalTransactionState.UNKNOWN
        if not isinstance(state, LocalTransactionState):
            log.warning("transaction listener returned %r; treated as UNKNOWN", state)
            return LocalTransactionState.UNKNOWN
        return state

    async def send_message_in_transaction(self, message: Message, arg: Any = None
                                          ) -> TransactionSendResult:
        """Store a half message, run the local transaction, then end the transaction. A
        failure of the listener leaves the state UNKNOWN (the broker asks again later).

        Raises:
            ArgumentTypeError: ``message`` is not a Message.
            MessageValidationError: the message breaks a rule or is delayed; nothing was sent.
            NameServerError: no NameServer answered for the topic's route.
            NoMasterError: the topic's broker groups had no master until the send timeout.
            BrokerError: the broker refused the half message.
            ConnectionClosedError: the broker could not be reached (after the retries).
            ClientTimeoutError: no answer within the send timeout.
            ClientError: no route for the topic and no ``TBW102`` to create it from.
        """
        result = await self._send_half(message)
        if result.status is SendStatus.SEND_OK:
            state = await self._call(self.listener.execute_local_transaction, message, arg)
        else:
            state = LocalTransactionState.ROLLBACK
        try:
            await self._end(result, state, message.properties.get(Property.UNIQ_KEY, ""))
        except (ClientError, RemotingError, OSError) as exc:
            # The broker will ask back later, so the transaction is not lost.
            log.warning("ending transaction %s failed: %s", result.msg_id, exc)
        return TransactionSendResult(result.status, result.msg_id, result.offset_msg_id,
                                     result.queue, result.queue_offset, result.transaction_id,
                                     state)

    async def _end(self, result: SendResult, state: LocalTransactionState, uniq: str) -> None:
        _host, _port, commitlog_offset = decode_offset_msg_id(result.offset_msg_id)
        addr = await self.instance.broker_addr_or_refresh(result.queue.broker_name,
                                                          result.queue.topic)
        await self.instance.remoting.invoke_oneway(addr, RemotingCommand.request(
            RequestCode.END_TRANSACTION, {
                "producerGroup": self.group, "tranStateTableOffset": result.queue_offset,
                "commitLogOffset": commitlog_offset, "commitOrRollback": _WIRE[state],
                "fromTransactionCheck": False, "msgId": uniq,
                "transactionId": result.transaction_id or uniq}))

    def _on_check(self, conn: Connection, cmd: RemotingCommand) -> None:
        task = asyncio.get_running_loop().create_task(self._check(conn, cmd))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        return None

    async def _check(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            record = decode_record(cmd.body)
        except Exception as exc:
            log.warning("bad CHECK_TRANSACTION_STATE body: %s", exc)
            return
        message = ReceivedMessage.from_record(record, cmd.ext_fields.get("bname", ""))
        state = await self._call(self.listener.check_local_transaction, message)
        conn.oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, {
            "producerGroup": self.group,
            "tranStateTableOffset": cmd.ext_fields.get("tranStateTableOffset", "0"),
            "commitLogOffset": cmd.ext_fields.get("commitLogOffset", "0"),
            "commitOrRollback": _WIRE[state], "fromTransactionCheck": True,
            "msgId": cmd.ext_fields.get("msgId", ""),
            "transactionId": cmd.ext_fields.get("transactionId", "")}))
