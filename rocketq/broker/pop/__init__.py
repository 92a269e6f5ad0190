"""POP consumption (RocketMQ 5's PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor, PopReviveService and PopLongPollingService): messages handed
out with an invisible time, acked one by one, revived when not acked in time, and FIFO
groups that read a queue only while nothing popped from it is in flight.

- ``service``: ``PopService``, the state both faces share (checkpoints, FIFO queues) and the
  pop.
- ``acks``: the ack (batched per turn of the event loop), the change of invisible time, the
  move of a popped message to the dead-letter topic.
- ``records``: the values it keeps and writes (receipt handles, checkpoints, FIFO state) and
  the constants and topic names POP shares with the gRPC endpoint; no I/O.
- ``revive``: replay of the revive topic, revival into the pop retry or dead-letter topic,
  FIFO reopening, renewal of checkpoints popped for a living owner.
- ``waiting``: pops that found nothing, waiting for their topic to grow.
- ``requests``: the remoting face (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME,
  BATCH_ACK_MESSAGE); the gRPC face is ``rocketq.grpc``.

The names the broker and the gRPC endpoint use are exported here.

May import: protocol, store, remoting, broker.config, broker.offsets, broker.send_back,
broker.stats, broker.subscription_groups, broker.topics.
"""

from .records import MAX_INVISIBLE_MS, PopError
from .requests import PopRequests
from .service import PopService

__all__ = ["MAX_INVISIBLE_MS", "PopError", "PopRequests", "PopService"]
