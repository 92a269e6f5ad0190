"""``rocketq admin message``, ``send``, ``tail`` and ``dlq``: messages found by id, key or
time and traced through their groups (mqadmin queryMsgById, queryMsgByKey, the dashboard's
message search and track), sent and read from the terminal, and a group's dead letters
listed and sent again."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from ...client.admin import ADMIN_PRODUCER_GROUP, TOOLS_CONSUMER_GROUP, AsyncAdmin
from ...client.errors import ClientError
from ...client.message import ReceivedMessage, SendResult
from .common import leaf, noun, print_json, security, with_admin
from .offsets import parse_time


def add_parsers(groups: Any) -> None:
    message = noun(groups, "message", help="find messages")
    p = leaf(message, "id", help="by message id: the one send prints (the producer's unique "
                                 "id, a RocketMQ 5 client's too) or the broker's offset id")
    p.add_argument("msg_id")
    p.add_argument("--topic", default=None,
                   help="the topic of a unique id (default: search every topic)")
    p.set_defaults(func=message_by_id)
    p = leaf(message, "key", help="by key")
    p.add_argument("topic")
    p.add_argument("key")
    p.add_argument("--max", type=int, default=32, help="at most this many messages")
    p.set_defaults(func=message_by_key)
    p = leaf(message, "time", help="those stored between two points in time, oldest first")
    p.add_argument("topic")
    p.add_argument("--begin", required=True, type=point_in_time, metavar="WHEN",
                   help="ms since the epoch, an ISO 8601 date-time, or 'now'")
    p.add_argument("--end", type=point_in_time, default="now", metavar="WHEN",
                   help="as --begin, included (default: now)")
    p.add_argument("--max", type=int, default=64, help="at most this many (the oldest)")
    p.set_defaults(func=message_by_time)
    p = leaf(message, "trace", help="whether each group consuming the topic has consumed the "
                                    "message (the dashboard's message track)")
    p.add_argument("topic")
    p.add_argument("msg_id")
    p.set_defaults(func=message_trace)

    p = leaf(groups, "send", help="send messages from the terminal")
    p.add_argument("topic")
    p.add_argument("body", help="the body ('-' reads lines from standard input, one message "
                                "each)")
    p.add_argument("--tags", default=None)
    p.add_argument("--keys", default=None, help="space-separated keys")
    p.add_argument("--count", type=int, default=1, help="send the body this many times")
    p.add_argument("--group", default=ADMIN_PRODUCER_GROUP, help="producer group")
    p.set_defaults(func=send)

    p = leaf(groups, "tail", help="print a topic's messages as they arrive")
    p.add_argument("topic")
    p.add_argument("--expression", default="*", help="tag expression (default *)")
    p.add_argument("--from", dest="from_where", choices=["first", "last"], default="last",
                   help="first: from each queue's first message; last: only new ones")
    p.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")
    p.add_argument("--timeout", type=float, default=0,
                   help="stop after this many idle seconds (0: never)")
    p.set_defaults(func=tail)

    dlq = noun(groups, "dlq", help="a consumer group's dead-letter queue (%%DLQ%%group)")
    p = leaf(dlq, "list", help="the newest messages of the group's dead-letter queue")
    p.add_argument("group")
    p.add_argument("--max", type=int, default=32, help="at most this many")
    p.set_defaults(func=dlq_list)
    p = leaf(dlq, "resend", help="send a dead message again to the group alone, through its "
                                 "retry topic")
    p.add_argument("group")
    p.add_argument("msg_id", help="the message's id, as dlq list shows it")
    p.set_defaults(func=dlq_resend)


def point_in_time(text: str) -> int:
    """``--begin``/``--end``: ms since the epoch, a date-time, or 'now'."""
    return int(time.time() * 1000) if text.strip().lower() == "now" else parse_time(text)


def _show(records: list[ReceivedMessage]) -> None:
    for rec in records:
        print_json({"topic": rec.topic, "msgId": rec.msg_id, "offsetMsgId": rec.offset_msg_id,
                    "queueId": rec.queue_id, "queueOffset": rec.queue_offset,
                    "tags": rec.tags, "keys": rec.keys, "properties": rec.properties,
                    "bornTimestamp": rec.born_timestamp,
                    "storeTimestamp": rec.store_timestamp,
                    "reconsumeTimes": rec.reconsume_times,
                    "body": rec.body.decode("utf-8", "replace")})


def _sent(r: SendResult) -> None:
    print(f"{r.status.value} {r.msg_id} {r.queue} offset {r.queue_offset}")


async def message_by_id(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        _show([await admin.message_by_id(args.msg_id, args.topic)])
        return 0
    return await with_admin(args, body)


async def message_by_key(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        found = await admin.query_messages(args.topic, args.key, max_num=args.max)
        if not found:
            raise ClientError(f"no message of {args.topic} with key {args.key}")
        _show(found)
        return 0
    return await with_admin(args, body)


async def message_by_time(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        _show(await admin.messages_by_time(args.topic, args.begin, args.end,
                                           max_num=args.max))
        return 0
    return await with_admin(args, body)


async def message_trace(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        deliveries = await admin.message_trace(args.topic, args.msg_id)
        if not deliveries:
            print(f"no group consumes {args.topic}", file=sys.stderr)
            return 0
        print(f"{'group':<32} {'status':<22} {'consumer offset':>15} {'members':>7}")
        for d in deliveries:
            offset = "-" if d.consumer_offset is None else str(d.consumer_offset)
            print(f"{d.group:<32} {d.status:<22} {offset:>15} {d.members:>7}")
        return 0
    return await with_admin(args, body)


async def send(args: argparse.Namespace) -> int:
    keys = args.keys.split() if args.keys else None

    async def body(admin: AsyncAdmin) -> int:
        if args.body == "-":
            loop = asyncio.get_running_loop()
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    break
                _sent(await admin.send_message(args.topic, line.rstrip("\n").encode(),
                                               tags=args.tags, keys=keys,
                                               producer_group=args.group))
        else:
            for _ in range(args.count):
                _sent(await admin.send_message(args.topic, args.body.encode(), tags=args.tags,
                                               keys=keys, producer_group=args.group))
        return 0
    return await with_admin(args, body)


def _tail_line(m: ReceivedMessage) -> str:
    """One message as ``tail`` prints it: queue, offset, the tags and keys it has (nothing
    for those it has not; several keys joined by commas), then the body."""
    tags = f" tags={m.tags}" if m.tags else ""
    keys = f" keys={','.join(m.keys)}" if m.keys else ""
    return f"{m.queue} offset {m.queue_offset}{tags}{keys} {m.body.decode('utf-8', 'replace')}"


async def tail(args: argparse.Namespace) -> int:
    """Print the topic's messages: its queues assigned, not shared with a group, and each
    one's position set here (its first or its last offset), never committed."""
    from ...client.pull import AsyncPullConsumer

    consumer = AsyncPullConsumer(TOOLS_CONSUMER_GROUP, args.namesrv,
                                 from_where=args.from_where, auto_commit=False,
                                 **security(args))
    try:
        queues = await consumer.fetch_queues(args.topic)
        consumer.assign(queues)
        if args.expression != "*":
            consumer.subscribe(args.topic, args.expression)
        await consumer.start()
    except BaseException:
        await consumer.shutdown()
        await consumer.instance.stop()
        raise
    try:
        # Positions of our own: the tools' group may have offsets someone committed.
        for mq in queues:
            await (consumer.seek_to_begin(mq) if args.from_where == "first"
                   else consumer.seek_to_end(mq))
        seen = 0
        idle_since = time.monotonic()
        while True:
            messages = await consumer.poll(0.5)
            if args.count:
                messages = messages[:args.count - seen]  # exactly --count, no more
            for m in messages:
                print(_tail_line(m), flush=True)
            if messages:
                idle_since = time.monotonic()
            seen += len(messages)
            if args.count and seen >= args.count:
                break
            if args.timeout and time.monotonic() - idle_since >= args.timeout:
                break
    finally:
        # Forget the positions, so that leaving the group commits none of them.
        for mq in queues:
            consumer.offset_store.remove(mq)
        await consumer.shutdown()
    return 0


async def dlq_list(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        _show(await admin.dlq_messages(args.group, max_num=args.max))
        return 0
    return await with_admin(args, body)


async def dlq_resend(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        _sent(await admin.resend_dlq(args.group, args.msg_id))
        return 0
    return await with_admin(args, body)
