"""The store's side of replication (RocketMQ's DefaultMessageStore on an HA slave and in
controller mode): its role, master or slave; the bytes of the master's CommitLog a slave
writes as they are; the dispatch limit at the confirm offset (consumers never see a message
a failover could take back) and the confirm offset the checkpoint keeps; and the cut of a
demoted master's tail that its group never agreed on.

``Replication`` is a part of ``message_store.MessageStore``, and comes before
``Housekeeping`` among its bases: the housekeeper's flush asks for :meth:`confirm_offset`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .commitlog import CommitLog
from .config import ASYNC_MASTER, SLAVE, SYNC_MASTER, MessageStoreConfig
from .consumequeue import ConsumeQueueTable
from .dispatch import Dispatcher
from .dispatch_runner import DispatchRunner
from .errors import StoreClosedError
from .index import Index

log = logging.getLogger("rocketq.store")


class Replication:
    """Roles, replica bytes, the confirm offset and the cut tail: a part of
    :class:`MessageStore`, whose state (set in its ``__init__``) it reads and changes, and
    whose ``reput_offset`` and ``dispatch`` it uses."""

    config: MessageStoreConfig
    commitlog: CommitLog
    queues: ConsumeQueueTable
    index: Index
    dispatcher: DispatchRunner
    _dispatcher: Dispatcher
    running: bool
    on_truncate: list[Callable[[int], None]]
    _slave: bool
    _answers_when_safe: bool
    reput_offset: int
    dispatch: Callable[..., int]

    def append_replica(self, offset: int, data: bytes | memoryview) -> int:
        """Write bytes of the master's CommitLog (a slave's HA stream) at ``offset``; returns
        the new end. They are dispatched like appends."""
        if not self.running:
            raise StoreClosedError("the message store is closed")
        return self.commitlog.append_replica(offset, data)

    def limit_dispatch(self, limit: Callable[[], int] | None) -> None:
        """Dispatch no further than ``limit()`` (controller mode's confirmOffset: consumers
        never see a message a failover could take back); None lifts it. Call
        :meth:`dispatch_more` when the limit moves."""
        self.dispatcher.limit = limit

    def confirm_offset(self) -> int:
        """The confirm offset the checkpoint keeps (RocketMQ 5's confirmPhyOffset): the
        dispatch limit's value (a master's own confirmOffset, or the one a slave's master
        sent), never less than what is dispatched (a master without a limit confirms its
        whole log, and a slave that has not heard its new master yet keeps what it had).
        Read at each checkpoint flush, not per message."""
        reput = self.reput_offset
        limit = self.dispatcher.limit
        return reput if limit is None else max(reput, limit())

    def dispatch_more(self) -> None:
        """The dispatch limit moved: dispatch up to it (inline on the appending thread)."""
        self.dispatcher.on_append(self.commitlog.max_offset)

    def set_role(self, role: str) -> None:
        """Change this store's role (controller mode promotes and demotes brokers)."""
        if role not in (ASYNC_MASTER, SYNC_MASTER, SLAVE):
            raise ValueError(f"not a broker role: {role!r}")
        was_slave = self._slave
        self.config.brokerRole = role
        if was_slave and role != SLAVE:
            # Appends now assign queue offsets: take them from what the replicated log
            # built (RocketMQ's recoverTopicQueueTable on changeToMaster). A master's whole
            # log is its group's: no confirm offset holds its dispatch back here.
            self.dispatcher.limit = None
            self.dispatch()
            with self.commitlog.lock:
                self.commitlog.queue_offsets = self.queues.max_offsets()
                self.commitlog.queue_room = {}
        self._slave = self.config.is_slave
        self._answers_when_safe = self.config.answers_when_safe

    def truncate(self, offset: int) -> int:
        """Forget the CommitLog from ``offset`` on, and every ConsumeQueue unit that points
        there: a demoted master's tail that its group never agreed on (controller mode).
        Returns the new end, after calling the ``on_truncate`` hooks with it. Index entries
        of the records cut go too, so a query by key finds neither them nor the records
        that later reuse their offsets."""
        if not self.running:
            raise StoreClosedError("the message store is closed")
        with self.dispatcher.paused():
            with self.commitlog.lock:
                offset = max(self.commitlog.min_offset, min(offset, self.commitlog.max_offset))
                self.commitlog.files.truncate(offset)
                self._dispatcher.reput_offset = min(self._dispatcher.reput_offset, offset)
                self._dispatcher.indexed_to = min(self._dispatcher.indexed_to, offset - 1)
                self.queues.truncate_to_commitlog(offset)
                self.index.truncate(offset)
                self.commitlog.queue_offsets = self.queues.max_offsets()
                self.commitlog.queue_room = {}
            log.warning("CommitLog truncated at %d", offset)
            for hook in list(self.on_truncate):  # before anything new is dispatched
                try:
                    hook(offset)
                except Exception:
                    log.exception("truncation hook %r failed", hook)
        return offset
