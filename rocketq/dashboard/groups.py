"""The Consumer groups pages: the list with each group's lag, and a page per group with its
members and their client versions, lag per queue and over time, resetting its offsets to a
time, skipping what has piled up, and its dead-letter queue with a resend per message."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

from ..client.admin import GroupInfo
from ..client.errors import NotFoundError
from ..errors import ClientError
from . import inputs
from .charts import line_chart
from .security import change_form
from .web import group_path, redirect, render, state

#: Dead-letter messages listed on a group's page.
DLQ_SHOWN = 32

T = TypeVar("T")


async def groups_page(request: Request) -> Response:
    """GET /groups (``?system=1`` lists the brokers' own groups too)."""
    dash = state(request)
    show_system = request.query_params.get("system") == "1"
    groups = sorted(await dash.admin.groups(), key=lambda g: g.name)
    shown = [g for g in groups if show_system or not g.system]
    latest = dash.sampler.latest()
    chart = line_chart(dash.sampler.lag_series([g.name for g in shown]),
                       title="Lag of each group", unit="messages not consumed yet")
    return render(request, "groups.html", {
        "groups": shown, "hidden": len(groups) - len(shown), "show_system": show_system,
        "lag": latest.lag if latest else {}, "chart": chart})


async def create_group(request: Request) -> Response:
    """POST /groups: a subscription group on every master broker."""
    form = await change_form(request)
    name = inputs.group_name(inputs.text(form, "name", limit=300))
    admin = state(request).admin
    if any(g.name == name for g in await admin.groups()):
        raise inputs.BadInput(f"the group {name} exists already", 409)
    await admin.create_group(name)
    return redirect(request, group_path(name), f"Group {name} created.")


async def _group(request: Request) -> GroupInfo:
    """The group named in the path; a 404 page if no broker has it."""
    name = inputs.group_name(request.path_params["name"])
    try:
        return await state(request).admin.group(name)
    except NotFoundError:
        raise inputs.BadInput(f"no consumer group {name} in the cluster", 404) from None


async def group_page(request: Request) -> Response:
    """GET /groups/{name}."""
    dash = state(request)
    group = await _group(request)
    name = group.name
    progress = await dash.admin.consumer_progress(name)
    members, members_problem = await _or_problem(dash.admin.consumer_connections(name))
    dlq, dlq_problem = await _or_problem(dash.admin.dlq_messages(name, max_num=DLQ_SHOWN))
    topics = sorted({q.queue.topic for q in progress.queues})
    chart = line_chart(dash.sampler.lag_series([name]), title=f"Lag of {name}",
                       unit="messages not consumed yet")
    return render(request, "group.html", {
        "group": group, "name": name, "progress": progress, "topics": topics,
        "members": members, "members_problem": members_problem,
        "dlq": dlq, "dlq_problem": dlq_problem, "chart": chart,
        "now": inputs.time_field(int(time.time() * 1000))})


async def _or_problem(call: Awaitable[list[T]]) -> tuple[list[T], str | None]:
    """What ``call`` gives, or nothing and why not: a part of a page the cluster cannot
    answer leaves the rest of the page standing."""
    try:
        return await call, None
    except ClientError as exc:
        return [], str(exc)


async def reset_offset(request: Request) -> Response:
    """POST /groups/{name}/reset: move the group's offsets in a topic to the first message
    stored at or after a time, in UTC (online members consume from there at once). Every
    field is checked before the cluster is asked anything."""
    form = await change_form(request)
    topic = inputs.topic_name(inputs.text(form, "topic", limit=300))
    when = inputs.timestamp(inputs.text(form, "time"), "the time")
    name = (await _group(request)).name
    await state(request).admin.reset_offset(name, topic, when)
    return redirect(request, group_path(name),
                    f"Offsets of {name} in {topic} reset to {inputs.time_text(when)}.")


async def skip_accumulated(request: Request) -> Response:
    """POST /groups/{name}/skip: move the group's offsets in a topic to the end: what has
    piled up is never consumed."""
    form = await change_form(request)
    name = (await _group(request)).name
    topic = inputs.topic_name(inputs.text(form, "topic", limit=300))
    await state(request).admin.skip_accumulated(name, topic)
    return redirect(request, group_path(name),
                    f"{name} skipped the messages accumulated in {topic}.")


async def resend_dlq(request: Request) -> Response:
    """POST /groups/{name}/resend: a dead-letter message goes back to the group."""
    form = await change_form(request)
    name = (await _group(request)).name
    msg_id = inputs.message_id(inputs.text(form, "msg_id", limit=64))
    try:
        result = await state(request).admin.resend_dlq(name, msg_id)
    except NotFoundError:
        raise inputs.BadInput(f"no message {msg_id} in the dead-letter queue of {name}",
                              404) from None
    return redirect(request, group_path(name),
                    f"Message {msg_id} resent to {name} (into {result.queue.topic}).")


async def update_group(request: Request) -> Response:
    """POST /groups/{name}/update: whether the group may consume, and its retries."""
    form = await change_form(request)
    name = (await _group(request)).name
    retries = inputs.integer(inputs.text(form, "retry_max_times"), "the retries", low=-1,
                             high=64)
    enable = inputs.text(form, "consume_enable", required=False) == "on"
    await state(request).admin.update_group(name, retry_max_times=retries,
                                            consume_enable=enable)
    return redirect(request, group_path(name), f"Group {name} updated.")


async def delete_group(request: Request) -> Response:
    """POST /groups/{name}/delete: the group's settings and offsets go. The form asks for
    the name again."""
    form = await change_form(request)
    name = (await _group(request)).name
    if inputs.text(form, "confirm", required=False, limit=300) != name:
        raise inputs.BadInput(f"type the group's name ({name}) to delete it")
    await state(request).admin.delete_group(name)
    return redirect(request, "/groups", f"Group {name} deleted.")
