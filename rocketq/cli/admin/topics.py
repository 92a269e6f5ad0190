"""``rocketq admin topic``: create, change, list, show, route, status and delete topics
(mqadmin updateTopic, topicList, topicRoute, topicStatus, deleteTopic)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ...client.admin import MESSAGE_TYPES, AsyncAdmin, TopicInfo
from ...protocol import Perm
from .common import DEFAULT_QUEUES, leaf, noun, print_json, with_admin


def add_parsers(groups: Any) -> None:
    topic = noun(groups, "topic", help="topics")
    p = leaf(topic, "create", help="create or update a topic on every master broker")
    p.add_argument("topic")
    p.add_argument("--queues", type=int, default=DEFAULT_QUEUES,
                   help="read and write queues")
    p.add_argument("--perm", type=int, default=6, help="permission bits (default 6, RW)")
    p.add_argument("--cluster", default=None, help="only brokers of this cluster")
    p.add_argument("--order", action="store_true", help="mark the topic as ordered")
    p.add_argument("--message-type", type=str.upper, choices=list(MESSAGE_TYPES),
                   help="what RocketMQ 5.x clients may send to it (the message.type "
                        "attribute; default NORMAL)")
    p.set_defaults(func=topic_create)
    p = leaf(topic, "update", help="change settings of a topic on the masters that hold it, "
                                   "keeping the others")
    p.add_argument("topic")
    p.add_argument("--read-queues", type=int, metavar="N")
    p.add_argument("--write-queues", type=int, metavar="N")
    p.add_argument("--perm", type=int, help="permission bits: 6 RW, 4 read only, 2 write only")
    p.add_argument("--message-type", type=str.upper, choices=list(MESSAGE_TYPES))
    p.set_defaults(func=topic_update)
    p = leaf(topic, "list", help="every topic the NameServer knows")
    p.add_argument("--detail", action="store_true",
                   help="with each topic's queues, permission, message type and brokers, as "
                        "the master brokers hold them")
    p.set_defaults(func=topic_list)
    p = leaf(topic, "show", help="a topic's settings")
    p.add_argument("topic")
    p.set_defaults(func=topic_show)
    p = leaf(topic, "route", help="a topic's route")
    p.add_argument("topic")
    p.set_defaults(func=topic_route)
    p = leaf(topic, "status", help="min and max offsets of each queue")
    p.add_argument("topic")
    p.set_defaults(func=topic_status)
    p = leaf(topic, "delete", help="delete a topic from its brokers and NameServers")
    p.add_argument("topic")
    p.set_defaults(func=topic_delete)


async def topic_create(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        masters = await admin.create_topic(
            args.topic, args.queues, cluster=args.cluster, perm=args.perm, order=args.order,
            message_type=args.message_type)
        for name, addr in sorted(masters.items()):
            print(f"created {args.topic} on {name} ({addr}) with {args.queues} queues")
        return 0
    return await with_admin(args, body)


async def topic_update(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        brokers = await admin.update_topic(
            args.topic, read_queues=args.read_queues, write_queues=args.write_queues,
            perm=args.perm, message_type=args.message_type)
        print(f"updated {args.topic} on {', '.join(brokers)}")
        return 0
    return await with_admin(args, body)


def _row(t: TopicInfo) -> str:
    return (f"{t.name:<40} {t.read_queues:>5} {t.write_queues:>5} "
            f"{Perm.to_string(t.perm):<4} {t.kind:<11} {','.join(t.brokers)}")


async def topic_list(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        if not args.detail:
            for topic in await admin.list_topics():
                print(topic)
            return 0
        print(f"{'topic':<40} {'read':>5} {'write':>5} {'perm':<4} {'kind':<11} brokers")
        for t in await admin.topics():
            print(_row(t))
        return 0
    return await with_admin(args, body)


async def topic_show(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        t = await admin.topic(args.topic)
        print_json({"name": t.name, "readQueues": t.read_queues,
                    "writeQueues": t.write_queues, "perm": t.perm,
                    "permText": Perm.to_string(t.perm), "messageType": t.message_type,
                    "order": t.order, "system": t.system, "kind": t.kind,
                    "brokers": t.brokers})
        return 0
    return await with_admin(args, body)


async def topic_route(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        print_json(await admin.topic_route(args.topic))
        return 0
    return await with_admin(args, body)


async def topic_status(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        rows = await admin.topic_status(args.topic)
        print(f"{'broker':<16} {'queue':>5} {'min':>12} {'max':>12}  last update")
        for q in rows:
            ts = q.last_update_timestamp
            when = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000)) if ts
                    else "-")
            print(f"{q.broker_name:<16} {q.queue_id:>5} {q.min_offset:>12} "
                  f"{q.max_offset:>12}  {when}")
        return 0
    return await with_admin(args, body)


async def topic_delete(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        holders = await admin.delete_topic(args.topic)
        print(f"deleted {args.topic}" + (f" from {', '.join(holders)}" if holders else
                                         " from the NameServer"))
        return 0
    return await with_admin(args, body)
