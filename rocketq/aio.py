"""asyncio API: the same producers and consumers as ``rocketq``, as coroutines.

    from rocketq.aio import Producer, PushConsumer, PullConsumer, SimpleConsumer
    async with Producer("pg", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"hi"))

A PushConsumer listener may be a coroutine function; it then runs on the event loop.

Every name of ``rocketq`` is here too: the six client classes are their asyncio versions,
everything else (messages, errors, selectors, allocation strategies) is the same object.
"""

from ._version import __version__
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
from .client.admin import AsyncAdmin as Admin
from .client.admin import ConsumerProgress, QueueProgress
from .client.producer import AsyncProducer as Producer
from .client.pull import AsyncPullConsumer as PullConsumer
from .client.push import AsyncPushConsumer as PushConsumer
from .client.simple import AsyncSimpleConsumer as SimpleConsumer
from .client.transaction import AsyncTransactionProducer as TransactionProducer

__all__ = [
    "Admin", "AllocateAveragely", "AllocateAveragelyByCircle", "AllocateByConfig",
    "AllocateConsistentHash", "ArgumentTypeError", "BrokerError", "ClientError",
    "ClientTimeoutError", "ConnectionClosedError", "ConsumeResult", "ConsumerProgress",
    "InvalidArgumentError", "LocalTransactionState", "Message", "MessageQueue",
    "MessageSelector", "MessageValidationError", "NameServerError", "NoMasterError",
    "NotFoundError", "Producer", "PullConsumer", "PushConsumer", "QueueProgress",
    "ReceivedMessage", "SendResult", "SendStatus", "SimpleConsumer", "TransactionListener",
    "TransactionProducer", "TransactionSendResult", "__version__", "create_reply",
    "select_by_hash",
]
