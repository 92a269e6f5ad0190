"""``rocketq admin group``, ``consumer`` and ``producer``: consumer groups' settings (mqadmin
updateSubGroup, deleteSubGroup), their progress and members (consumerProgress,
consumerConnection), and producer groups' members (producerConnection)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ...client.admin import AsyncAdmin, Connection
from ...client.errors import ClientError
from .common import (
    add_target_options,
    leaf,
    noun,
    on_each,
    print_json,
    target_addresses,
    with_admin,
)

#: Options of ``group create`` and ``group update``: the keywords of the admin's
#: create_group and update_group.
_SETTINGS = ("retry_max_times", "retry_queues", "consume_enable", "broadcast_enable",
             "consume_from_min_enable", "notify_enable", "fifo", "broker_id", "slow_broker_id")


def add_parsers(groups: Any) -> None:
    group = noun(groups, "group", help="subscription groups (mqadmin updateSubGroup, "
                                       "deleteSubGroup)",
                 description="A consumer group's settings on its brokers: whether it may "
                             "consume, how often a failed message is retried before it goes to "
                             "the group's dead-letter queue, and how many queues its retry "
                             "topic has. Brokers create a group with the defaults when its "
                             "first consumer appears (autoCreateSubscriptionGroup=true).")
    for name, func, text in (
            ("create", group_create, "create a group, or replace its settings; options left "
                                     "out take RocketMQ's defaults"),
            ("update", group_update, "change the given settings of a group, keep the rest"),
            ("delete", group_delete, "delete a group"),
            ("list", group_list, "print every group's settings"),
            ("show", group_show, "one group's settings, as the master brokers hold them")):
        p = leaf(group, name, help=text, description=text)
        if name != "list":
            p.add_argument("group")
        if name != "show":
            add_target_options(p, required=False, default_text="; default: every master "
                                                               "broker")
        if name in ("create", "update"):
            _add_settings(p)
        if name == "delete":
            p.add_argument("--remove-offset", action="store_true",
                           help="also forget the group's committed offsets")
        p.set_defaults(func=func)

    consumer = noun(groups, "consumer", help="consumer groups")
    p = leaf(consumer, "progress", help="offsets and lag of a group")
    p.add_argument("group")
    p.add_argument("--topic", default=None, help="only this topic (default: every topic the "
                                                 "group has offsets in)")
    p.set_defaults(func=consumer_progress)
    p = leaf(consumer, "connections", help="live members of a group")
    p.add_argument("group")
    p.set_defaults(func=consumer_connections)
    producer = noun(groups, "producer", help="producer groups")
    p = leaf(producer, "connections", help="live members of a producer group")
    p.add_argument("group")
    p.set_defaults(func=producer_connections)


def _add_settings(p: argparse.ArgumentParser) -> None:
    p.add_argument("--retry-max-times", type=int, metavar="N",
                   help="attempts before the DLQ (default 16)")
    p.add_argument("--retry-queues", type=int, metavar="N",
                   help="queues of the retry topic, 0 for no retries (default 1)")
    p.add_argument("--consume-enable", action=argparse.BooleanOptionalAction,
                   help="may the group consume (default yes)")
    p.add_argument("--broadcast-enable", action=argparse.BooleanOptionalAction,
                   help="may it consume in broadcasting mode (default yes)")
    p.add_argument("--consume-from-min-enable", action=argparse.BooleanOptionalAction,
                   help="default yes")
    p.add_argument("--notify-enable", action=argparse.BooleanOptionalAction,
                   help="tell members when the group changes (default yes)")
    p.add_argument("--fifo", action=argparse.BooleanOptionalAction,
                   help="a FIFO group for POP consumers (RocketMQ 5's consumeMessageOrderly; "
                        "default no)")
    p.add_argument("--broker-id", type=int, metavar="ID",
                   help="the broker id to consume from (default 0, the master)")
    p.add_argument("--slow-broker-id", type=int, metavar="ID",
                   help="the broker id when consumption is slow (default 1)")


async def _change_group(args: argparse.Namespace, create: bool) -> int:
    settings = {name: getattr(args, name) for name in _SETTINGS}

    async def body(admin: AsyncAdmin) -> int:
        addrs = await target_addresses(admin, args)
        change = admin.create_group if create else admin.update_group
        failed = await on_each(
            addrs, lambda addr: change(args.group, brokers=[addr], **settings),
            lambda addr, _: print(f"{addr}: {'created' if create else 'updated'} "
                                  f"{args.group}"))
        return 1 if failed or not addrs else 0
    return await with_admin(args, body)


async def group_create(args: argparse.Namespace) -> int:
    return await _change_group(args, create=True)


async def group_update(args: argparse.Namespace) -> int:
    return await _change_group(args, create=False)


async def group_delete(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        failed = await on_each(
            await target_addresses(admin, args),
            lambda addr: admin.delete_group(args.group, remove_offset=args.remove_offset,
                                            brokers=[addr]),
            lambda addr, _: print(f"{addr}: deleted {args.group}"))
        return 1 if failed else 0
    return await with_admin(args, body)


async def group_list(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        tables = await admin.group_table(brokers=args.broker, cluster=args.cluster)
        print(f"{'broker':<22} {'group':<32} consume broadcast retries retryQueues")
        for addr, groups in sorted(tables.items()):
            for g in groups:
                print(f"{addr:<22} {g.name:<32} {str(g.consume_enable).lower():<7} "
                      f"{str(g.broadcast).lower():<9} {g.retry_max_times:<7} "
                      f"{g.retry_queues}")
        return 0
    return await with_admin(args, body)


async def group_show(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        g = await admin.group(args.group)
        print_json({"name": g.name, "consumeEnable": g.consume_enable,
                    "broadcast": g.broadcast, "retryMaxTimes": g.retry_max_times,
                    "retryQueues": g.retry_queues, "fifo": g.fifo,
                    "consumeFromMinEnable": g.consume_from_min_enable,
                    "notifyEnable": g.notify_enable, "brokerId": g.broker_id,
                    "slowBrokerId": g.slow_broker_id, "system": g.system,
                    "brokers": g.brokers})
        return 0
    return await with_admin(args, body)


async def consumer_progress(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        progress = await admin.consumer_progress(args.group, args.topic)
        if not progress.queues:
            raise ClientError(f"no progress recorded for group {args.group}"
                              + (f" in {args.topic}" if args.topic else ""))
        print(f"{'topic':<24} {'broker':<16} {'queue':>5} {'broker offset':>14} "
              f"{'consumer offset':>16} {'lag':>10}")
        for q in progress.queues:
            print(f"{q.queue.topic:<24} {q.queue.broker_name:<16} {q.queue.queue_id:>5} "
                  f"{q.broker_offset:>14} {q.consumer_offset:>16} {q.lag:>10}")
        print(f"total lag: {progress.total_lag}")
        return 0
    return await with_admin(args, body)


def _member(c: Connection) -> str:
    return f"  {c.client_id:<40} {c.address:<22} {c.language} {c.version} ({c.version_name})"


async def consumer_connections(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        members = await admin.consumer_connections(args.group)
        if not members:
            raise ClientError(f"the consumer group {args.group} is not online")
        for broker in sorted({c.broker_name for c in members}):
            seen = [c for c in members if c.broker_name == broker]
            print(f"{broker}: {seen[0].message_model} {seen[0].consume_type} "
                  f"{seen[0].consume_from_where}")
            for c in seen:
                print(_member(c))
            for topic, expression in sorted(seen[0].subscriptions.items()):
                print(f"  subscribes {topic}: {expression}")
        return 0
    return await with_admin(args, body)


async def producer_connections(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        members = await admin.producer_connections(args.group)
        if not members:
            print(f"no producer of group {args.group} is connected", file=sys.stderr)
            return 1
        for c in members:
            print(_member(c))
        return 0
    return await with_admin(args, body)
