"""Long-polling the brokers for a push consumer's queues (RocketMQ's PullMessageService and
the pulling half of DefaultMQPushConsumerImpl).

One task per owned queue pulls from the queue's next offset, hands the messages to the
consume service through ``deliver`` and reports the commit offset with each pull. Flow control
pauses a queue's pulls while its ProcessQueue holds too many messages or bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from ..protocol import PullSysFlag, RemotingCommand, ResponseCode
from ..protocol.filter import Subscription
from .message import MessageQueue, ReceivedMessage
from .offset_store import OffsetStore
from .process_queue import ProcessQueue
from .pulled import pulled_messages

log = logging.getLogger("rocketq.client")


#: One PULL_MESSAGE: (queue, offset, subscription, sysflag, commit offset, batch size,
#: suspend timeout) -> the response, or None after a failure and its back-off.
PullCall = Callable[[MessageQueue, int, Subscription, int, int, int, float],
                    Awaitable[RemotingCommand | None]]
#: Where pulled messages go: (the queue's ProcessQueue, the messages just put in it).
Deliver = Callable[[ProcessQueue, list[ReceivedMessage]], None]


class PullService:
    """Pulls every started ProcessQueue's messages until it is dropped or the service stops."""

    def __init__(self, pull: PullCall, offset_store: OffsetStore,
                 subscriptions: Callable[[], dict[str, Subscription]], deliver: Deliver, *,
                 commit_offsets: bool, pull_batch_size: int, suspend_timeout: float,
                 threshold_count: int, threshold_bytes: int) -> None:
        self.pull = pull
        self.offset_store = offset_store
        self.subscriptions = subscriptions
        self.deliver = deliver
        #: Clustering consumers report their commit offset with each pull.
        self.commit_offsets = commit_offsets
        self.pull_batch_size = pull_batch_size
        self.suspend_timeout = suspend_timeout
        self.threshold_count = threshold_count
        self.threshold_bytes = threshold_bytes
        self.running = True
        self._tasks: dict[ProcessQueue, asyncio.Task[None]] = {}

    def start(self, pq: ProcessQueue) -> None:
        """Begin pulling ``pq``'s queue from its next offset."""
        task = asyncio.get_running_loop().create_task(self._pull_loop(pq))
        self._tasks[pq] = task
        task.add_done_callback(lambda _: self._forget(pq, task))

    def stop(self, pq: ProcessQueue) -> None:
        """Stop pulling ``pq``'s queue (a pull in flight is abandoned)."""
        task = self._tasks.get(pq)
        if task is not None:
            task.cancel()

    def close(self) -> None:
        """Stop every pull."""
        self.running = False
        for task in list(self._tasks.values()):
            task.cancel()

    def _forget(self, pq: ProcessQueue, task: asyncio.Task[None]) -> None:
        if self._tasks.get(pq) is task:
            del self._tasks[pq]

    def flow_controlled(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` holds enough that pulling more should wait for the listener."""
        return pq.count >= self.threshold_count or pq.cached_bytes >= self.threshold_bytes

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        mq = pq.mq
        sub = self.subscriptions().get(mq.topic)
        if sub is None:
            return
        while self.running and not pq.dropped:
            if self.flow_controlled(pq):
                await asyncio.sleep(0.05)  # flow control: let the listener catch up
                continue
            sysflag = PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION
            commit = self.offset_store.read_memory(mq) if self.commit_offsets else None
            if commit is not None and commit > 0:
                sysflag |= PullSysFlag.COMMIT_OFFSET
            response = await self.pull(mq, pq.next_offset, sub, sysflag, commit or 0,
                                       self.pull_batch_size, self.suspend_timeout)
            if response is None:
                continue
            if pq.dropped:
                return
            pq.last_pull_timestamp = int(time.time() * 1000)
            await self._handle(pq, sub, response)

    async def _handle(self, pq: ProcessQueue, sub: Subscription,
                      response: RemotingCommand) -> None:
        """Act on one pull answer (RocketMQ's PullCallback)."""
        mq = pq.mq
        code = response.code
        ext = response.ext_fields
        if code == ResponseCode.SUCCESS:
            next_offset = int(ext.get("nextBeginOffset", pq.next_offset))
            messages = pulled_messages(response.body, mq.broker_name)
            if not sub.matches_all:
                messages = [m for m in messages if sub.matches_tags(m.tags)]
            pq.next_offset = next_offset
            if messages:
                pq.put(messages)
                self.deliver(pq, messages)
            else:
                pq.skip_to(next_offset)
                self._commit_if_idle(pq)
        elif code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            pq.next_offset = int(ext.get("nextBeginOffset", pq.next_offset))
            pq.skip_to(pq.next_offset)
            self._commit_if_idle(pq)
        elif code == ResponseCode.PULL_OFFSET_MOVED:
            moved = int(ext.get("nextBeginOffset", pq.next_offset))
            log.warning("offset of %s moved from %d to %d", mq, pq.next_offset, moved)
            pq.next_offset = moved
            pq.skip_to(moved)
            self.offset_store.update(mq, moved)
            await self.offset_store.persist([mq])
        else:
            log.warning("pull from %s refused: %s (code %d); retrying in 3 s", mq,
                        response.remark, code)
            await asyncio.sleep(3)

    def _commit_if_idle(self, pq: ProcessQueue) -> None:
        """Nothing held: the queue's commit offset follows the pulls (filtered messages)."""
        if not pq.messages:
            self.offset_store.update(pq.mq, pq.max_offset + 1, increase_only=True)
