"""``rocketq admin acl``: the accounts and global white list of the brokers' plain_acl.yml
(mqadmin getAccessConfigSubCommand, updateAclConfig, deleteAclConfig, updateGlobalWhiteAddr).
Each needs an admin account (``--access-key``/``--secret-key``) on brokers with aclEnable."""

from __future__ import annotations

import argparse
from typing import Any

from ...client.admin import AsyncAdmin
from ...client.admin.acl import PERMS
from .common import (
    add_target_options,
    leaf,
    noun,
    on_each,
    print_json,
    target_addresses,
    with_admin,
)


def add_parsers(groups: Any) -> None:
    acl = noun(groups, "acl", help="ACL accounts of the brokers (plain_acl.yml)",
               description="The accounts of the brokers' plain_acl.yml, read and changed "
                           "over the brokers' ACL admin requests; each broker takes a change "
                           "at once. Needs an admin account (--access-key, --secret-key).")
    p = leaf(acl, "list", help="every account, and the global white list")
    p.add_argument("--broker", metavar="ADDR", help="of this broker (default: every master)")
    p.add_argument("--secrets", action="store_true", help="show the secret keys")
    p.add_argument("--json", action="store_true", help="as JSON")
    p.set_defaults(func=acl_list)
    p = leaf(acl, "update", help="create an account, or change the settings given of one")
    p.add_argument("user_access_key", metavar="ACCESS_KEY")
    p.add_argument("--user-secret", metavar="SECRET",
                   help="the account's secret key (needed for a new account)")
    p.add_argument("--white-address", metavar="PATTERN",
                   help="addresses whose requests with this key need no signature")
    p.add_argument("--admin", action=argparse.BooleanOptionalAction,
                   help="may it send admin requests")
    p.add_argument("--default-topic-perm", type=str.upper, choices=PERMS)
    p.add_argument("--default-group-perm", type=str.upper, choices=PERMS)
    p.add_argument("--topic-perm", action="append", metavar="TOPIC=PERM", type=_perm_item,
                   help="a topic's permission (may be repeated; replaces the list)")
    p.add_argument("--group-perm", action="append", metavar="GROUP=PERM", type=_perm_item,
                   help="a group's permission (may be repeated; replaces the list)")
    add_target_options(p, required=False, default_text="; default: every master broker")
    p.set_defaults(func=acl_update)
    p = leaf(acl, "delete", help="delete an account")
    p.add_argument("user_access_key", metavar="ACCESS_KEY")
    add_target_options(p, required=False, default_text="; default: every master broker")
    p.set_defaults(func=acl_delete)
    p = leaf(acl, "white-list", help="replace the global white list (addresses whose "
                                     "requests need no account)")
    p.add_argument("addresses", nargs="*", metavar="PATTERN",
                   help="e.g. 10.10.103.* (none: an empty list)")
    add_target_options(p, required=False, default_text="; default: every master broker")
    p.set_defaults(func=acl_white_list)


def _perm_item(text: str) -> tuple[str, str]:
    name, eq, perm = text.partition("=")
    if not eq or not name.strip() or perm.strip().upper() not in (*PERMS, "SUB|PUB"):
        raise argparse.ArgumentTypeError(f"not NAME=PERM: {text!r} (PERM one of "
                                         f"{', '.join(PERMS)})")
    return name.strip(), perm.strip().upper()


async def acl_list(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        config = await admin.acl_config(broker=args.broker)

        def secret(text: str) -> str:
            return text if args.secrets else "*" * min(len(text), 8)

        if args.json:
            print_json({"globalWhiteAddresses": config.global_white_addresses, "accounts": [
                {"accessKey": u.access_key, "secretKey": secret(u.secret_key),
                 "whiteRemoteAddress": u.white_remote_address, "admin": u.admin,
                 "defaultTopicPerm": u.default_topic_perm,
                 "defaultGroupPerm": u.default_group_perm, "topicPerms": u.topic_perms,
                 "groupPerms": u.group_perms, "brokers": u.brokers} for u in config.users]})
            return 0
        print("global white list: " + (", ".join(config.global_white_addresses) or "-"))
        print(f"{'access key':<24} {'secret':<10} {'admin':<5} {'topics':<8} {'groups':<8} "
              f"{'white address':<16} permissions")
        for u in config.users:
            perms = [f"{k}={v}" for k, v in {**u.topic_perms, **u.group_perms}.items()]
            print(f"{u.access_key:<24} {secret(u.secret_key):<10} {str(u.admin).lower():<5} "
                  f"{u.default_topic_perm:<8} {u.default_group_perm:<8} "
                  f"{u.white_remote_address or '-':<16} {' '.join(perms) or '-'}")
        return 0
    return await with_admin(args, body)


async def acl_update(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        failed = await on_each(
            await target_addresses(admin, args),
            lambda addr: admin.update_acl_user(
                args.user_access_key, secret_key=args.user_secret,
                white_remote_address=args.white_address, admin=args.admin,
                default_topic_perm=args.default_topic_perm,
                default_group_perm=args.default_group_perm,
                topic_perms=None if args.topic_perm is None else dict(args.topic_perm),
                group_perms=None if args.group_perm is None else dict(args.group_perm),
                brokers=[addr]),
            lambda addr, _: print(f"{addr}: updated {args.user_access_key}"))
        return 1 if failed else 0
    return await with_admin(args, body)


async def acl_delete(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        failed = await on_each(
            await target_addresses(admin, args),
            lambda addr: admin.delete_acl_user(args.user_access_key, brokers=[addr]),
            lambda addr, _: print(f"{addr}: deleted {args.user_access_key}"))
        return 1 if failed else 0
    return await with_admin(args, body)


async def acl_white_list(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        failed = await on_each(
            await target_addresses(admin, args),
            lambda addr: admin.update_acl_white_list(args.addresses, brokers=[addr]),
            lambda addr, _: print(f"{addr}: global white list "
                                  f"{', '.join(args.addresses) or '(empty)'}"))
        return 1 if failed else 0
    return await with_admin(args, body)
