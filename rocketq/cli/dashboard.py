"""``rocketq dashboard``: the web dashboard against a NameServer, and ``rocketq dashboard
add-user`` for its user file; also the dashboard a standalone serves with
``--dashboard-port``.

    rocketq dashboard --namesrv 127.0.0.1:9876 --port 8080
    rocketq dashboard add-user alice --users dashboard-users
    rocketq dashboard --users dashboard-users --access-key rocketmq2 --secret-key ...

Without a user file the dashboard is read-only; with one, every page needs a login.
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import logging
import os
import secrets
import ssl
import sys
from typing import Any

log = logging.getLogger("rocketq")

#: The NameServer addresses when --namesrv is not given, as RocketMQ's tools read them.
NAMESRV_ENV = "NAMESRV_ADDR"
DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"


def add_dashboard_parser(sub: Any) -> None:
    """``rocketq dashboard`` and ``rocketq dashboard add-user`` on the command's
    subparsers."""
    from .admin.common import namesrv_option

    p = sub.add_parser(
        "dashboard", help="serve the web dashboard (topics, groups, messages, charts)",
        usage="%(prog)s [options]\n       %(prog)s add-user NAME --users PATH",
        description="Serve the web dashboard: the cluster's brokers, topics, consumer groups "
                    "and messages, with charts of the last minutes, through a NameServer. "
                    "Read-only without --users; with --users every page needs a login, and "
                    "its users may make changes.")
    p.add_argument("--namesrv", default=os.environ.get(NAMESRV_ENV, "").strip()
                   or DEFAULT_NAMESRV, type=namesrv_option,
                   help=f"NameServer addresses, ';'-separated (default: ${NAMESRV_ENV}, else "
                        f"{DEFAULT_NAMESRV})")
    p.add_argument("--host", default=DEFAULT_HOST, help="address to serve on")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to serve on (0: any)")
    p.add_argument("--users", metavar="PATH",
                   help="a user file (name:hash lines, written by add-user): logins on, and "
                        "changes for the users who log in (without it: read-only)")
    p.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="also answer requests that name the dashboard NAME (a host name, "
                        "*.example.com or an address; repeatable); besides --host, "
                        "localhost, 127.0.0.1 and [::1], any other Host is refused 400")
    p.add_argument("--session-secret-file", metavar="PATH",
                   help="sign sessions with the secret in this file (made if missing), so "
                        "that logins last across restarts (default: a new secret each start)")
    p.add_argument("--access-key", default=os.environ.get("ROCKETQ_ACCESS_KEY"),
                   help="ACL access key the dashboard signs with (default: "
                        "$ROCKETQ_ACCESS_KEY); needs --users")
    p.add_argument("--secret-key", default=os.environ.get("ROCKETQ_SECRET_KEY"),
                   help="ACL secret key (default: $ROCKETQ_SECRET_KEY)")
    p.add_argument("--tls", action="store_true", help="connect to the cluster with TLS")
    p.add_argument("--tls-ca", metavar="FILE",
                   help="with --tls: trust the servers' certificates signed by this CA")
    p.add_argument("--interval", type=float, default=5.0,
                   help="seconds between two samples of TPS and lag for the charts")
    p.set_defaults(func=run_dashboard, dashboard_action=None)
    actions = p.add_subparsers(dest="dashboard_action", metavar="ACTION")
    a = actions.add_parser("add-user", prog="rocketq dashboard add-user",
                           help="add a user to a user file (or change a user's password); "
                                "the password is asked for, or read from standard input")
    a.add_argument("name")
    a.add_argument("--users", metavar="PATH", default=argparse.SUPPRESS,
                   help="the user file (made if missing)")
    a.set_defaults(func=add_user)


def add_standalone_options(p: argparse.ArgumentParser) -> None:
    """``--dashboard-port`` and its companions on ``rocketq standalone``."""
    p.add_argument("--dashboard-port", type=int, metavar="PORT",
                   help="also serve the web dashboard on this port (0: any free port)")
    p.add_argument("--dashboard-host", default=DEFAULT_HOST,
                   help="with --dashboard-port: address to serve it on")
    p.add_argument("--dashboard-users", metavar="PATH",
                   help="with --dashboard-port: its user file, for logins and changes "
                        "(without it the dashboard is read-only; needed when the ACL is on)")
    p.add_argument("--dashboard-allowed-host", action="append", metavar="NAME",
                   help="with --dashboard-port: also answer requests that name it NAME "
                        "(repeatable; see rocketq dashboard --allowed-host)")


def _read_password(name: str) -> str:
    """A password from the terminal (asked twice), or the first line of standard input."""
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords differ")
        return first
    return sys.stdin.readline().rstrip("\r\n")


async def add_user(args: argparse.Namespace) -> int:
    """``rocketq dashboard add-user NAME --users PATH``."""
    from ..dashboard import UserFile
    from ..dashboard.users import check_user_name

    path = getattr(args, "users", None)
    if not path:
        raise ValueError("name the user file with --users PATH")
    check_user_name(args.name)
    new = UserFile(path).add(args.name, _read_password(args.name))
    print(f"{'added' if new else 'changed the password of'} {args.name} in {path}")
    return 0


def session_secret(path: str | None) -> str | None:
    """The secret in ``path``, written there first (owner-only) when the file is missing;
    None without a path (the dashboard then makes one of its own)."""
    if not path:
        return None
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(48) + "\n")
    with open(path, encoding="utf-8") as f:
        secret = f.read().strip()
    if len(secret) < 32:
        raise ValueError(f"the session secret in {path} is shorter than 32 characters")
    return secret


def _credentials(args: argparse.Namespace) -> tuple[str, str] | None:
    if bool(args.access_key) != bool(args.secret_key):
        raise ValueError("give both --access-key and --secret-key (or neither)")
    return (args.access_key, args.secret_key) if args.access_key else None


def refuse_unguarded(credentials: object, users: str | None, option: str) -> None:
    """With ACL credentials the dashboard can do whatever they allow, for anyone who reaches
    it: refuse to start without a user file."""
    if credentials and not users:
        raise ValueError(f"the dashboard holds ACL credentials: give it a user file with "
                         f"{option} PATH so that only its users can use them (add one with "
                         f"rocketq dashboard add-user NAME --users PATH)")


def _warn_if_open(host: str, users: str | None, allowed: list[str], option: str) -> None:
    """Warn of what serving beyond this machine means: pages anyone can read without a
    user file, and a Host check that refuses the names it is reached by until they are
    allowed."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    loopback = address.is_loopback if address is not None else host == "localhost"
    if not loopback and not users:
        log.warning("the dashboard serves %s without a user file: anyone who reaches it can "
                    "read topics, groups and messages (changes are off without users)", host)
    if address is not None and address.is_unspecified and not allowed:
        log.warning("the dashboard serves every address (%s): requests naming this machine "
                    "by another name or address are refused until it is given with %s",
                    host, option)


