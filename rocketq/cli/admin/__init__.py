"""``rocketq admin``: topics, groups, offsets, messages, brokers and ACL accounts, against any
RocketMQ-protocol NameServer (what RocketMQ's mqadmin does). One module per noun, each a thin
face over the admin client (``rocketq.client.admin``): it parses the arguments, calls the
client, prints. ``common`` holds the connection options they share."""

from __future__ import annotations

from typing import Any

from . import acl, cluster, groups, messages, offsets, topics
from .common import (
    DEFAULT_NAMESRV,
    DEFAULT_QUEUES,
    NAMESRV_ENV,
    add_connection_options,
    default_namesrv,
    security,
)


def add_admin_parser(sub: Any) -> None:
    """``rocketq admin`` and its subcommands, on the ``rocketq`` command's subparsers."""
    admin = sub.add_parser("admin", help="administer topics, groups and messages",
                           description="Administer topics, groups and messages through a "
                                       "NameServer (what RocketMQ's mqadmin does). The "
                                       "connection options may also follow the subcommand.")
    add_connection_options(admin, defaults=True)
    nouns = admin.add_subparsers(dest="admin_group", required=True, metavar="WHAT")
    for module in (topics, cluster, groups, offsets, messages, acl):
        module.add_parsers(nouns)


__all__ = ["DEFAULT_NAMESRV", "DEFAULT_QUEUES", "NAMESRV_ENV", "add_admin_parser",
           "add_connection_options", "default_namesrv", "security"]
