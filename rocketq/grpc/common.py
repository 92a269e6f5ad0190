"""What the parts of the MessagingService share: the ``Status`` every answer carries (the
v2 codes a refusal, a POP error or a fault maps to, and ``answers``, which puts any failure of
a unary handler there), and the small readers of a request: the peer's host, the
``authorization`` header, a filter expression, the queue of a message group.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from ..broker.pop import PopError
from ..protocol import ResponseCode
from ..protocol.filter import EXPRESSION_SQL92, EXPRESSION_TAG, Subscription
from .proto import definition_pb2 as pb

log = logging.getLogger("rocketq.grpc")

#: Remoting response code -> v2 code (the proxy's ResponseBuilder).
REMOTING_CODES = {
    ResponseCode.SUCCESS: pb.OK, ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND, ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST, ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.INTERNAL_SERVER_ERROR,
}
#: PopError kind -> v2 code.
POP_CODES = {"handle": pb.INVALID_RECEIPT_HANDLE, "expired": pb.INVALID_RECEIPT_HANDLE,
             "argument": pb.BAD_REQUEST, "topic": pb.TOPIC_NOT_FOUND,
             "group": pb.CONSUMER_GROUP_NOT_FOUND, "permission": pb.FORBIDDEN}


def answers(response: Any, name: str) -> Any:
    """A unary handler that answers every failure in its response's Status: a refusal with
    its code, a POP error with its code, anything else as the proxy answers a fault."""
    def wrap(handler: Any) -> Any:
        @functools.wraps(handler)
        async def serve(self: Any, request: Any, context: Any) -> Any:
            try:
                return await handler(self, request, context)
            except Refused as exc:
                return response(status=exc.status)
            except PopError as exc:
                return response(status=status(POP_CODES.get(exc.kind, pb.BAD_REQUEST),
                                              str(exc)))
            except Exception as exc:
                return response(status=fault(name, exc))
        return serve
    return wrap


def status(code: int = pb.OK, message: str = "OK") -> pb.Status:
    """The Status of an answer (OK by default)."""
    return pb.Status(code=code, message=message)


class Refused(Exception):
    """A request answered with ``code`` and ``message`` in its Status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def status(self) -> pb.Status:
        return status(self.code, str(self))


def fault(what: str, exc: Exception) -> pb.Status:
    """A failure that is not the request's fault (a full disk, a broker that stops)."""
    from ..broker.put_outcomes import store_refusal

    try:
        refused = store_refusal(exc)
    except Exception:
        log.exception("gRPC %s failed", what)
        return status(pb.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
    return status(REMOTING_CODES.get(refused.code, pb.INTERNAL_SERVER_ERROR), str(refused))


def now_ms() -> int:
    """Now, in ms since the epoch (an answer's delivery timestamp)."""
    return int(time.time() * 1000)


def subscription(topic: str, expression: pb.FilterExpression) -> Subscription:
    """A request's filter expression as the broker's Subscription; SqlError for a bad SQL92
    expression."""
    if expression.type == pb.SQL:
        from ..protocol.sql92 import compile_selector
        compile_selector(expression.expression)  # SqlError: answered by the caller
        return Subscription.parse(topic, expression.expression, EXPRESSION_SQL92)
    return Subscription.parse(topic, expression.expression or "*", EXPRESSION_TAG)


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash, as the proxy picks a message group's queue."""
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        nxt = int((candidate + 1) / (((state >> 33) + 1) / 2147483648.0))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def peer_host(context: Any) -> str:
    """The host a call came from (the ACL's remote address, a message's born host)."""
    peer = context.peer() or ""
    # "ipv4:127.0.0.1:5555" or "ipv6:[::1]:5555"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return rest or peer


def is_ipv4(host: str) -> bool:
    """Whether ``host`` is a dotted IPv4 address (else a route names it as a domain)."""
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and 0 <= int(p) <= 255 for p in parts)


def parse_authorization(value: str) -> tuple[str | None, str | None]:
    """``MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>``."""
    if not value:
        return None, None
    _, _, rest = value.partition(" ")
    fields = {}
    for part in rest.split(","):
        key, _, val = part.strip().partition("=")
        fields[key.strip()] = val.strip()
    credential = fields.get("Credential") or None
    if credential and "/" in credential:
        credential = credential.split("/", 1)[0]
    return credential, fields.get("Signature") or None


__all__ = [
    "POP_CODES", "REMOTING_CODES", "Refused", "answers", "consistent_hash", "fault",
    "is_ipv4", "now_ms", "parse_authorization", "peer_host", "status", "subscription",
]
