"""``rocketq admin offset``: a consumer group's offsets moved to a point in time (mqadmin
resetOffsetByTime) or to the end of each queue (skipAccumulatedMessage)."""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from ...client.admin import QUEUE_END, AsyncAdmin
from ...client.message import MessageQueue
from .common import leaf, noun, with_admin


def add_parsers(groups: Any) -> None:
    offset = noun(groups, "offset", help="consumer group offsets")
    p = leaf(offset, "reset", help="move a group's offsets in a topic to a point in time "
                                   "(online members consume from there at once)")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("--time", required=True, type=reset_time, metavar="WHEN",
                   help="ms since the epoch, an ISO 8601 date-time (local time unless it "
                        "names its zone), or 'now' (the end of each queue)")
    p.add_argument("--no-force", dest="force", action="store_false",
                   help="only move offsets back: a queue whose committed offset is before the "
                        "time keeps it")
    p.set_defaults(func=offset_reset)
    p = leaf(offset, "skip", help="move a group to the end of every queue of a topic, skipping "
                                  "what has piled up (mqadmin skipAccumulatedMessage)")
    p.add_argument("group")
    p.add_argument("topic")
    p.set_defaults(func=offset_skip)


def parse_time(text: str) -> int:
    """A point in time as ms since the epoch: ms, an ISO 8601 date-time (local time unless
    it names its zone), or mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    for parse in (datetime.datetime.fromisoformat,
                  lambda v: datetime.datetime.strptime(v, "%Y-%m-%d#%H:%M:%S:%f")):
        try:
            when = parse(value)
        except ValueError:
            continue
        return int(when.timestamp() * 1000)  # a naive date-time is local time
    raise argparse.ArgumentTypeError(
        f"not a time: {text!r} (give ms since the epoch, an ISO 8601 date-time such as "
        "2024-05-01T12:00:00, or now)")


def reset_time(text: str) -> int:
    """The ``--time`` of ``offset reset`` as the broker takes it: ms since the epoch, or -1
    for "now" (each queue's end)."""
    return QUEUE_END if text.strip().lower() == "now" else parse_time(text)


def _print_offsets(offsets: dict[MessageQueue, int]) -> None:
    print(f"{'broker':<16} {'queue':>5} {'offset':>14}")
    for mq, offset in sorted(offsets.items()):
        print(f"{mq.broker_name:<16} {mq.queue_id:>5} {offset:>14}")


async def offset_reset(args: argparse.Namespace) -> int:
    """Reset on every master broker of the topic; prints each queue's new offset."""
    async def body(admin: AsyncAdmin) -> int:
        offsets = await admin.reset_offset(args.group, args.topic, args.time,
                                           force=args.force)
        if not offsets:
            return 1
        when = "the end of each queue" if args.time == QUEUE_END else f"{args.time} ms"
        print(f"group {args.group} in {args.topic} reset to {when}"
              f"{'' if args.force else ' (only moving back)'}")
        _print_offsets(offsets)
        return 0
    return await with_admin(args, body)


async def offset_skip(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        offsets = await admin.skip_accumulated(args.group, args.topic)
        print(f"group {args.group} in {args.topic} moved to the end of each queue")
        _print_offsets(offsets)
        return 0 if offsets else 1
    return await with_admin(args, body)
