"""Administration (RocketMQ's MQAdminImpl and what mqadmin and the dashboard do): every admin
operation lives here once, and the ``rocketq admin`` command and the dashboard are faces of
it. ``AsyncAdmin`` is assembled from one part per noun:

- ``cluster``: the brokers, their status and settings;
- ``topics``: topics, their routes and queue offsets;
- ``groups``: consumer groups, their members, producers' members, consumer progress;
- ``offsets``: offsets reset by time, skipped to the end, searched by time;
- ``messages``: test sends, messages by id, key and time, dead letters;
- ``trace``: whether each group consumed a message;
- ``acl``: the accounts of the brokers' ACL files;

over ``base``: the connection, the NameServer's cluster table, a checked request.
"""

from .acl import AclAdmin, AclConfig, AclUser
from .base import TOOLS_CONSUMER_GROUP
from .cluster import BrokerStatus, ClusterAdmin
from .groups import Connection, ConsumerProgress, GroupAdmin, GroupInfo, QueueProgress
from .messages import ADMIN_PRODUCER_GROUP
from .offsets import QUEUE_END
from .topics import DEFAULT_TOPIC_QUEUES, MESSAGE_TYPES, QueueStatus, TopicInfo
from .trace import Delivery, TraceAdmin, TrackType


class AsyncAdmin(TraceAdmin, GroupAdmin, ClusterAdmin, AclAdmin):
    """Topics, groups, offsets, messages, brokers and ACL accounts across the brokers a
    NameServer knows. Use ``async with AsyncAdmin(namesrv)``; ``rocketq.Admin`` is the same
    with plain calls.

    Raises:
        ArgumentTypeError: ``namesrv`` is not a str.
        InvalidArgumentError: ``namesrv`` is not ``host:port[;host:port...]``.
    """


__all__ = [
    "ADMIN_PRODUCER_GROUP", "DEFAULT_TOPIC_QUEUES", "MESSAGE_TYPES", "QUEUE_END",
    "TOOLS_CONSUMER_GROUP", "AclConfig", "AclUser", "AsyncAdmin", "BrokerStatus",
    "Connection", "ConsumerProgress", "Delivery", "GroupInfo", "QueueProgress", "QueueStatus",
    "TopicInfo", "TrackType",
]
