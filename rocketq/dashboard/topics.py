"""The Topics pages: the list (with a form to create one), and a page per topic with each
queue's min and max offsets, forms to update or delete it, and one to send it a test
message."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..client.admin import TopicInfo
from ..client.errors import NotFoundError
from . import inputs
from .security import change_form
from .web import redirect, render, state, topic_path

#: Queues a topic created from the form gets unless told (mqadmin's updateTopic default).
DEFAULT_QUEUES = 8


async def topics_page(request: Request) -> Response:
    """GET /topics (``?system=1`` lists the brokers' own topics too)."""
    show_system = request.query_params.get("system") == "1"
    topics = sorted(await state(request).admin.topics(), key=lambda t: t.name)
    shown = [t for t in topics if show_system or not t.system]
    return render(request, "topics.html", {
        "topics": shown, "show_system": show_system, "hidden": len(topics) - len(shown),
        "message_types": inputs.MESSAGE_TYPES, "default_queues": DEFAULT_QUEUES})


async def create_topic(request: Request) -> Response:
    """POST /topics: create a topic on every master broker."""
    form = await change_form(request)
    name = inputs.topic_name(inputs.text(form, "name", limit=300))
    queues = inputs.integer(inputs.text(form, "queues"), "the number of queues", low=1,
                            high=inputs.MAX_QUEUES)
    message_type = inputs.message_type(inputs.text(form, "message_type", required=False)
                                       or "NORMAL")
    admin = state(request).admin
    if any(t.name == name for t in await admin.topics()):
        raise inputs.BadInput(f"the topic {name} exists already; change it on its own page",
                              409)
    await admin.create_topic(name, queues, message_type=message_type)
    return redirect(request, topic_path(name), f"Topic {name} created with {queues} queues.")


async def _topic(request: Request) -> TopicInfo:
    """The topic named in the path; a 404 page if the cluster does not have it."""
    name = inputs.topic_name(request.path_params["name"])
    try:
        return await state(request).admin.topic(name)
    except NotFoundError as exc:
        raise inputs.BadInput(f"no topic {name} in the cluster ({exc})", 404) from None


async def topic_page(request: Request) -> Response:
    """GET /topics/{name}: queues with their offsets, and the forms."""
    topic = await _topic(request)
    admin = state(request).admin
    queues = sorted(await admin.topic_status(topic.name),
                    key=lambda q: (q.broker_name, q.queue_id))
    sent = request.session.pop("sent", None)
    return render(request, "topic.html", {
        "topic": topic, "queues": queues, "sent": sent,
        "total": sum(q.max_offset - q.min_offset for q in queues),
        "message_types": inputs.MESSAGE_TYPES})


async def update_topic(request: Request) -> Response:
    """POST /topics/{name}/update: queues, permission and message type."""
    form = await change_form(request)
    topic = await _topic(request)
    read = inputs.integer(inputs.text(form, "read_queues"), "the read queues", low=1,
                          high=inputs.MAX_QUEUES)
    write = inputs.integer(inputs.text(form, "write_queues"), "the write queues", low=1,
                           high=inputs.MAX_QUEUES)
    perm = inputs.perm(inputs.text(form, "perm"))
    message_type = inputs.message_type(inputs.text(form, "message_type"))
    await state(request).admin.update_topic(topic.name, read_queues=read, write_queues=write,
                                            perm=perm, message_type=message_type)
    return redirect(request, topic_path(topic.name), f"Topic {topic.name} updated.")


async def delete_topic(request: Request) -> Response:
    """POST /topics/{name}/delete: the topic, its messages and its offsets go. The form
    asks for the name again, so that one click cannot delete a topic."""
    form = await change_form(request)
    topic = await _topic(request)
    if inputs.text(form, "confirm", required=False, limit=300) != topic.name:
        raise inputs.BadInput(f"type the topic's name ({topic.name}) to delete it")
    await state(request).admin.delete_topic(topic.name)
    return redirect(request, "/topics", f"Topic {topic.name} deleted.")


async def send_message(request: Request) -> Response:
    """POST /topics/{name}/send: a test message; the topic page then shows where it went."""
    form = await change_form(request)
    topic = await _topic(request)
    body = inputs.text(form, "body", limit=inputs.MAX_TEST_BODY)
    tags = inputs.text(form, "tags", required=False, limit=128) or None
    keys = inputs.text(form, "keys", required=False, limit=128) or None
    result = await state(request).admin.send_message(topic.name, body.encode(), tags=tags,
                                                     keys=keys)
    request.session["sent"] = {
        "msg_id": result.msg_id, "status": getattr(result.status, "name", str(result.status)),
        "queue": f"{result.queue.broker_name} queue {result.queue.queue_id}",
        "queue_offset": result.queue_offset}
    return redirect(request, topic_path(topic.name), "Test message sent.")
