"""Client exceptions."""

from __future__ import annotations


class ClientError(Exception):
    """A request the client could not complete (RocketMQ's MQClientException)."""


class NameServerError(ClientError):
    """No NameServer could answer."""


class BrokerError(ClientError):
    """A broker answered with an error code (RocketMQ's MQBrokerException)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code


class MessageValidationError(ClientError, ValueError):
    """A message the client refuses to send as it is: nothing was sent."""
