"""rocketq: a message queue that does what Apache RocketMQ does, in Python.

    from rocketq import Producer, Message, PushConsumer, PullConsumer, ConsumeResult

The classes here are synchronous; ``rocketq.aio`` has the asyncio versions.
"""

__version__ = "0.1.0"

from .client import (  # noqa: E402
    BrokerError,
    ClientError,
    ConsumeResult,
    LocalTransactionState,
    Message,
    MessageQueue,
    MessageSelector,
    MessageValidationError,
    ReceivedMessage,
    SendResult,
    SendStatus,
    TransactionListener,
    TransactionSendResult,
    create_reply,
    select_by_hash,
)
from .client.sync import (  # noqa: E402
    Admin,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionProducer,
)

__all__ = [
    "Admin", "BrokerError", "ClientError", "ConsumeResult", "LocalTransactionState", "Message",
    "MessageQueue", "MessageSelector", "MessageValidationError", "Producer", "PullConsumer",
    "PushConsumer",
    "ReceivedMessage", "SendResult", "SendStatus", "TransactionListener", "TransactionProducer",
    "TransactionSendResult", "__version__", "create_reply", "select_by_hash",
]
