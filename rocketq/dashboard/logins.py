"""Who may do what on the dashboard: every change needs a logged-in user.

- **Without a user file** the dashboard is read-only: every page shows, without its forms,
  and every change (a POST) is answered 403 with how to turn changes on (``READ_ONLY``).
  Nobody could log in, and a change nobody logged in for is what this refuses.
- **With a user file** (``--users``) every page but the login form, the style sheet and the
  health check needs a logged-in user (``AccessGate``): a page asked for without one
  redirects to the login form, a change posted without one is answered 401 with it.
- **Sessions.** A login puts the user's name in the session with a stamp of its entry in
  the user file (``users.stamp``). Each request looks the name up in the file as it is now:
  a user removed, or given a new password, is logged out at once. A session lasts
  ``SESSION_MAX_AGE`` from the last request (the cookie is renewed at most once a minute).
- **Password checks** run off the event loop, a few at a time, and an address that keeps
  failing is refused a while (``throttle``).
"""

from __future__ import annotations

import hmac
import logging
import time
from urllib.parse import quote, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from . import inputs
from .security import change_form, safe_next
from .throttle import Busy
from .users import UserFile, stamp
from .web import USER_KEY, render, state

log = logging.getLogger("rocketq.dashboard")

#: How long a session lasts after its last request, in seconds.
SESSION_MAX_AGE = 8 * 3600
#: Seconds between two renewals of a logged-in session's cookie.
RENEW_EVERY = 60
#: The session keys of the stamp of the user's entry, and of the session's last renewal.
STAMP_KEY = "stamp"
RENEWED_KEY = "renewed"
#: Paths served without a login.
OPEN_PATHS = ("/login", "/static/", "/healthz")
#: What a change is answered without a user file.
READ_ONLY = ("This dashboard is read-only: it was started without a user file, and a change "
             "needs a logged-in user. To make changes, add a user with "
             "'rocketq dashboard add-user NAME --users FILE' and start the dashboard with "
             "'--users FILE' (rocketq standalone: '--dashboard-users FILE').")


class AccessGate:
    """ASGI middleware (inside the sessions): without a user file nothing but pages to read;
    with one, nothing but ``OPEN_PATHS`` without a logged-in user whose session is still
    good."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        users = state(request).users
        reading = request.method in ("GET", "HEAD")
        if users is None:
            if reading:
                await self.app(scope, receive, send)
                return
            response: Response = render(request, "error.html", {
                "status": 403, "title": "Read-only", "detail": READ_ONLY}, status=403)
            await response(scope, receive, send)
            return
        if logged_in(request, users) or scope["path"].startswith(OPEN_PATHS):
            await self.app(scope, receive, send)
            return
        if reading:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            response = RedirectResponse(f"/login?next={quote(target, safe='')}",
                                        status_code=303)
        else:
            response = login_page(request, "Log in to make changes.", status=401,
                                  next_path=_referer_path(request))
        await response(scope, receive, send)


def logged_in(request: Request, users: UserFile) -> str | None:
    """The session's user if it is still good: the name is in the user file with the entry
    it logged in with. A session that is not is cleared. A good one is renewed once a
    minute, so that it lasts SESSION_MAX_AGE from the last request."""
    session = request.session
    name = session.get(USER_KEY)
    if not name:
        return None
    encoded = users.entry(name) if isinstance(name, str) else None
    got = session.get(STAMP_KEY)
    if encoded is None or not isinstance(got, str) \
            or not hmac.compare_digest(got.encode(), stamp(encoded).encode()):
        log.info("dashboard: the session of %r ended: the user file no longer has this user "
                 "with this password", name)
        session.clear()
        return None
    now = int(time.time())
    renewed = session.get(RENEWED_KEY)
    if not isinstance(renewed, int) or now - renewed >= RENEW_EVERY:
        session[RENEWED_KEY] = now
    return name


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
    """POST /login: check the name and password against the user file (in a worker thread,
    a few at a time); on success a new session (a new CSRF token too) holds the user's name
    and the stamp of its entry. An address that failed too often lately is answered 429
    without a check."""
    dash = state(request)
    if dash.users is None:
        return RedirectResponse("/", status_code=303)
    users = dash.users
    form = await change_form(request)
    name = inputs.text(form, "username", required=False, limit=64)
    password = inputs.secret(form, "password", limit=1024)
    target = safe_next(inputs.text(form, "next", required=False, limit=2048) or "/")
    address = request.client.host if request.client else "?"
    wait = dash.throttle.refused_for(address)
    if wait:
        log.warning("dashboard: login for %r from %s refused: too many failures", name,
                    address)
        return _try_later(request, f"Too many failed logins from your address: try again "
                                   f"in {wait} s.", wait, target)
    encoded = None
    if name and password:
        try:
            encoded = await dash.throttle.check(lambda: users.authenticate(name, password))
        except Busy:
            return _try_later(request, "Too many logins at once: try again in a moment.", 1,
                              target)
    if encoded is None:
        dash.throttle.failed(address)
        log.warning("dashboard: failed login for %r from %s", name, address)
        return login_page(request, "Wrong user name or password.", status=401,
                          next_path=target)
    request.session.clear()
    request.session[USER_KEY] = name
    request.session[STAMP_KEY] = stamp(encoded)
    request.session[RENEWED_KEY] = int(time.time())
    log.info("dashboard: %s logged in", name)
    return RedirectResponse(target, status_code=303)


def _try_later(request: Request, problem: str, seconds: int, target: str) -> Response:
    response = login_page(request, problem, status=429, next_path=target)
    response.headers["Retry-After"] = str(seconds)
    return response


async def logout(request: Request) -> Response:
    """POST /logout: the session is forgotten."""
    await change_form(request)
    request.session.clear()
    return RedirectResponse("/login" if state(request).login_required else "/",
                            status_code=303)


def _referer_path(request: Request) -> str:
    referer = request.headers.get("referer", "")
    parts = urlsplit(referer)
    if parts.netloc and parts.netloc != request.headers.get("host"):
        return "/"
    return safe_next(parts.path + (f"?{parts.query}" if parts.query else "")) if referer \
        else "/"
