"""The ``rocketq`` command: run a NameServer, a Broker, both (standalone), or administer.

    rocketq standalone                      # NameServer + Broker in one process
    rocketq namesrv --port 9876
    rocketq broker -c broker.conf
    rocketq admin topic list --namesrv 127.0.0.1:9876
    rocketq bench produce --start-broker --mode async --count 100000
    rocketq dashboard --namesrv 127.0.0.1:9876 --port 8080

Each command group is a module of its own that adds its sub-parser and holds its run
function: ``namesrv.py``, ``controller.py``, ``broker.py``, ``standalone.py``,
``cluster.py``, ``admin/`` (one module per noun), ``bench.py``, ``dashboard.py``; what they
share is in ``common.py`` (and the metrics options in ``metrics.py``). This module holds the
top-level parser that registers them, and ``main``, which runs the chosen command and turns
its failure into an exit code and a one-line error.
"""

from __future__ import annotations

import argparse
import logging
import sys

from .._version import __version__
from .broker import add_broker_parser
from .common import ListenError, Parser, failure_reason
from .controller import add_controller_parser
from .namesrv import add_namesrv_parser
from .standalone import add_standalone_parser, spawn_standalone

__all__ = ["build_parser", "main", "spawn_standalone"]


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
                        stream=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The ``rocketq`` parser: the global options, then each command group, in the order
    ``rocketq --help`` lists them."""
    # Imported here, not above: they load the client (and bench numpy), which a program that
    # only wants spawn_standalone from this package does not need.
    from .admin import add_admin_parser
    from .bench import add_bench_parser
    from .cluster import add_cluster_parser
    from .dashboard import add_dashboard_parser

    parser = Parser(
        prog="rocketq", description="rocketq: a RocketMQ-compatible message queue in Python.")
    parser.add_argument("--version", action="version", version=f"rocketq {__version__}")
    parser.add_argument("--log-level", default=None,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="default INFO for servers, WARNING for admin")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add_group in (add_namesrv_parser, add_controller_parser, add_broker_parser,
                      add_standalone_parser, add_cluster_parser, add_admin_parser,
                      add_bench_parser, add_dashboard_parser):
        add_group(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.log_level or ("WARNING" if args.command in ("admin", "bench")
                                      else "INFO"))
    if args.command == "standalone" and args.broker_port is None:
        args.broker_port = 10911
    from ..remoting import run

    try:
        result = run(args.func(args))
    except KeyboardInterrupt:
        return 130
    except ListenError as exc:
        print(f"rocketq {args.command}: {exc.strerror}", file=sys.stderr)
        return 1
    except Exception as exc:
        if args.command in ("admin", "bench") and isinstance(exc, _client_failures()):
            # What the user asked for and why it failed, on one line: no traceback.
            print(f"rocketq {args.command}: {_what(args)}: {failure_reason(exc)}",
                  file=sys.stderr)
            return 1
        if isinstance(exc, (OSError, ValueError)):
            print(f"rocketq: {exc}", file=sys.stderr)
            return 1
        raise
    return int(result or 0)


def _client_failures() -> tuple[type[BaseException], ...]:
    """What a client call raises when it cannot do what it was asked: ClientError (which the
    remoting errors derive from), and the OSErrors and ValueErrors of a network or an input
    that is not what it should be."""
    from ..client.errors import ClientError
    from ..remoting import RemotingError

    return (ClientError, RemotingError, OSError, ValueError)


def _what(args: argparse.Namespace) -> str:
    """The subcommand words of an admin or bench command line ("topic delete", "produce")."""
    words = [getattr(args, name, None) for name in ("admin_group", "action", "config_action",
                                                    "bench")]
    return " ".join(w for w in words if isinstance(w, str)) or args.command


if __name__ == "__main__":
    raise SystemExit(main())
