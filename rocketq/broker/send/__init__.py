"""The send path (RocketMQ's SendMessageProcessor): SEND_MESSAGE, SEND_MESSAGE_V2,
SEND_BATCH_MESSAGE and SEND_REPLY_MESSAGE, from the request to the store and the answer.

- ``processor``: ``SendProcessor``, its ``handle`` a pipeline of named steps (the broker's
  and the topic's permission, the header's integers, the topic, the queue, the message),
  the appends of one loop iteration's sends together, and ``put_one`` for the gRPC endpoint.
- ``header``: the send header's field names (long and V2), its Java-typed integers, the
  sender's address.
- ``transforms``: where a single message is stored (dead letter, half, delay, timer).
- ``answers``: what a send is answered, and the reply pushed to its requester.

``SendRefused`` and ``store_refusal`` live in ``broker.put_outcomes``, below this room and
the transactions room that also stores for clients; they are re-exported here.

May import: protocol, store, remoting, broker.clients, broker.config, broker.put_outcomes,
broker.schedule, broker.send_back, broker.stats, broker.subscription_groups, broker.topics,
broker.transactions.
"""

from ..put_outcomes import SendRefused, store_refusal
from .processor import SendProcessor

__all__ = ["SendProcessor", "SendRefused", "store_refusal"]
