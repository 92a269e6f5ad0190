"""Consumption over POP, the 5.x way (the proxy's ReceiveMessageActivity, AckMessageActivity,
ChangeInvisibleDurationActivity and ForwardMessageToDLQActivity): ReceiveMessage long-polls
the broker's POP service, and AckMessage, ChangeInvisibleDuration and
ForwardMessageToDeadLetterQueue act on the receipt handles it handed out.

``Receiving`` is a part of ``service.MessagingService``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ..acl.plain import SUB
from ..broker.pop import MAX_INVISIBLE_MS, PopError
from ..protocol.sql92 import SqlError
from .common import POP_CODES, Refused, answers, fault, now_ms, status, subscription
from .convert import timestamp, to_message
from .proto import definition_pb2 as pb
from .proto import service_pb2 as spb

if TYPE_CHECKING:
    from ..broker import Broker

#: The invisible time a receive may ask for (the proxy's minInvisibleTimeMillsForRecv).
MIN_RECEIVE_INVISIBLE_MS = 10_000
#: The invisible time of messages received with ``auto_renew`` (push consumers).
AUTO_RENEW_INVISIBLE_MS = 60_000
#: Long polling bounds of a receive (the proxy's grpcClientConsumer*LongPollingTimeoutMillis).
MIN_POLL_MS, MAX_POLL_MS = 5_000, 20_000


class Receiving:
    """ReceiveMessage, AckMessage, ChangeInvisibleDuration and
    ForwardMessageToDeadLetterQueue: a part of :class:`service.MessagingService`, whose
    ``_metadata``, ``_client``, ``_check``, ``_enter``, ``_topic`` and ``_group`` it calls."""

    broker: Broker

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context: Any
                             ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            md = self._metadata(context)
            client = self._client(context, md)
            topic_resource = request.message_queue.topic
            self._check(context, md, [(topic_resource.name, False, SUB),
                                      (request.group.name, True, SUB)])
            self._topic(topic_resource)
            self._group(request.group)
            if request.auto_renew:
                invisible = AUTO_RENEW_INVISIBLE_MS
            else:
                invisible = (request.invisible_duration.ToMilliseconds()
                             if request.HasField("invisible_duration") else 0)
                if not MIN_RECEIVE_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                    raise Refused(pb.ILLEGAL_INVISIBLE_TIME,
                                  f"the invisible duration is {invisible} ms; it must be "
                                  f"within {MIN_RECEIVE_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms")
            remaining = context.time_remaining()
            remaining_ms = int(remaining * 1000) if remaining is not None else MAX_POLL_MS + 3000
            if request.HasField("long_polling_timeout"):
                poll = request.long_polling_timeout.ToMilliseconds()
            else:
                poll = remaining_ms - 1500
            poll = min(max(poll, MIN_POLL_MS), MAX_POLL_MS)
            if poll > remaining_ms:
                if remaining_ms < MIN_POLL_MS:
                    raise Refused(pb.ILLEGAL_POLLING_TIME,
                                  f"the call's deadline leaves {remaining_ms} ms, less than "
                                  f"the shortest long poll ({MIN_POLL_MS} ms)")
                poll = remaining_ms
            poll = max(0, poll - 200)  # answered before the caller's deadline
            sub = subscription(topic_resource.name, request.filter_expression)
            batch = request.batch_size if request.batch_size > 0 else 32
            # Every queue of the topic on this broker, as the proxy pops (the client's queue
            # only says which broker): a FIFO group's queues out are skipped there.
            # A push consumer's messages stay invisible while it lives (the proxy renews
            # them): the pop renews them for this client until they are acked.
            result = await self.broker.pop.pop(
                request.group.name, topic_resource.name, -1, min(batch, 32), invisible,
                poll, sub, min_invisible_ms=1_000,
                owner=client.client_id if request.auto_renew else "")
        except Refused as exc:
            yield spb.ReceiveMessageResponse(status=exc.status)
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms()))
            return
        except PopError as exc:
            yield spb.ReceiveMessageResponse(status=status(POP_CODES.get(
                exc.kind, pb.BAD_REQUEST), str(exc)))
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms()))
            return
        except SqlError as exc:
            yield spb.ReceiveMessageResponse(status=status(pb.ILLEGAL_FILTER_EXPRESSION,
                                                           f"the SQL filter is bad: {exc}"))
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms()))
            return
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=fault("ReceiveMessage", exc))
            yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms()))
            return
        if not result.messages:
            yield spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND,
                                                           "no new message"))
        else:
            yield spb.ReceiveMessageResponse(status=status())
            namespace = topic_resource.resource_namespace
            for popped in result.messages:
                yield spb.ReceiveMessageResponse(message=to_message(
                    popped.record, popped.topic, namespace, receipt_handle=popped.handle,
                    delivery_attempt=popped.attempt, invisible_ms=popped.invisible_ms))
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms()))

    @answers(spb.AckMessageResponse, "AckMessage")
    async def AckMessage(self, request: spb.AckMessageRequest, context: Any
                         ) -> spb.AckMessageResponse:
        self._enter(context, [(request.topic.name, False, SUB), (request.group.name, True, SUB)])
        self._topic(request.topic)
        self._group(request.group)
        if not request.entries:
            raise Refused(pb.BAD_REQUEST, "no entry to ack")
        errors = await self.broker.pop.ack_many(
            request.group.name, request.topic.name,
            [e.receipt_handle for e in request.entries])
        entries = []
        for entry, error in zip(request.entries, errors, strict=True):
            entry_status = (status() if error is None else
                            status(POP_CODES.get(error.kind, pb.BAD_REQUEST), str(error)))
            entries.append(spb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                status=entry_status))
        codes = {e.status.code for e in entries}
        overall = (entries[0].status if len(codes) == 1
                   else status(pb.MULTIPLE_RESULTS, "the entries had different results"))
        return spb.AckMessageResponse(status=overall, entries=entries)

    @answers(spb.ChangeInvisibleDurationResponse, "ChangeInvisibleDuration")
    async def ChangeInvisibleDuration(self, request: spb.ChangeInvisibleDurationRequest,
                                      context: Any) -> spb.ChangeInvisibleDurationResponse:
        self._enter(context, [(request.topic.name, False, SUB), (request.group.name, True, SUB)])
        self._topic(request.topic)
        self._group(request.group)
        ms = request.invisible_duration.ToMilliseconds()
        if not 0 <= ms <= MAX_INVISIBLE_MS:
            raise Refused(pb.ILLEGAL_INVISIBLE_TIME,
                          f"the invisible duration is {ms} ms; it must be within "
                          f"0..{MAX_INVISIBLE_MS} ms")
        handle = await self.broker.pop.change_invisible(
            request.group.name, request.topic.name, request.receipt_handle, ms)
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle)

    @answers(spb.ForwardMessageToDeadLetterQueueResponse, "ForwardMessageToDeadLetterQueue")
    async def ForwardMessageToDeadLetterQueue(
            self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        self._enter(context, [(request.topic.name, False, SUB), (request.group.name, True, SUB)])
        self._topic(request.topic)
        self._group(request.group)
        await self.broker.pop.dead_letter(request.group.name, request.topic.name,
                                          request.receipt_handle, request.delivery_attempt)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status())


__all__ = ["AUTO_RENEW_INVISIBLE_MS", "MAX_POLL_MS", "MIN_POLL_MS", "MIN_RECEIVE_INVISIBLE_MS",
           "Receiving"]