async def run_dashboard(args: argparse.Namespace) -> int:
    """``rocketq dashboard``: serve until SIGINT or SIGTERM."""
    from ..asgi import AsgiServer
    from ..client.admin import AsyncAdmin
    from ..dashboard import create_app
    from .common import _listening, _stop_on_signal

    credentials = _credentials(args)
    refuse_unguarded(credentials, args.users, "--users")
    tls: Any = None
    if args.tls or args.tls_ca:
        tls = ssl.create_default_context(cafile=args.tls_ca) if args.tls_ca else True
    if args.interval <= 0:
        raise ValueError("--interval must be more than 0 seconds")
    secret = session_secret(args.session_secret_file)
    stop = _stop_on_signal()
    admin = AsyncAdmin(args.namesrv, credentials=credentials, tls=tls)
    try:
        allowed = list(args.allowed_host or ())
        app = create_app(admin, users=args.users, interval=args.interval, close_admin=True,
                         session_secret=secret, hosts=[args.host, *allowed])
        _warn_if_open(args.host, args.users, allowed, "--allowed-host")
        server = AsgiServer(app, args.host, args.port)
        with _listening("dashboard"):
            await server.start()
    except BaseException:
        await admin.close()
        raise
    print(f"rocketq dashboard on {server.url} (NameServer {args.namesrv}"
          f"{', logins on' if args.users else ', read-only'}); Ctrl-C stops", flush=True)
    await stop.wait()
    await server.stop()
    return 0


async def start_for_standalone(args: argparse.Namespace, broker: Any, namesrv: str) -> Any:
    """The dashboard of ``rocketq standalone --dashboard-port``, started on its loop, or
    None without that option. It signs with the broker's own credentials when the ACL is
    on (and then needs --dashboard-users), and connects with TLS when the broker does. When
    it cannot start, its admin client is closed before the error goes on."""
    if args.dashboard_port is None:
        return None
    from ..asgi import AsgiServer
    from ..broker.security import inner_credentials, outgoing_tls
    from ..client.admin import AsyncAdmin
    from ..dashboard import create_app
    from .common import _listening

    credentials = inner_credentials(broker.config, broker.acl) if broker.acl else None
    admin = AsyncAdmin(namesrv, credentials=credentials,
                       tls=outgoing_tls(broker.config) or None)
    try:
        allowed = list(args.dashboard_allowed_host or ())
        app = create_app(admin, users=args.dashboard_users, close_admin=True,
                         hosts=[args.dashboard_host, *allowed])
        _warn_if_open(args.dashboard_host, args.dashboard_users, allowed,
                      "--dashboard-allowed-host")
        server = AsgiServer(app, args.dashboard_host, args.dashboard_port)
        with _listening("dashboard"):
            await server.start()
    except BaseException:
        await admin.close()
        raise
    print(f"dashboard on {server.url}{'' if args.dashboard_users else ' (read-only)'}",
          flush=True)
    return server
