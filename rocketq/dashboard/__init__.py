"""The web dashboard (``rocketq dashboard``, or ``rocketq standalone --dashboard-port``): what
RocketMQ Dashboard shows and does, served by the package itself.

It is a read-mostly view of a cluster through the admin client (``AsyncAdmin``) and never
reads a broker's files: the same calls ``rocketq admin`` makes. Pages are rendered on the
server (Starlette, Jinja2) and need no script; the charts are inline SVG drawn from a
bounded history that a sampler collects every few seconds.

- ``app``: the routes, middleware and error pages; ``create_app`` builds it.
- served by ``rocketq.asgi.AsgiServer`` (uvicorn on the running event loop), which the
  metrics port shares.
- ``cluster``, ``topics``, ``groups``, ``messages``, ``connections``: the pages.
- ``logins``: who may do what (read-only without a user file, logins and sessions);
  ``throttle``: password checks off the event loop; ``security``: trusted hosts, body
  sizes, session cookies, CSRF tokens, headers; ``users``: the user file.
- ``inputs``: checking what a person types; ``sampler`` and ``charts``: the history and its
  pictures; ``web``: what the pages share (templates, rendering).
"""

from __future__ import annotations

from .app import create_app
from .users import UserFile, UserFileError

__all__ = ["UserFile", "UserFileError", "create_app"]
