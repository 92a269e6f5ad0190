"""The messages of one queue that a push consumer pulled and has not consumed yet (RocketMQ's
ProcessQueue).

The offset a consumer may commit for a queue is the smallest one still held here, or the one
after the last message pulled when nothing is held: messages consumed out of order (several
listener threads) never move the committed offset past one still being consumed, so a crash
re-delivers rather than loses.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from .message import MessageQueue, ReceivedMessage


class ProcessQueue:
    """Messages of one queue pulled but not yet consumed, in offset order."""

    def __init__(self, mq: MessageQueue, next_offset: int) -> None:
        self.mq = mq
        #: Where the next pull of the queue starts.
        self.next_offset = next_offset
        #: Offset -> message, in ascending offset order.
        self.messages: dict[int, ReceivedMessage] = {}
        self.cached_bytes = 0
        self.max_offset = next_offset - 1
        #: Set when the queue is given up or reset: pulls stop, late results are ignored.
        self.dropped = False
        #: Orderly consumption: whether this member holds the queue's lock on the broker.
        self.locked = False
        #: Wall-clock ms of the last pull answer and of the last consumed batch (running info).
        self.last_pull_timestamp = 0
        self.last_consume_timestamp = 0
        #: Orderly consumption: the batch handed to the listener and not committed yet.
        self._taken: list[ReceivedMessage] = []

    def put(self, messages: Sequence[ReceivedMessage]) -> None:
        """Hold pulled messages; one already held (by its offset) is kept as it is."""
        in_order = True
        for m in messages:
            if m.queue_offset not in self.messages:
                if self.messages and m.queue_offset < self.max_offset:
                    in_order = False
                self.messages[m.queue_offset] = m
                self.cached_bytes += len(m.body)
            if m.queue_offset > self.max_offset:
                self.max_offset = m.queue_offset
        if not in_order:
            self.messages = dict(sorted(self.messages.items()))

    def remove(self, messages: Sequence[ReceivedMessage]) -> int:
        """Forget consumed messages; return the offset that can now be committed."""
        self.last_consume_timestamp = int(time.time() * 1000)
        for m in messages:
            if self.messages.pop(m.queue_offset, None) is not None:
                self.cached_bytes -= len(m.body)
        return self.commit_offset

    @property
    def commit_offset(self) -> int:
        """The smallest offset still held, or the one after the last pulled message."""
        if self.messages:
            return next(iter(self.messages))
        return self.max_offset + 1

    def skip_to(self, offset: int) -> None:
        """Nothing was consumable up to ``offset`` (filtered out): move the commit point."""
        if not self.messages and offset - 1 > self.max_offset:
            self.max_offset = offset - 1

    # ------------------------------------------------------------------ orderly
    def take(self, n: int) -> list[ReceivedMessage]:
        """The first ``n`` messages in offset order, for an orderly listener. They stay held
        (and keep the commit offset where it is) until ``commit``; taking again without a
        commit hands out the same first messages, so a failed batch is retried before any
        message after it."""
        self._taken = [self.messages[o] for o in itertools.islice(self.messages, n)]
        return list(self._taken)

    def commit(self) -> int:
        """The taken batch was consumed: forget it; return the offset that can be committed."""
        taken, self._taken = self._taken, []
        return self.remove(taken)

    @property
    def count(self) -> int:
        return len(self.messages)
