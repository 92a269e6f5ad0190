"""Exceptions the message store raises. Each message says what went wrong and what to do."""

from __future__ import annotations

import errno

from ..dirlock import DirectoryLockedError


class StoreError(Exception):
    """Base class of message store errors."""


class MessageIllegalError(StoreError, ValueError):
    """A message the store refuses as it is: nothing was written."""


class MessageTooLargeError(MessageIllegalError):
    """The body is over ``maxMessageSize``."""


class PropertiesTooLargeError(MessageIllegalError):
    """The encoded properties are over 32,767 bytes."""


class DiskFullError(StoreError, OSError):
    """The disk has no room for a new mapped file (ENOSPC), or the store refuses puts
    because a disk is over ``diskSpaceWarningLevelRatio``. Nothing was written."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that found no room (ENOSPC, or a quota: EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class StoreCorruptError(StoreError):
    """Files on disk that the store cannot make sense of (wrong sizes, gaps between files)."""


class SlaveNotWritableError(StoreError):
    """A slave's store takes messages only from its master's HA stream."""


class InSyncReplicasNotEnoughError(StoreError):
    """Controller mode: fewer replicas in sync than ``minInSyncReplicas``; nothing was
    written (RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH)."""


class StoreClosedError(StoreError):
    """The store was shut down."""


class StoreLockedError(StoreError, DirectoryLockedError):
    """Another process (or another open in this one) holds the store root's ``lock`` file: it
    runs on this store, and a second writer would corrupt it. Nothing was touched.
    ``directory``, ``pid`` and ``owner`` name the other side (see rocketq.dirlock)."""
