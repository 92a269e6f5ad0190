"""The Connections page: the producers and consumers of a group that are connected to the
brokers now, with their addresses, languages and client versions (RocketMQ Dashboard's
"Producer" and "Consumer" client lists)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..errors import ClientError
from . import inputs
from .web import render, state


async def connections_page(request: Request) -> Response:
    """GET /connections?group=NAME: the consumers of a consumer group and the producers of
    a producer group of that name."""
    group = request.query_params.get("group", "").strip()
    sections = []
    if group:
        inputs.group_name(group)
        admin = state(request).admin
        for kind, title, call in (("consumers", "Consumers", admin.consumer_connections),
                                  ("producers", "Producers", admin.producer_connections)):
            try:
                sections.append((kind, title, list(await call(group)), None))
            except ClientError as exc:  # none online: say so where the list would be
                sections.append((kind, title, [], str(exc)))
    return render(request, "connections.html", {"group": group, "sections": sections})
