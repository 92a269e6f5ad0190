"""Client exceptions: every one derives from ``ClientError`` (``rocketq/errors.py``), and the
ones that refuse an argument are also the TypeError or ValueError Python code expects."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ClientError, ClientTimeoutError
from ..remoting.connection import ConnectionClosedError


class NameServerError(ClientError):
    """No NameServer could answer."""


class BrokerError(ClientError):
    """A broker answered with an error code (RocketMQ's MQBrokerException)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code


class NotFoundError(ClientError):
    """What was asked about does not exist: the admin client's answer for a topic, consumer
    group, message, cluster or broker the cluster does not have (a refusal or an unreachable
    broker is another ClientError)."""


class InvalidArgumentError(ClientError, ValueError):
    """An argument whose value the client refuses (a group or NameServer address that breaks
    RocketMQ's rules, a delay out of range); the message names the argument."""


class ArgumentTypeError(ClientError, TypeError):
    """An argument of the wrong type (a body that is not bytes, a send given something other
    than a Message); the message names the argument."""


class MessageValidationError(InvalidArgumentError):
    """A message the client refuses to send as it is: nothing was sent."""


class NoMasterError(ClientError):
    """The topic has a route, but none of its broker groups has a master to send to right now
    (a master stopped, or a failover is in progress). Sends wait for a master within their
    timeout before they raise this."""

    def __init__(self, topic: str, brokers: Sequence[str], message: str) -> None:
        super().__init__(message)
        self.topic = topic
        #: The broker groups of the route that have no master.
        self.brokers = list(brokers)


__all__ = [
    "ArgumentTypeError", "BrokerError", "ClientError", "ClientTimeoutError",
    "ConnectionClosedError", "InvalidArgumentError", "MessageValidationError", "NameServerError",
    "NoMasterError", "NotFoundError",
]
