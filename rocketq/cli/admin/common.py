"""What every ``rocketq admin`` command shares: the connection options (where the NameServer
is, the ACL keys, TLS), the admin client they make, and how a subcommand's parser is made."""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ...client.admin import DEFAULT_TOPIC_QUEUES, AsyncAdmin

DEFAULT_NAMESRV = "127.0.0.1:9876"
#: The NameServer addresses when --namesrv is not given, as RocketMQ's tools read them.
NAMESRV_ENV = "NAMESRV_ADDR"
#: Queues of a topic created without saying how many (as mqadmin's updateTopic).
DEFAULT_QUEUES = DEFAULT_TOPIC_QUEUES


def default_namesrv() -> str:
    """$NAMESRV_ADDR, else 127.0.0.1:9876: where the tools look when --namesrv is not given."""
    return os.environ.get(NAMESRV_ENV, "").strip() or DEFAULT_NAMESRV


def namesrv_option(value: str) -> str:
    """argparse's ``type`` of ``--namesrv`` (and of ``$NAMESRV_ADDR``, its default): the
    addresses as given, or a usage error naming the bad one."""
    from ...client.checks import check_namesrv
    from ...client.errors import InvalidArgumentError

    try:
        check_namesrv(value)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (from --namesrv, else ${NAMESRV_ENV})"
                                         ) from None
    return value


def add_connection_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """``--namesrv``, the ACL keys and TLS. Added both to ``admin`` (``defaults``: the values
    when none is given) and to every admin subcommand, so they may come before or after the
    subcommand; there they default to nothing at all, not to overwrite one given before."""
    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("-n", "--namesrv", default=default(default_namesrv()), type=namesrv_option,
                        help=f"NameServer addresses, ';'-separated (default: ${NAMESRV_ENV}, "
                             f"else {DEFAULT_NAMESRV})")
    parser.add_argument("--access-key", default=default(os.environ.get("ROCKETQ_ACCESS_KEY")),
                        help="ACL access key (default: $ROCKETQ_ACCESS_KEY)")
    parser.add_argument("--secret-key", default=default(os.environ.get("ROCKETQ_SECRET_KEY")),
                        help="ACL secret key (default: $ROCKETQ_SECRET_KEY)")
    parser.add_argument("--tls", action="store_true", default=default(False),
                        help="connect with TLS")
    parser.add_argument("--tls-ca", metavar="FILE", default=default(None),
                        help="with --tls: trust the servers' certificates signed by this CA")


def _connection_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    add_connection_options(parent, defaults=False)
    return parent


def leaf(subparsers: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """An admin subcommand's parser, which takes the connection options too."""
    return subparsers.add_parser(name, parents=[_connection_parent()], **kwargs)


def noun(groups: Any, name: str, **kwargs: Any) -> Any:
    """The subparsers of ``rocketq admin NAME ACTION``."""
    return groups.add_parser(name, **kwargs).add_subparsers(
        dest="action", required=True, metavar="ACTION")


def add_target_options(parser: argparse.ArgumentParser, *, required: bool,
                       default_text: str = "") -> None:
    """``--broker ADDR`` (repeatable) or ``--cluster NAME``: the brokers a change goes to."""
    target = parser.add_mutually_exclusive_group(required=required)
    target.add_argument("--broker", action="append", metavar="ADDR",
                        help="a broker's address, host:port (may be repeated)" + default_text)
    target.add_argument("--cluster", metavar="NAME",
                        help="every broker of this cluster, masters and slaves, as the "
                             "NameServer (--namesrv) knows them")


def security(args: argparse.Namespace) -> dict[str, Any]:
    """The client options ``--access-key``/``--secret-key`` and ``--tls``/``--tls-ca`` ask
    for."""
    if bool(args.access_key) != bool(args.secret_key):
        raise SystemExit("give both --access-key and --secret-key (or neither)")
    tls: Any = None
    if args.tls or args.tls_ca:
        tls = ssl.create_default_context(cafile=args.tls_ca) if args.tls_ca else True
    return {"credentials": (args.access_key, args.secret_key) if args.access_key else None,
            "tls": tls}


async def with_admin(args: argparse.Namespace,
                     body: Callable[[AsyncAdmin], Awaitable[int]]) -> int:
    """Run ``body(admin)`` and close the admin. What it raises (a ClientError: no such
    topic, a broker that refused, a NameServer that cannot be reached) goes up to ``main``,
    which prints it on one line and ends the command with status 1."""
    async with AsyncAdmin(args.namesrv, **security(args)) as admin:
        return await body(admin)


async def target_addresses(admin: AsyncAdmin, args: argparse.Namespace) -> list[str]:
    """The brokers named with --broker, else those of --cluster, else every master."""
    if getattr(args, "broker", None):
        return list(args.broker)
    if getattr(args, "cluster", None):
        return await admin.broker_addresses(args.cluster)
    return sorted(set((await admin.masters()).values()))


async def on_each(addrs: list[str], change: Callable[[str], Awaitable[Any]],
                  done: Callable[[str, Any], None]) -> int:
    """Run ``change(addr)`` for each broker and hand each success to ``done``; failures (a
    refusal, a broker that cannot be reached) are reported on standard error, and one does
    not stop the others. Returns how many failed."""
    failed = 0
    for addr in addrs:
        try:
            result = await change(addr)
        except Exception as exc:  # each broker's failure is reported, the others go on
            text = str(exc).strip() or type(exc).__name__
            print(text if addr in text else f"{addr}: {text}", file=sys.stderr)
            failed += 1
            continue
        done(addr, result)
    return failed


def print_json(data: Any) -> None:
    """``data`` as indented JSON on standard output."""
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()
