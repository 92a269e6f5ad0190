"""The synchronous admin client: ``rocketq.Admin`` runs each ``rocketq.aio.Admin`` operation
on the client's background event loop (``client/sync.py``) and waits for it.

Each method has its twin's signature (a test compares them) and its twin's docstring, which
the class decorator below copies, so that what an operation does and raises is written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .admin import (
    ADMIN_PRODUCER_GROUP,
    DEFAULT_TOPIC_QUEUES,
    AclConfig,
    AclUser,
    AsyncAdmin,
    BrokerStatus,
    Connection,
    ConsumerProgress,
    Delivery,
    GroupInfo,
    QueueStatus,
    TopicInfo,
)
from .message import MessageQueue, ReceivedMessage, SendResult
from .sync import _LoopThread

if TYPE_CHECKING:
    import ssl

    from ..acl import Credentials

C = TypeVar("C", bound=type)


def _documented_by(twin: type) -> Any:
    """Give each public method of the class without a docstring its ``twin``'s."""
    def decorate(cls: C) -> C:
        for name, member in vars(cls).items():
            source = getattr(twin, name, None)
            if callable(member) and not member.__doc__ and source is not None:
                member.__doc__ = source.__doc__
        return cls
    return decorate


@_documented_by(AsyncAdmin)
class Admin:
    """Topics, groups, offsets, messages, brokers and ACL accounts, with plain calls; see
    ``rocketq.aio.Admin`` (``AsyncAdmin``), whose docstrings each method shares.

    >>> with Admin(namesrv="127.0.0.1:9876") as admin:                # doctest: +SKIP
    ...     admin.create_topic("Orders", queues=8)

    Raises:
        ArgumentTypeError: ``namesrv`` is not a str.
        InvalidArgumentError: ``namesrv`` is not ``host:port[;host:port...]``.
    """

    def __init__(self, namesrv: str, *,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None) -> None:
        self._loop = _LoopThread.get()
        self._async = self._loop.create(
            lambda: AsyncAdmin(namesrv, credentials=credentials, tls=tls))

    def close(self) -> None:
        self._loop.run(self._async.close())

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ cluster
    def masters(self, cluster: str | None = None) -> dict[str, str]:
        return self._loop.run(self._async.masters(cluster))

    def broker_addresses(self, cluster: str | None = None) -> list[str]:
        return self._loop.run(self._async.broker_addresses(cluster))

    def cluster(self) -> list[BrokerStatus]:
        return self._loop.run(self._async.cluster())

    def broker_config(self, address: str) -> dict[str, str]:
        return self._loop.run(self._async.broker_config(address))

    def update_broker_config(self, address: str, values: dict[str, str]) -> None:
        return self._loop.run(self._async.update_broker_config(address, values))

    # ------------------------------------------------------------------ topics
    def create_topic(self, topic: str, queues: int = DEFAULT_TOPIC_QUEUES, *,
                     cluster: str | None = None, perm: int = 6, order: bool = False,
                     message_type: str | None = None) -> dict[str, str]:
        return self._loop.run(self._async.create_topic(
            topic, queues, cluster=cluster, perm=perm, order=order, message_type=message_type))

    def update_topic(self, name: str, *, read_queues: int | None = None,
                     write_queues: int | None = None, perm: int | None = None,
                     message_type: str | None = None) -> list[str]:
        return self._loop.run(self._async.update_topic(
            name, read_queues=read_queues, write_queues=write_queues, perm=perm,
            message_type=message_type))

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        return self._loop.run(self._async.delete_topic(topic, cluster=cluster))

    def list_topics(self) -> list[str]:
        return self._loop.run(self._async.list_topics())

    def topics(self) -> list[TopicInfo]:
        return self._loop.run(self._async.topics())

    def topic(self, name: str) -> TopicInfo:
        return self._loop.run(self._async.topic(name))

    def topic_route(self, topic: str) -> dict[str, Any]:
        return self._loop.run(self._async.topic_route(topic))

    def topic_status(self, topic: str) -> list[QueueStatus]:
        return self._loop.run(self._async.topic_status(topic))

    # ------------------------------------------------------------------ groups
    def group_table(self, *, brokers: list[str] | None = None,
                    cluster: str | None = None) -> dict[str, list[GroupInfo]]:
        return self._loop.run(self._async.group_table(brokers=brokers, cluster=cluster))

    def groups(self) -> list[GroupInfo]:
        return self._loop.run(self._async.groups())

    def group(self, name: str) -> GroupInfo:
        return self._loop.run(self._async.group(name))

    def create_group(self, group: str, *, retry_max_times: int | None = None,
                     retry_queues: int | None = None, consume_enable: bool | None = None,
                     broadcast_enable: bool | None = None,
                     consume_from_min_enable: bool | None = None,
                     notify_enable: bool | None = None, fifo: bool | None = None,
                     broker_id: int | None = None, slow_broker_id: int | None = None,
                     brokers: list[str] | None = None,
                     cluster: str | None = None) -> list[str]:
        return self._loop.run(self._async.create_group(
            group, retry_max_times=retry_max_times, retry_queues=retry_queues,
            consume_enable=consume_enable, broadcast_enable=broadcast_enable,
            consume_from_min_enable=consume_from_min_enable, notify_enable=notify_enable,
            fifo=fifo, broker_id=broker_id, slow_broker_id=slow_broker_id, brokers=brokers,
            cluster=cluster))

    def update_group(self, group: str, *, retry_max_times: int | None = None,
                     retry_queues: int | None = None, consume_enable: bool | None = None,
                     broadcast_enable: bool | None = None,
                     consume_from_min_enable: bool | None = None,
                     notify_enable: bool | None = None, fifo: bool | None = None,
                     broker_id: int | None = None, slow_broker_id: int | None = None,
                     brokers: list[str] | None = None,
                     cluster: str | None = None) -> list[str]:
        return self._loop.run(self._async.update_group(
            group, retry_max_times=retry_max_times, retry_queues=retry_queues,
            consume_enable=consume_enable, broadcast_enable=broadcast_enable,
            consume_from_min_enable=consume_from_min_enable, notify_enable=notify_enable,
            fifo=fifo, broker_id=broker_id, slow_broker_id=slow_broker_id, brokers=brokers,
            cluster=cluster))

    def delete_group(self, group: str, *, remove_offset: bool = False,
                     brokers: list[str] | None = None,
                     cluster: str | None = None) -> list[str]:
        return self._loop.run(self._async.delete_group(
            group, remove_offset=remove_offset, brokers=brokers, cluster=cluster))

    def consumer_connections(self, group: str) -> list[Connection]:
        return self._loop.run(self._async.consumer_connections(group))

    def producer_connections(self, group: str) -> list[Connection]:
        return self._loop.run(self._async.producer_connections(group))

    def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        return self._loop.run(self._async.consumer_progress(group, topic))

    # ------------------------------------------------------------------ offsets
    def reset_offset(self, group: str, topic: str, timestamp_ms: int, *,
                     force: bool = True) -> dict[MessageQueue, int]:
        return self._loop.run(self._async.reset_offset(group, topic, timestamp_ms,
                                                       force=force))

    def skip_accumulated(self, group: str, topic: str) -> dict[MessageQueue, int]:
        return self._loop.run(self._async.skip_accumulated(group, topic))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._loop.run(self._async.search_offset(mq, timestamp_ms))

    # ------------------------------------------------------------------ messages
    def send_message(self, topic: str, body: bytes, *, tags: str | None = None,
                     keys: str | list[str] | None = None,
                     producer_group: str = ADMIN_PRODUCER_GROUP) -> SendResult:
        return self._loop.run(self._async.send_message(
            topic, body, tags=tags, keys=keys, producer_group=producer_group))

    def message_by_id(self, msg_id: str, topic: str | None = None) -> ReceivedMessage:
        return self._loop.run(self._async.message_by_id(msg_id, topic))

    def view_message(self, offset_msg_id: str) -> ReceivedMessage:
        return self._loop.run(self._async.view_message(offset_msg_id))

    def query_messages(self, topic: str, key: str, *, max_num: int = 32, begin: int = 0,
                       end: int | None = None, unique: bool = False) -> list[ReceivedMessage]:
        return self._loop.run(self._async.query_messages(
            topic, key, max_num=max_num, begin=begin, end=end, unique=unique))

    def query_message_by_unique_key(self, topic: str, msg_id: str) -> ReceivedMessage:
        return self._loop.run(self._async.query_message_by_unique_key(topic, msg_id))

    def messages_by_time(self, topic: str, begin_ms: int, end_ms: int, *,
                         max_num: int = 64) -> list[ReceivedMessage]:
        return self._loop.run(self._async.messages_by_time(topic, begin_ms, end_ms,
                                                           max_num=max_num))

    def dlq_messages(self, group: str, *, max_num: int = 32) -> list[ReceivedMessage]:
        return self._loop.run(self._async.dlq_messages(group, max_num=max_num))

    def resend_dlq(self, group: str, msg_id: str) -> SendResult:
        return self._loop.run(self._async.resend_dlq(group, msg_id))

    def message_trace(self, topic: str, msg_id: str) -> list[Delivery]:
        return self._loop.run(self._async.message_trace(topic, msg_id))

    # ------------------------------------------------------------------ ACL
    def acl_config(self, *, broker: str | None = None) -> AclConfig:
        return self._loop.run(self._async.acl_config(broker=broker))

    def acl_users(self, *, broker: str | None = None) -> list[AclUser]:
        return self._loop.run(self._async.acl_users(broker=broker))

    def update_acl_user(self, access_key: str, *, secret_key: str | None = None,
                        white_remote_address: str | None = None, admin: bool | None = None,
                        default_topic_perm: str | None = None,
                        default_group_perm: str | None = None,
                        topic_perms: Mapping[str, str] | None = None,
                        group_perms: Mapping[str, str] | None = None,
                        brokers: list[str] | None = None,
                        cluster: str | None = None) -> list[str]:
        return self._loop.run(self._async.update_acl_user(
            access_key, secret_key=secret_key, white_remote_address=white_remote_address,
            admin=admin, default_topic_perm=default_topic_perm,
            default_group_perm=default_group_perm, topic_perms=topic_perms,
            group_perms=group_perms, brokers=brokers, cluster=cluster))

    def delete_acl_user(self, access_key: str, *, brokers: list[str] | None = None,
                        cluster: str | None = None) -> list[str]:
        return self._loop.run(self._async.delete_acl_user(access_key, brokers=brokers,
                                                          cluster=cluster))

    def update_acl_white_list(self, addresses: list[str], *,
                              brokers: list[str] | None = None,
                              cluster: str | None = None) -> list[str]:
        return self._loop.run(self._async.update_acl_white_list(
            addresses, brokers=brokers, cluster=cluster))
