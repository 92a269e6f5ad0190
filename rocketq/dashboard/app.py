"""The dashboard as an ASGI application: its routes, its middleware and how it answers what
goes wrong.

Every answer to a failure is a page saying what happened, never a traceback: refused input
is a 4xx page with the reason (``inputs.BadInput``); a refusal of the cluster is a 400 page
with its reason; a cluster that does not answer is a 502 page; anything else is a 500 page
that says only that, with the details in the log.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..client.errors import NameServerError
from ..errors import ClientError, ClientTimeoutError
from . import cluster, connections, groups, logins, messages, security, topics
from .inputs import BadInput
from .sampler import DEFAULT_INTERVAL, Sampler
from .users import UserFile
from .web import HERE, DashboardState, render

if TYPE_CHECKING:
    from ..client.admin import AsyncAdmin

log = logging.getLogger("rocketq.dashboard")

Endpoint = Callable[[Request], Awaitable[Response]]


def _answers_failures(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` with the cluster's failures answered as pages (see the module's text)."""
    @functools.wraps(endpoint)
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except (BadInput, HTTPException):
            raise
        except (TimeoutError, ClientTimeoutError, NameServerError, OSError) as exc:
            log.warning("dashboard: %s %s: the cluster did not answer: %s", request.method,
                        request.url.path, exc)
            return error_page(request, 502, "The cluster did not answer",
                              f"{exc or type(exc).__name__}")
        except ClientError as exc:
            return error_page(request, 400, "The cluster refused", str(exc))
        except Exception:
            log.exception("dashboard: %s %s failed", request.method, request.url.path)
            return error_page(request, 500, "Something went wrong",
                              "The dashboard could not answer this; its log says why.")
    return wrapped


def error_page(request: Request, status: int, title: str, detail: str) -> Response:
    """A page saying what went wrong, with ``status``."""
    return render(request, "error.html", {"status": status, "title": title,
                                          "detail": detail}, status=status)


async def _bad_input(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadInput)
    titles = {404: "Not found", 409: "Already there"}
    return error_page(request, exc.status, titles.get(exc.status, "Not accepted"), str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {404: "Not found", 405: "Not allowed", 403: "Refused", 400: "Not accepted",
              413: "Too large"}
    detail = exc.detail if exc.status_code != 404 else f"No page at {request.url.path}."
    if exc.status_code == 405:
        detail = "Changes are made with the page's forms."
    return error_page(request, exc.status_code, titles.get(exc.status_code, "Error"),
                      str(detail))


async def _home(request: Request) -> Response:
    return RedirectResponse("/cluster", status_code=303)


async def _health(request: Request) -> Response:
    return PlainTextResponse("ok")


def _routes() -> list[Route | Mount]:
    get, post = ["GET"], ["POST"]
    table: list[tuple[str, Endpoint, list[str]]] = [
        ("/", _home, get),
        ("/healthz", _health, get),
        ("/login", logins.login_form, get),
        ("/login", logins.login, post),
        ("/logout", logins.logout, post),
        ("/cluster", cluster.cluster_page, get),
        ("/brokers/{address}", cluster.broker_page, get),
        ("/topics", topics.topics_page, get),
        ("/topics", topics.create_topic, post),
        ("/topics/{name}", topics.topic_page, get),
        ("/topics/{name}/update", topics.update_topic, post),
        ("/topics/{name}/delete", topics.delete_topic, post),
        ("/topics/{name}/send", topics.send_message, post),
        ("/groups", groups.groups_page, get),
        ("/groups", groups.create_group, post),
        ("/groups/{name}", groups.group_page, get),
        ("/groups/{name}/update", groups.update_group, post),
        ("/groups/{name}/delete", groups.delete_group, post),
        ("/groups/{name}/reset", groups.reset_offset, post),
        ("/groups/{name}/skip", groups.skip_accumulated, post),
        ("/groups/{name}/resend", groups.resend_dlq, post),
        ("/messages", messages.search_page, get),
        ("/messages/{msg_id}", messages.message_page, get),
        ("/connections", connections.connections_page, get),
    ]
    routes: list[Route | Mount] = [
        Route(path, _answers_failures(endpoint), methods=methods)
        for path, endpoint, methods in table]
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    return routes


def create_app(admin: AsyncAdmin, *, users: str | None = None, session_secret: str | None = None,
               hosts: Iterable[str] = (), interval: float = DEFAULT_INTERVAL,
               history: int | None = None, close_admin: bool = False) -> Starlette:
    """The dashboard over ``admin`` (a ``rocketq.client.admin.AsyncAdmin``).

    Args:
        users: a user file (``name:hash`` lines): every page then needs a login. Checked
            here, so a file that cannot be used stops the start. Without one the dashboard
            is read-only: a change needs a logged-in user.
        session_secret: what signs the session cookies (at least 32 characters); a random
            one by default, so that sessions end when the dashboard stops.
        hosts: the names a request's Host may give besides localhost, 127.0.0.1 and [::1]:
            the address served on, and whatever else it is reached by (``--allowed-host``).
        interval, history: the sampler's seconds between samples, and samples kept
            (default: 10 minutes' worth).
        close_admin: close ``admin`` when the application shuts down.

    Raises:
        ValueError: the user file cannot be used, the secret is too short, or a host is not
            a host name.
    """
    user_file = UserFile(users) if users else None
    if user_file is not None:
        user_file.check()
    secret = session_secret or secrets.token_urlsafe(32)
    if len(secret) < 32:
        raise ValueError("the session secret must be at least 32 characters long")
    trusted = security.allowed_hosts(hosts)
    sampler = Sampler(admin, interval=interval, history=history)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            await sampler.stop()
            if close_admin:
                await admin.close()

    app = Starlette(
        routes=_routes(),
        middleware=[
            Middleware(security.SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=trusted, www_redirect=False),
            Middleware(security.BodyLimit),
            Middleware(security.PortSessions, secret_key=secret,
                       max_age=logins.SESSION_MAX_AGE, same_site="lax"),
            Middleware(logins.AccessGate),
        ],
        exception_handlers={BadInput: _bad_input, HTTPException: _http_error},
        lifespan=lifespan)
    app.state.dashboard = DashboardState(admin, sampler, user_file)
    return app
