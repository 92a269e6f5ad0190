"""Who may do what on the dashboard: logins, CSRF tokens and the headers every page carries.

- **Logins.** With a user file (``--users``), every page but the login page and the style
  sheet needs a logged-in user (``LoginGate``): a page asked for without one redirects to the
  login form, a change posted without one is answered 401 with it. The session is a signed
  cookie (Starlette's SessionMiddleware over itsdangerous) holding the user's name, made
  afresh at each login.
- **CSRF.** Every form carries the session's token, and every change (always a POST) is
  refused 403 unless the token it posts is the session's (``change_form``).
- **Headers.** A Content-Security-Policy that allows no script and nothing from elsewhere,
  and no framing, so that markup slipped into a page could neither run nor be clicked
  through.
"""

from __future__ import annotations

import hmac
import logging
from urllib.parse import quote, urlsplit

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import inputs
from .web import CSRF_KEY, USER_KEY, render, state

log = logging.getLogger("rocketq.dashboard")

#: Paths served without a login.
OPEN_PATHS = ("/login", "/static/", "/healthz")
#: Headers on every answer.
HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'none'; style-src 'self'; img-src 'self' data:; "
     b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


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


class LoginGate:
    """ASGI middleware (inside SessionMiddleware): with logins on, nothing but ``OPEN_PATHS``
    without a logged-in user."""

    def __init__(self, app: ASGIApp, *, required: bool) -> None:
        self.app = app
        self.required = required

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (not self.required or scope["type"] != "http"
                or scope["path"].startswith(OPEN_PATHS) or scope["session"].get(USER_KEY)):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if request.method in ("GET", "HEAD"):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            response: Response = RedirectResponse(f"/login?next={quote(target, safe='')}",
                                                  status_code=303)
        else:
            response = login_page(request, "Log in to make changes.", status=401,
                                  next_path=_referer_path(request))
        await response(scope, receive, send)


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


def login_page(request: Request, problem: str | None = None, *, status: int = 200,
               next_path: str = "/") -> Response:
    """The login form (with ``problem`` above it)."""
    return render(request, "login.html", {"problem": problem, "next": safe_next(next_path)},
                  status=status)


async def login_form(request: Request) -> Response:
    """GET /login."""
    if not state(request).login_required:
        return RedirectResponse("/", status_code=303)
    return login_page(request, next_path=request.query_params.get("next", "/"))


async def login(request: Request) -> Response:
    """POST /login: check the name and password against the user file; on success a new
    session (a new CSRF token too) holds the user's name."""
    dash = state(request)
    if dash.users is None:
        return RedirectResponse("/", status_code=303)
    form = await change_form(request)
    name = inputs.text(form, "username", required=False, limit=64)
    password = inputs.text(form, "password", required=False, limit=1024)
    target = safe_next(inputs.text(form, "next", required=False, limit=2048) or "/")
    if not name or not password or not dash.users.authenticate(name, password):
        log.warning("dashboard: failed login for %r from %s", name,
                    request.client.host if request.client else "?")
        return login_page(request, "Wrong user name or password.", status=401,
                          next_path=target)
    request.session.clear()
    request.session[USER_KEY] = name
    log.info("dashboard: %s logged in", name)
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    """POST /logout: the session is forgotten."""
    await change_form(request)
    request.session.clear()
    return RedirectResponse("/login" if state(request).login_required else "/",
                            status_code=303)


def safe_next(path: str) -> str:
    """``path`` if it is a path of this dashboard, else ``/``: a login never sends anyone to
    another site."""
    parts = urlsplit(path)
    if parts.scheme or parts.netloc or not path.startswith("/") or path.startswith("//") \
            or "\\" in path:
        return "/"
    return path


def _referer_path(request: Request) -> str:
    referer = request.headers.get("referer", "")
    parts = urlsplit(referer)
    if parts.netloc and parts.netloc != request.headers.get("host"):
        return "/"
    return safe_next(parts.path + (f"?{parts.query}" if parts.query else "")) if referer \
        else "/"

