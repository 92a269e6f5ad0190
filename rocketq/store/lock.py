"""The store root's ``lock`` file (RocketMQ's DefaultMessageStore ``lock``): a MessageStore
holds it from start to close, so that a second broker, standalone or store on the same files
is refused (StoreLockedError) before it recovers or writes anything. The lock itself is
``rocketq.dirlock``'s, which the controller's Raft directory uses too."""

from __future__ import annotations

from ..dirlock import LOCK_FILE, DirectoryLock
from .errors import StoreLockedError

__all__ = ["LOCK_FILE", "StoreLock", "StoreLockedError"]


class StoreLock(DirectoryLock):
    """The exclusive lock on a store root; a refused opener gets StoreLockedError."""

    what = "message store"
    error = StoreLockedError
