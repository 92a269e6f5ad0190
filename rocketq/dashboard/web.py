"""What every page of the dashboard shares: its state, the templates, rendering with the
session's user, CSRF token and notices, and the redirect after a change.

The templates are Jinja2 with autoescaping on for every file, so whatever comes from a
person or from the cluster (topic names, message bodies, properties, client ids) is written
as text, never as markup.
"""

from __future__ import annotations

import datetime
import pathlib
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..protocol import Perm
from .inputs import EPOCH, MAX_MS
from .sampler import Sampler
from .throttle import LoginThrottle
from .users import UserFile

if TYPE_CHECKING:
    from ..client.admin import AsyncAdmin

HERE = pathlib.Path(__file__).resolve().parent
#: The session key of the logged-in user's name.
USER_KEY = "user"
#: The session key of the CSRF token every form carries.
CSRF_KEY = "csrf"
#: The session key of the notices shown once on the next page (after a change's redirect).
FLASH_KEY = "flash"


@dataclass
class DashboardState:
    """What the pages work with: the admin client, the sampler, when logins are on the user
    file, and what keeps password checks from swamping the event loop."""

    admin: AsyncAdmin
    sampler: Sampler
    users: UserFile | None = None
    throttle: LoginThrottle = field(default_factory=LoginThrottle)

    @property
    def login_required(self) -> bool:
        """Whether every page needs a logged-in user (a user file was given)."""
        return self.users is not None

    @property
    def read_only(self) -> bool:
        """Whether the dashboard refuses every change: without a user file nobody can log
        in, and a change needs a logged-in user."""
        return self.users is None


def state(request: Request) -> DashboardState:
    """The dashboard's state, from the application that serves ``request``."""
    return request.app.state.dashboard


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use; every form posts it back."""
    token = request.session.get(CSRF_KEY)
    if not isinstance(token, str) or len(token) < 32:
        token = secrets.token_urlsafe(32)
        request.session[CSRF_KEY] = token
    return token


def flash(request: Request, text: str, kind: str = "ok") -> None:
    """A notice for the next page shown to this session (``kind``: ok or error)."""
    notices = list(request.session.get(FLASH_KEY) or [])[-4:]
    notices.append([kind, text])
    request.session[FLASH_KEY] = notices


def redirect(request: Request, path: str, notice: str | None = None) -> Response:
    """303 See Other to ``path`` (a page of the dashboard), with ``notice`` shown there: a
    change answers so, and reloading the page it lands on does not post again."""
    if notice:
        flash(request, notice)
    return RedirectResponse(path, status_code=303)


def topic_path(name: str) -> str:
    """The path of a topic's page (a name may hold '%' and '|', quoted here)."""
    return "/topics/" + quote(name, safe="")


def group_path(name: str) -> str:
    """The path of a consumer group's page."""
    return "/groups/" + quote(name, safe="")


def _ms_time(ms: Any) -> str:
    """ms since the epoch as UTC date and time (to the ms; the tables' headings say UTC); ''
    for 0 or nothing."""
    try:
        value = int(ms)
    except (TypeError, ValueError):
        return ""
    if value <= 0:
        return ""
    if value > MAX_MS:
        return str(value)
    when = EPOCH + datetime.timedelta(milliseconds=value)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _perm(value: Any) -> str:
    try:
        return Perm.to_string(int(value))
    except (TypeError, ValueError):
        return str(value)


def _percent(value: Any) -> str:
    """A ratio (0.42) or a percentage (42.0) as ``42.0%``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "" if value is None else str(value)
    return f"{number * 100 if number <= 1 else number:.1f}%"


def _number(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def _preview(body: Any, limit: int = 4096) -> str:
    """A message body as text: UTF-8 where it is, with a note when it is binary or cut."""
    if body is None:
        return ""
    data = bytes(body)
    cut = len(data) > limit
    data = data[:limit]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        text = f"(binary, shown as UTF-8 with replacements)\n{text}"
    return text + (f"\n… ({len(bytes(body)):,} bytes in all)" if cut else "")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.Undefined)
    env.filters.update(q=lambda v: quote(str(v), safe=""), ms_time=_ms_time, perm=_perm,
                       percent=_percent, number=_number, preview=_preview)
    return env


ENV = _environment()


def render(request: Request, template: str, context: dict[str, Any] | None = None, *,
           status: int = 200) -> HTMLResponse:
    """``template`` rendered for ``request``'s session: its user, its CSRF token, its
    notices (shown once), whether logins are on or the dashboard is read-only (its forms are
    then left out), the sampler's last failure."""
    dash = request.app.state.dashboard
    has_session = "session" in request.scope
    session = request.session if has_session else {}
    values = {
        "request": request,
        "user": session.get(USER_KEY),
        "csrf": csrf_token(request) if has_session else "",
        "notices": session.pop(FLASH_KEY, None) or [],
        "login_required": dash.login_required,
        "read_only": dash.read_only,
        "sampler_error": dash.sampler.error,
        "path": request.url.path,
        **(context or {}),
    }
    html = ENV.get_template(template).render(values)
    # Pages hold what a login protects: a browser keeps no copy once it leaves them.
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})
