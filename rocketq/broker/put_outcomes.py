"""What a put into the store is answered, shared by every path that stores a message for a
client (SEND_MESSAGE, the exactly-once sinks' SINK_PREPARE, the gRPC endpoint).

A put either lands, answered by the response code of its ``PutStatus`` (all but SUCCESS
still mean "stored on the master"), or is refused by the store with an error, answered by
the refusal :func:`store_refusal` names; any other exception is a fault and is raised again.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Protocol

from ..protocol import ResponseCode
from ..store import DiskFullError, MessageIllegalError, PutStatus
from ..store.errors import (
    InSyncReplicasNotEnoughError,
    SlaveNotWritableError,
    StoreClosedError,
)

log = logging.getLogger("rocketq.broker")

#: What a send is answered (all but SUCCESS still mean "stored on the master").
STATUS_CODES = {PutStatus.PUT_OK: ResponseCode.SUCCESS,
                PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
                PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
                PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT}


class SendRefused(Exception):
    """A message the broker will not store: ``code`` is the response code to answer with."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


class _LogsDiskFull(Protocol):
    #: When a refusal for a full disk was last logged (time.monotonic()).
    _disk_full_logged: float


def store_refusal(exc: Exception, processor: _LogsDiskFull | None = None) -> SendRefused:
    """What to answer for a put the store refused (``processor`` logs a full disk, once in
    10 s); raises ``exc`` again when it is not a refusal but a fault."""
    if isinstance(exc, SendRefused):
        return exc
    if isinstance(exc, MessageIllegalError):
        return SendRefused(ResponseCode.MESSAGE_ILLEGAL, str(exc))
    if isinstance(exc, SlaveNotWritableError):
        # RocketMQ answers a send to a slave the same way (PutMessageStatus
        # SERVICE_NOT_AVAILABLE: "message store is slave mode").
        return SendRefused(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc))
    if isinstance(exc, InSyncReplicasNotEnoughError):
        # RocketMQ's answer, word for word: a failure the client may resend elsewhere.
        return SendRefused(ResponseCode.SYSTEM_ERROR, str(exc))
    if isinstance(exc, DiskFullError):
        # RocketMQ answers a store that is not writable the same way; the remark says the
        # disk is full and which directory, and the client may send to another broker.
        now = time.monotonic()
        if processor is not None and now - processor._disk_full_logged >= 10:
            processor._disk_full_logged = now
            log.error("send refused (and any more for 10 s, unlogged): %s", exc)
        return SendRefused(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc))
    if isinstance(exc, StoreClosedError):
        return SendRefused(ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is shutting down")
    if isinstance(exc, (struct.error, OverflowError, ValueError)):
        # A value the record cannot hold that no check before caught: the sender's error,
        # answered as such; the broker logs no traceback for it.
        return SendRefused(ResponseCode.MESSAGE_ILLEGAL, f"the message cannot be stored: {exc}")
    raise exc
