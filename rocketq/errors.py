"""The root of the errors the client raises, kept apart from the client so the remoting layer
can derive its errors from it without importing the client.

Users import these names from ``rocketq`` (or ``rocketq.aio``); ``rocketq.client.errors``
re-exports them with the client's other errors.
"""

from __future__ import annotations


class ClientError(Exception):
    """A request the client could not complete (RocketMQ's MQClientException): every error a
    client method raises derives from it, so ``except rocketq.ClientError`` catches them all."""


class ClientTimeoutError(ClientError, TimeoutError):
    """No answer within the time the call allowed; also a TimeoutError."""


__all__ = ["ClientError", "ClientTimeoutError"]
