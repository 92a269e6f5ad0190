"""``rocketq admin cluster`` and ``rocketq admin broker``: the brokers of each cluster with
their status (mqadmin clusterList, brokerStatus), and their settings (getBrokerConfig,
updateBrokerConfig)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ...client.admin import AsyncAdmin
from .common import add_target_options, leaf, noun, on_each, print_json, with_admin


def add_parsers(groups: Any) -> None:
    cluster = noun(groups, "cluster", help="clusters")
    leaf(cluster, "list", help="brokers of each cluster").set_defaults(func=cluster_list)
    p = leaf(cluster, "status", help="one broker's runtime figures (mqadmin brokerStatus), "
                                     "key=value")
    p.add_argument("address", help="the broker's address, host:port")
    p.add_argument("--json", action="store_true", help="as JSON")
    p.set_defaults(func=broker_status)

    broker = noun(groups, "broker", help="brokers")
    config = broker.add_parser(
        "config", help="show or change a broker's settings (mqadmin getBrokerConfig, "
                       "updateBrokerConfig)",
        description="Show the settings of brokers, or change the ones that may change while a "
                    "broker runs (flushConsumerOffsetInterval, brokerPermission, "
                    "autoCreateTopicEnable, fileReservedTime, deleteWhen, ...). A broker "
                    "checks every key=value first and changes nothing if one is refused; what "
                    "it accepts is saved in <storePathRootDir>/config/broker.properties and "
                    "applied over broker.conf at its next start.").add_subparsers(
        dest="config_action", required=True, metavar="ACTION")
    for name, func, text in (("get", broker_config_get, "print every setting, key=value"),
                             ("update", broker_config_update, "change settings")):
        p = leaf(config, name, help=text)
        add_target_options(p, required=True)
        if name == "update":
            p.add_argument("settings", nargs="+", metavar="KEY=VALUE",
                           help="e.g. flushConsumerOffsetInterval=6000")
        p.set_defaults(func=func)


async def cluster_list(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        print(f"{'cluster':<18} {'broker':<16} {'id':>3} {'address':<22} {'role':<13} "
              f"{'epoch':>5} {'version':<16} {'put':>10} {'get':>10} {'max offset':>14} "
              f"{'lag':>10}")
        for b in await admin.cluster():
            table = b.runtime
            role = table.get("brokerRole", "-")
            # A slave's lag: the bytes of its master's CommitLog it does not hold yet.
            lag = "-" if b.behind_master is None else str(b.behind_master)
            print(f"{b.cluster:<18} {b.broker_name:<16} {b.broker_id:>3} {b.address:<22} "
                  f"{role:<13} {table.get('masterEpoch', '-'):>5} "
                  f"{table.get('brokerVersionDesc', '-'):<16} "
                  f"{table.get('msgPutTotalTodayNow', '-'):>10} "
                  f"{table.get('msgGetTotalTodayNow', '-'):>10} "
                  f"{table.get('commitLogMaxOffset', '-'):>14} {lag:>10}")
            if b.error:
                print(f"{b.address}: {b.error}", file=sys.stderr)
        return 0
    return await with_admin(args, body)


async def broker_status(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        found = [b for b in await admin.cluster() if b.address == args.address]
        if not found:
            print(f"the NameServer lists no broker at {args.address}", file=sys.stderr)
            return 1
        b = found[0]
        if b.error:
            print(f"{b.address}: {b.error}", file=sys.stderr)
            return 1
        if args.json:
            print_json({"cluster": b.cluster, "brokerName": b.broker_name,
                        "brokerId": b.broker_id, "address": b.address, "role": b.role,
                        "version": b.version, "rocketqVersion": b.rocketq_version,
                        "epoch": b.epoch, "putTps": b.put_tps,
                        "getTps": b.get_tps, "putToday": b.put_today, "getToday": b.get_today,
                        "diskRatio": b.disk_ratio, "dispatchBehind": b.dispatch_behind,
                        "runtime": b.runtime})
        else:
            for key, value in sorted(b.runtime.items()):
                print(f"{key}={value}")
        return 0
    return await with_admin(args, body)


async def _config_targets(admin: AsyncAdmin, args: argparse.Namespace) -> list[str]:
    """The brokers named with --broker, or every one of --cluster (masters and slaves)."""
    return list(args.broker) if args.broker else await admin.broker_addresses(args.cluster)


async def broker_config_get(args: argparse.Namespace) -> int:
    async def body(admin: AsyncAdmin) -> int:
        addrs = await _config_targets(admin, args)

        def show(addr: str, values: dict[str, str]) -> None:
            if args.cluster or len(addrs) > 1:
                print(f"# {addr}")  # a comment line to properties readers
            sys.stdout.write("".join(f"{k}={v}\n" for k, v in values.items()))

        failed = await on_each(addrs, admin.broker_config, show)
        return 1 if failed else 0
    return await with_admin(args, body)


async def broker_config_update(args: argparse.Namespace) -> int:
    settings = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"{item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        settings[key.strip()] = value.strip()

    async def body(admin: AsyncAdmin) -> int:
        failed = await on_each(
            await _config_targets(admin, args),
            lambda addr: admin.update_broker_config(addr, settings),
            lambda addr, _: print(f"{addr}: " + ", ".join(f"{k}={v}"
                                                          for k, v in settings.items())))
        return 1 if failed else 0
    return await with_admin(args, body)
