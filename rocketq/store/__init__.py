"""The broker's message store: CommitLog, ConsumeQueue and IndexFile on real files.

No networking here. See ``MessageStore`` for the entry point.
"""

from .config import ASYNC_FLUSH, SYNC_FLUSH, MessageStoreConfig
from .errors import (
    DiskFullError,
    InSyncReplicasNotEnoughError,
    MessageIllegalError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    SlaveNotWritableError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
)
from .message_store import GetResult, GetStatus, MessageStore
from .messages import BatchMessage, PutResult, PutStatus, StoreMessage

__all__ = [
    "ASYNC_FLUSH", "SYNC_FLUSH", "BatchMessage", "DiskFullError", "GetResult", "GetStatus",
    "InSyncReplicasNotEnoughError", "MessageIllegalError", "MessageStore",
    "MessageStoreConfig", "MessageTooLargeError",
    "PropertiesTooLargeError", "PutResult", "PutStatus", "SlaveNotWritableError",
    "StoreClosedError",
    "StoreCorruptError", "StoreError", "StoreMessage",
]
