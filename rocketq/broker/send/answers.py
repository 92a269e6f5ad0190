"""What a send is answered: where the message landed (SEND_MESSAGE's response header, all
strings), or why the store refused it; and for SEND_REPLY_MESSAGE, the reply pushed to the
requesting client first."""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING

from ...protocol import Property, RemotingCommand, RequestCode, ResponseCode
from ...protocol.message import property_value
from ...remoting import Connection
from ...store import BatchMessage, PutResult, PutStatus, StoreMessage
from ...store.messages import batch_totals
from ..put_outcomes import STATUS_CODES, SendRefused, store_refusal
from .header import HeaderKeys

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..clients import ClientTable
    from ..config import BrokerConfig
    from ..stats import Stats

log = logging.getLogger("rocketq.broker")

#: Looked up once: an enum's members cost a class attribute look-up each time.
_PUT_OK, _SUCCESS = PutStatus.PUT_OK, ResponseCode.SUCCESS

#: A single send waiting to be appended with the others of its loop iteration.
Queued = tuple[Connection, RemotingCommand, StoreMessage, int]


class Answers:
    """The answering half of SendProcessor (a base class of it, so that answering costs
    the hot path no more than a method call)."""

    config: BrokerConfig
    clients: ClientTable
    stats: Stats
    region: str
    trace_on: str
    put: Callable[..., Awaitable[list[PutResult]]]
    #: When a refusal for a full disk was last logged (time.monotonic()).
    _disk_full_logged: float

    def _response(self, cmd: RemotingCommand, message: StoreMessage | BatchMessage,
                  results: list[PutResult], queue_id: int, batch: bool) -> RemotingCommand:
        """The answer: where the message (a batch's first) landed, the offset ids, and the
        transaction id (the request's UNIQ_KEY, a batch's own for a batch)."""
        first = results[0]
        status = first.status
        uniq = property_value(message.properties, b"UNIQ_KEY")
        if batch:
            size, msg_id = batch_totals(results)
            self.stats.put(len(results), message.topic, size)
        else:
            msg_id = first.msg_id
            self.stats.put(1, message.topic, first.size)
        return cmd.response_text(_SUCCESS if status is _PUT_OK else STATUS_CODES[status], {
            "msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(first.queue_offset),
            "transactionId": uniq.decode() if uniq else "", "MSG_REGION": self.region,
            "TRACE_ON": self.trace_on})

    def _answers(self, queued: list[Queued], results: list[PutResult]
                 ) -> list[RemotingCommand]:
        return [self._response(cmd, message, results[i:i + 1], queue_id, False)
                for i, (_, cmd, message, queue_id) in enumerate(queued)]

    @staticmethod
    def _send_answers(queued: list[Queued], answers: list[RemotingCommand]) -> None:
        conns = set()
        for (conn, cmd, _, _), answer in zip(queued, answers, strict=True):
            if not cmd.is_oneway:
                conn.send(answer)
                conns.add(conn)
        for conn in conns:
            conn.flush()  # answers first, then the dispatch the appends scheduled

    def _store_error(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        refused = store_refusal(exc, self)
        return cmd.response(refused.code, remark=str(refused))

    def _error_answer(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        try:
            return self._store_error(cmd, exc)
        except Exception:
            log.exception("send failed")
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")

    def refusal(self, exc: Exception) -> SendRefused:
        """What to answer for a put the store refused; raises ``exc`` again when it is not
        a refusal but a fault."""
        return store_refusal(exc, self)

    async def _reply(self, cmd: RemotingCommand, ext: dict[str, str], names: HeaderKeys,
                     message: StoreMessage) -> RemotingCommand:
        """SEND_REPLY_MESSAGE(_V2): store the reply and push it (PUSH_REPLY_MESSAGE_TO_CLIENT)
        to the requesting client, found by the REPLY_TO_CLIENT property."""
        raw = property_value(message.properties, Property.REPLY_TO_CLIENT.encode())
        client_id = raw.decode("utf-8", "replace") if raw else ""
        channel = self.clients.client_channel(client_id)
        try:
            results = await self.put([message])
        except Exception as exc:
            return self._store_error(cmd, exc)
        if channel is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"push reply message failed: client {client_id!r} is "
                                       "not online")
        store_host = self.config.broker_addr
        push = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, {
            "producerGroup": ext.get("a") or ext.get("producerGroup") or "",
            "topic": message.topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": message.queue_id, "sysFlag": message.sysflag,
            "bornTimestamp": message.born_timestamp, "flag": message.flag,
            "properties": message.properties.decode(), "reconsumeTimes": 0, "unitMode": False,
            "bornHost": f"{socket.inet_ntoa(message.born_host)}:{message.born_port}",
            "storeHost": store_host,
            "storeTimestamp": results[0].store_timestamp}, message.body)
        try:
            response = await channel.connection.request(push, 3)
        except Exception as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"push reply message to {client_id} failed: {exc}")
        if response.code != ResponseCode.SUCCESS:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"the client refused the reply: {response.remark}")
        return self._response(cmd, message, results, message.queue_id, False)
