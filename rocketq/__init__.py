"""rocketq: a message queue that does what Apache RocketMQ does, in Python.

    from rocketq import Producer, Message, PushConsumer, PullConsumer, SimpleConsumer, ConsumeResult

The classes here are synchronous; ``rocketq.aio`` has the asyncio versions.

The client is imported on first use of one of these names (PEP 562), so the broker, the
store and the protocol modules can be imported without loading the client and its remoting.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .client import (
        AllocateAveragely,
        AllocateAveragelyByCircle,
        AllocateByConfig,
        AllocateConsistentHash,
        ArgumentTypeError,
        BrokerError,
        ClientError,
        ClientTimeoutError,
        ConnectionClosedError,
        ConsumeResult,
        InvalidArgumentError,
        LocalTransactionState,
        Message,
        MessageQueue,
        MessageSelector,
        MessageValidationError,
        NameServerError,
        NoMasterError,
        NotFoundError,
        ReceivedMessage,
        SendResult,
        SendStatus,
        TransactionListener,
        TransactionSendResult,
        create_reply,
        select_by_hash,
    )
    from .client.admin import ConsumerProgress, QueueProgress
    from .client.sync import Producer, TransactionProducer
    from .client.sync_admin import Admin
    from .client.sync_pull import PullConsumer
    from .client.sync_push import PushConsumer
    from .client.sync_simple import SimpleConsumer

#: Where each exported name lives; the synchronous classes come from ``client.sync`` (the
#: producers), ``client.sync_push``, ``client.sync_pull``, ``client.sync_simple`` and
#: ``client.sync_admin``.
_SOURCES = {
    **dict.fromkeys([
        "AllocateAveragely", "AllocateAveragelyByCircle", "AllocateByConfig",
        "AllocateConsistentHash", "ArgumentTypeError", "BrokerError", "ClientError",
        "ClientTimeoutError", "ConnectionClosedError", "ConsumeResult", "InvalidArgumentError",
        "LocalTransactionState", "Message", "MessageQueue", "MessageSelector",
        "MessageValidationError", "NameServerError", "NoMasterError", "NotFoundError",
        "ReceivedMessage",
        "SendResult", "SendStatus", "TransactionListener", "TransactionSendResult",
        "create_reply", "select_by_hash"], ".client"),
    **dict.fromkeys(["Producer", "TransactionProducer"], ".client.sync"),
    "PullConsumer": ".client.sync_pull",
    "PushConsumer": ".client.sync_push",
    "SimpleConsumer": ".client.sync_simple",
    "Admin": ".client.sync_admin",
    **dict.fromkeys(["ConsumerProgress", "QueueProgress"], ".client.admin"),
}

__all__ = [
    "Admin", "AllocateAveragely", "AllocateAveragelyByCircle", "AllocateByConfig",
    "AllocateConsistentHash", "ArgumentTypeError", "BrokerError", "ClientError",
    "ClientTimeoutError", "ConnectionClosedError", "ConsumeResult", "ConsumerProgress",
    "InvalidArgumentError", "LocalTransactionState", "Message", "MessageQueue",
    "MessageSelector", "MessageValidationError", "NameServerError", "NoMasterError",
    "NotFoundError", "Producer",
    "PullConsumer", "PushConsumer", "QueueProgress", "ReceivedMessage", "SendResult",
    "SendStatus", "SimpleConsumer", "TransactionListener",
    "TransactionProducer", "TransactionSendResult", "__version__", "create_reply",
    "select_by_hash",
]


def __getattr__(name: str) -> Any:
    """Import the client the first time one of its exported names is looked up."""
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(source, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
