"""What guards the dashboard before a page is made: the Host it is asked by, the size of what
is posted, the session cookie, CSRF tokens and the headers every page carries. Who may do
what (logins, read-only without a user file) is ``logins``.

- **Hosts.** Only requests naming the dashboard by an expected host are answered (Starlette's
  TrustedHostMiddleware): the address it serves on, localhost, 127.0.0.1 and [::1], with any
  port, and the names given with ``--allowed-host``; any other Host gets 400. A web page
  elsewhere cannot reach it through a name it rebinds to 127.0.0.1 (DNS rebinding).
- **Bodies.** A posted body over ``MAX_FORM_BYTES`` (``MAX_LOGIN_BYTES`` for the login
  form, which anyone may post) is refused 413, from its Content-Length before it is read, or
  as soon as what is read grows past the cap; the form is then never parsed.
- **Sessions.** A signed cookie (Starlette's SessionMiddleware over itsdangerous) named after
  the port the dashboard serves on, so that two dashboards on one host keep apart.
- **CSRF.** Every form carries the session's token, and every change (always a POST) is
  refused 403 unless the token it posts is the session's (``change_form``).
- **Headers.** A Content-Security-Policy that allows no script and nothing from elsewhere,
  and no framing, so that markup slipped into a page could neither run nor be clicked
  through.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .inputs import MAX_TEST_BODY
from .web import CSRF_KEY, render

#: Headers on every answer.
HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; "
     b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
#: The hosts a request may name whatever address the dashboard serves on.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
#: Largest body of a posted form: a test message's body is up to MAX_TEST_BODY characters,
#: and percent-encoded one character takes up to 9 bytes; the other fields are small.
MAX_FORM_BYTES = 9 * MAX_TEST_BODY + 64 * 1024
#: Largest body of the login form (a name, a password of at most 1024 characters and the
#: path to go back to, percent-encoded).
MAX_LOGIN_BYTES = 32 * 1024
#: The session cookie's name, before the port it is for.
SESSION_COOKIE = "rocketq_dashboard"
#: A host name (its labels) or a ``*.`` pattern of one, as --allowed-host takes them.
_HOST_NAME = re.compile(r"(\*\.)?([A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?\.)*"
                        r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?\.?")


class SecurityHeaders:
    """ASGI middleware adding ``HEADERS`` to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)


def allowed_hosts(hosts: Iterable[str] = ()) -> list[str]:
    """The Host names a request may give (without their port): ``LOOPBACK_HOSTS`` and
    ``hosts`` (the address served on, and the names given with --allowed-host). An IPv6
    address is written in brackets, as a Host header has it; ``*.example.com`` allows its
    subdomains and ``*`` any host.

    Raises:
        ValueError: a name that is neither a host name, an address nor such a pattern (a
            port, a scheme or a path with it, say).
    """
    allowed = list(LOOPBACK_HOSTS)
    for given in hosts:
        host = given.strip().lower()
        bracketed = host.startswith("[") and host.endswith("]")
        try:
            address = ipaddress.ip_address(host[1:-1] if bracketed else host)
        except ValueError:
            address = None
        if address is not None and (address.version == 6 or not bracketed):
            host = f"[{address.compressed}]" if address.version == 6 else address.compressed
        elif bracketed or (host != "*" and not _HOST_NAME.fullmatch(host)):
            raise ValueError(f"not a host name: {given!r} (give a name such as "
                             "dashboard.example.com, *.example.com or an address, "
                             "without a port)")
        if host not in allowed:
            allowed.append(host)
    return allowed


class BodyLimit:
    """ASGI middleware refusing bodies larger than ``limit`` bytes (``login_limit`` for
    POST /login) with 413: at once when the Content-Length says so, else as soon as the
    body read grows past it, without reading further."""

    def __init__(self, app: ASGIApp, *, limit: int = MAX_FORM_BYTES,
                 login_limit: int = MAX_LOGIN_BYTES) -> None:
        self.app = app
        self.limit = limit
        self.login_limit = login_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.login_limit if scope["path"] == "/login" else self.limit
        length = _content_length(scope)
        if length is not None and length > limit:
            await too_large(scope, limit)(scope, receive, send)
            return
        read = 0
        started = False

        async def capped() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > limit:
                    raise HTTPException(413, _too_large_text(limit))
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, capped, watched)
        except HTTPException as exc:
            if exc.status_code != 413 or started:
                raise
            await too_large(scope, limit)(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", []):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _too_large_text(limit: int) -> str:
    return f"What was posted is larger than the {limit // 1024} KiB a form of this page takes."


def too_large(scope: Scope, limit: int) -> Response:
    """The 413 page for a body past ``limit`` bytes."""
    return render(Request(scope), "error.html", {
        "status": 413, "title": "Too large", "detail": _too_large_text(limit)}, status=413)


class PortSessions:
    """ASGI middleware: Starlette's SessionMiddleware with a cookie named after the port the
    request came in on (``rocketq_dashboard_8080``). Browsers send a host's cookies to all
    its ports, so two dashboards on one host would otherwise share, and keep overwriting,
    one cookie. The port is known only once the server has bound it (port 0 picks one),
    hence a session middleware per port, made at its first request."""

    def __init__(self, app: ASGIApp, **options: Any) -> None:
        self.app = app
        self.options = options
        self._by_port: dict[object, SessionMiddleware] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        port = server[1] if server and server[1] is not None else None
        sessions = self._by_port.get(port)
        if sessions is None:
            sessions = SessionMiddleware(self.app, session_cookie=cookie_name(port),
                                         **self.options)
            self._by_port[port] = sessions
        await sessions(scope, receive, send)


def cookie_name(port: object) -> str:
    """The session cookie's name for a dashboard serving on ``port``."""
    return f"{SESSION_COOKIE}_{port}" if port is not None else SESSION_COOKIE


async def change_form(request: Request) -> FormData:
    """The form of a change, once its CSRF token is checked (403 if it is not the session's).
    Every POST handler reads its form through this."""
    form = await request.form()
    sent = form.get(CSRF_KEY)
    expected = request.session.get(CSRF_KEY)
    if (not isinstance(sent, str) or not isinstance(expected, str)
            or not hmac.compare_digest(sent.encode(), expected.encode())):
        raise HTTPException(403, "This form has expired or did not come from this dashboard. "
                                 "Reload the page and try again.")
    return form


def safe_next(path: str) -> str:
    """``path`` if it is a path of this dashboard, else ``/``: a login never sends anyone to
    another site."""
    parts = urlsplit(path)
    if parts.scheme or parts.netloc or not path.startswith("/") or path.startswith("//") \
            or "\\" in path:
        return "/"
    return path
