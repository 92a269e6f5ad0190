"""The rocketq client: producers and consumers (asyncio core, synchronous API on top)."""

from .allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateConsistentHash,
)
from .errors import (
    ArgumentTypeError,
    BrokerError,
    ClientError,
    ClientTimeoutError,
    ConnectionClosedError,
    InvalidArgumentError,
    MessageValidationError,
    NameServerError,
    NoMasterError,
    NotFoundError,
)
from .message import (
    Message,
    MessageQueue,
    MessageSelector,
    ReceivedMessage,
    SendResult,
    SendStatus,
    create_reply,
)
from .producer import select_by_hash
from .push import ConsumeResult
from .transaction import LocalTransactionState, TransactionListener, TransactionSendResult

__all__ = [
    "AllocateAveragely", "AllocateAveragelyByCircle", "AllocateByConfig",
    "AllocateConsistentHash", "BrokerError", "ClientError", "ConsumeResult", "Message",
    "MessageQueue", "MessageValidationError", "NameServerError", "ReceivedMessage",
    "SendResult", "SendStatus", "select_by_hash", "LocalTransactionState",
    "TransactionListener", "TransactionSendResult", "MessageSelector", "create_reply",
    "ArgumentTypeError", "ClientTimeoutError", "ConnectionClosedError", "InvalidArgumentError",
    "NoMasterError", "NotFoundError",
]
