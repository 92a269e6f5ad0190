"""Message search (by topic and time range, by key, by id) and the message page: its body,
properties, where it is stored, and its trace of deliveries to the consumer groups."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..client.errors import NotFoundError
from ..errors import ClientError
from . import inputs
from .web import render, state

#: Most messages one search lists.
MAX_RESULTS = 64
#: The time range a search by time starts with: the last hour.
DEFAULT_RANGE_MS = 3600 * 1000
#: Longest time range of a search, as RocketMQ Dashboard allows.
MAX_RANGE_MS = 31 * 24 * 3600 * 1000


async def search_page(request: Request) -> Response:
    """GET /messages: the three search forms, and the results of the one submitted."""
    query = request.query_params
    by = query.get("by", "")
    now = int(time.time() * 1000)
    form = {"topic": query.get("topic", "").strip(), "key": query.get("key", "").strip(),
            "id": query.get("id", "").strip(),
            "begin": query.get("begin", "") or inputs.time_field(now - DEFAULT_RANGE_MS),
            # A minute ahead: the field shows whole seconds, and a message stored later
            # within this second must not fall outside.
            "end": query.get("end", "") or inputs.time_field(now + 60_000)}
    results: list[Any] | None = None
    if by:
        results = await _search(request, by, form)
    return render(request, "messages.html", {"form": form, "by": by, "results": results,
                                             "limit": MAX_RESULTS})


async def _search(request: Request, by: str, form: dict[str, str]) -> list[Any]:
    admin = state(request).admin
    if by == "time":
        topic = inputs.topic_name(form["topic"])
        begin = inputs.timestamp(form["begin"], "the start")
        end = inputs.timestamp(form["end"], "the end")
        if end < begin:
            raise inputs.BadInput("the end of the time range is before its start")
        if end - begin > MAX_RANGE_MS:
            raise inputs.BadInput("the time range is longer than 31 days")
        await _known_topic(request, topic)
        found = await admin.messages_by_time(topic, begin, end, max_num=MAX_RESULTS)
    elif by == "key":
        topic = inputs.topic_name(form["topic"])
        if not form["key"]:
            raise inputs.BadInput("give the key to search for")
        if len(form["key"]) > 128:
            raise inputs.BadInput("a key is at most 128 characters")
        await _known_topic(request, topic)
        found = await admin.query_messages(topic, form["key"])
    elif by == "id":
        msg_id = inputs.message_id(form["id"])
        topic = inputs.topic_name(form["topic"]) if form["topic"] else None
        try:
            found = [await admin.message_by_id(msg_id, topic)]
        except NotFoundError as exc:
            raise inputs.BadInput(str(exc), 404) from None
    else:
        raise inputs.BadInput(f"search by time, key or id, not {by!r}")
    return list(found)[:MAX_RESULTS]


async def _known_topic(request: Request, topic: str) -> None:
    """A 404 page unless the cluster has ``topic``."""
    if not any(t.name == topic for t in await state(request).admin.topics()):
        raise inputs.BadInput(f"no topic {topic} in the cluster", 404)


async def message_page(request: Request) -> Response:
    """GET /messages/{msg_id} (``?topic=`` where it was sent, which makes it quicker)."""
    msg_id = inputs.message_id(request.path_params["msg_id"])
    topic_text = request.query_params.get("topic", "").strip()
    topic = inputs.topic_name(topic_text) if topic_text else None
    admin = state(request).admin
    try:
        message = await admin.message_by_id(msg_id, topic)
    except NotFoundError as exc:
        raise inputs.BadInput(str(exc), 404) from None
    trace: list[Any] = []
    trace_problem = None
    try:
        trace = list(await admin.message_trace(message.topic, message.msg_id))
    except ClientError as exc:
        trace_problem = str(exc)
    properties = sorted(message.properties.items())
    return render(request, "message.html", {"message": message, "properties": properties,
                                            "trace": trace, "trace_problem": trace_problem})
