"""``rocketq admin``: topics, clusters, consumer progress, messages, and a terminal producer
and consumer, against any RocketMQ-protocol NameServer (what RocketMQ's mqadmin does)."""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from ..client.admin import DEFAULT_TOPIC_QUEUES, AsyncAdmin
from ..client.errors import ClientError
from ..client.instance import ClientInstance
from ..protocol import RemotingCommand, RequestCode, ResponseCode, fastjson

DEFAULT_NAMESRV = "127.0.0.1:9876"
#: The NameServer addresses when --namesrv is not given, as RocketMQ's tools read them.
NAMESRV_ENV = "NAMESRV_ADDR"
#: Queues of a topic created without saying how many (as mqadmin's updateTopic).
DEFAULT_QUEUES = DEFAULT_TOPIC_QUEUES


def default_namesrv() -> str:
    """$NAMESRV_ADDR, else 127.0.0.1:9876: where the tools look when --namesrv is not given."""
    return os.environ.get(NAMESRV_ENV, "").strip() or DEFAULT_NAMESRV


def add_connection_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """``--namesrv``, the ACL keys and TLS. Added both to ``admin`` (``defaults``: the values
    when none is given) and to every admin subcommand, so they may come before or after the
    subcommand; there they default to nothing at all, not to overwrite one given before."""
    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--namesrv", default=default(default_namesrv()),
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


def _leaf(subparsers: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """An admin subcommand's parser, which takes the connection options too."""
    return subparsers.add_parser(name, parents=[_connection_parent()], **kwargs)


def _connection_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    add_connection_options(parent, defaults=False)
    return parent


def add_admin_parser(sub: Any) -> None:
    admin = sub.add_parser("admin", help="administer topics, groups and messages",
                           description="Administer topics, groups and messages through a "
                                       "NameServer (what RocketMQ's mqadmin does). The "
                                       "connection options may also follow the subcommand.")
    add_connection_options(admin, defaults=True)
    groups = admin.add_subparsers(dest="admin_group", required=True, metavar="WHAT")

    topic = groups.add_parser("topic", help="topics").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = _leaf(topic, "create", help="create or update a topic on every master broker")
    p.add_argument("topic")
    p.add_argument("--queues", type=int, default=DEFAULT_QUEUES,
                   help="read and write queues")
    p.add_argument("--perm", type=int, default=6, help="permission bits (default 6, RW)")
    p.add_argument("--cluster", default=None, help="only brokers of this cluster")
    p.add_argument("--order", action="store_true", help="mark the topic as ordered")
    p.add_argument("--message-type", type=str.upper,
                   choices=["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"],
                   help="what RocketMQ 5.x clients may send to it (the message.type "
                        "attribute; default NORMAL)")
    p.set_defaults(func=topic_create)
    _leaf(topic, "list", help="every topic the NameServer knows").set_defaults(
        func=topic_list)
    p = _leaf(topic, "route", help="a topic's route")
    p.add_argument("topic")
    p.set_defaults(func=topic_route)
    p = _leaf(topic, "status", help="min and max offsets of each queue")
    p.add_argument("topic")
    p.set_defaults(func=topic_status)
    p = _leaf(topic, "delete", help="delete a topic from its brokers and NameServers")
    p.add_argument("topic")
    p.set_defaults(func=topic_delete)

    cluster = groups.add_parser("cluster", help="clusters").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    _leaf(cluster, "list", help="brokers of each cluster").set_defaults(func=cluster_list)

    consumer = groups.add_parser("consumer", help="consumer groups").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = _leaf(consumer, "progress", help="offsets and lag of a group")
    p.add_argument("group")
    p.add_argument("--topic", default=None, help="only this topic (default: every topic the "
                                                 "group has offsets in)")
    p.set_defaults(func=consumer_progress)
    p = _leaf(consumer, "connections", help="live members of a group")
    p.add_argument("group")
    p.set_defaults(func=consumer_connections)

    message = groups.add_parser("message", help="find messages").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = _leaf(message, "id", help="by message id: the one send prints (the producer's unique "
                                  "id) or the broker's offset id")
    p.add_argument("msg_id")
    p.add_argument("--topic", default=None,
                   help="the topic of a unique id (default: search every topic)")
    p.set_defaults(func=message_by_id)
    p = _leaf(message, "key", help="by key")
    p.add_argument("topic")
    p.add_argument("key")
    p.add_argument("--max", type=int, default=32, help="at most this many messages")
    p.set_defaults(func=message_by_key)

    p = _leaf(groups, "send", help="send messages from the terminal")
    p.add_argument("topic")
    p.add_argument("body", help="the body ('-' reads lines from standard input, one message "
                                "each)")
    p.add_argument("--tags", default=None)
    p.add_argument("--keys", default=None, help="space-separated keys")
    p.add_argument("--count", type=int, default=1, help="send the body this many times")
    p.add_argument("--group", default="rocketq-admin-producer", help="producer group")
    p.set_defaults(func=send)

    p = _leaf(groups, "tail", help="print a topic's messages as they arrive")
    p.add_argument("topic")
    p.add_argument("--expression", default="*", help="tag expression (default *)")
    p.add_argument("--from", dest="from_where", choices=["first", "last"], default="last",
                   help="first: from each queue's first message; last: only new ones")
    p.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")
    p.add_argument("--timeout", type=float, default=0,
                   help="stop after this many idle seconds (0: never)")
    p.set_defaults(func=tail)
    _add_broker_config_parser(groups)
    _add_offset_parser(groups)
    _add_group_parser(groups)


def _print(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()


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


async def _instance(args: argparse.Namespace) -> ClientInstance:
    instance = ClientInstance(args.namesrv, **security(args))
    return instance


async def _cluster_info(instance: ClientInstance) -> dict[str, Any]:
    r = await instance.invoke_namesrv(lambda: RemotingCommand.request(
        RequestCode.GET_BROKER_CLUSTER_INFO))
    if r.code != ResponseCode.SUCCESS:
        raise ClientError(f"cluster info: {r.remark}")
    return fastjson.loads(r.body)


async def _masters(args: argparse.Namespace, instance: ClientInstance) -> dict[str, str]:
    return await AsyncAdmin(args.namesrv, instance=instance).masters()


async def _run(args: argparse.Namespace, body: Any) -> int:
    """Run ``body(instance)`` and close the client. What it raises (a ClientError: no such
    topic, a broker that refused, a NameServer that cannot be reached) goes up to ``main``,
    which prints it on one line and ends the command with status 1."""
    instance = await _instance(args)
    try:
        return await body(instance)
    finally:
        await instance.remoting.close()


async def topic_create(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        masters = await AsyncAdmin(args.namesrv, instance=instance).create_topic(
            args.topic, args.queues, cluster=args.cluster, perm=args.perm, order=args.order,
            message_type=args.message_type)
        for name, addr in sorted(masters.items()):
            print(f"created {args.topic} on {name} ({addr}) with {args.queues} queues")
        return 0
    return await _run(args, body)


async def topic_list(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        for topic in await AsyncAdmin(args.namesrv, instance=instance).list_topics():
            print(topic)
        return 0
    return await _run(args, body)


async def topic_route(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        r = await instance.invoke_namesrv(lambda: RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": args.topic}))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"no route for {args.topic}: {r.remark}")
        _print(orjson.loads(r.body))
        return 0
    return await _run(args, body)


async def topic_status(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        route = await instance.route(args.topic)
        if route is None:
            raise ClientError(f"no route for {args.topic}")
        print(f"{'broker':<16} {'queue':>5} {'min':>12} {'max':>12}  last update")
        for name in sorted(route.broker_addrs):
            addr = instance.broker_addr(name)
            if addr is None:
                continue
            r = await instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.GET_TOPIC_STATS_INFO, {"topic": args.topic}))
            if r.code != ResponseCode.SUCCESS:
                print(f"{name}: {r.remark}", file=sys.stderr)
                continue
            for mq, stats in sorted(fastjson.loads(r.body)["offsetTable"].items,
                                    key=lambda kv: kv[0]["queueId"]):
                ts = stats.get("lastUpdateTimestamp") or 0
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000)) if ts \
                    else "-"
                print(f"{name:<16} {mq['queueId']:>5} {stats['minOffset']:>12} "
                      f"{stats['maxOffset']:>12}  {when}")
        return 0
    return await _run(args, body)


async def topic_delete(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        holders = await AsyncAdmin(args.namesrv, instance=instance).delete_topic(args.topic)
        print(f"deleted {args.topic}" + (f" from {', '.join(holders)}" if holders else
                                         " from the NameServer"))
        return 0
    return await _run(args, body)


async def cluster_list(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        info = await _cluster_info(instance)
        print(f"{'cluster':<18} {'broker':<16} {'id':>3} {'address':<22} {'role':<13} "
              f"{'epoch':>5} {'version':<16} {'put':>10} {'get':>10} {'max offset':>14} "
              f"{'lag':>10}")
        for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
            for name in sorted(names):
                data = info["brokerAddrTable"].get(name, {})
                tables: dict[int, dict[str, str]] = {}
                members = sorted((int(k), v) for k, v in (data.get("brokerAddrs") or {}).items())
                for bid, addr in members:
                    try:
                        r = await instance.remoting.invoke(addr, RemotingCommand.request(
                            RequestCode.GET_BROKER_RUNTIME_INFO), 3)
                        tables[bid] = orjson.loads(r.body).get("table", {})
                    except Exception:  # a broker that does not answer is still listed
                        tables[bid] = {}
                master_max = tables.get(0, {}).get("commitLogMaxOffset")
                for bid, addr in members:
                    table = tables[bid]
                    role = table.get("brokerRole", "-")
                    max_offset = table.get("commitLogMaxOffset", "-")
                    # A slave's lag: the bytes of its master's CommitLog it does not hold yet.
                    lag = ("-" if bid == 0 or master_max is None or max_offset == "-"
                           else str(max(0, int(master_max) - int(max_offset))))
                    print(f"{cluster:<18} {name:<16} {bid:>3} {addr:<22} {role:<13} "
                          f"{table.get('masterEpoch', '-'):>5} "
                          f"{table.get('brokerVersionDesc', '-'):<16} "
                          f"{table.get('msgPutTotalTodayNow', '-'):>10} "
                          f"{table.get('msgGetTotalTodayNow', '-'):>10} {max_offset:>14} "
                          f"{lag:>10}")
        return 0
    return await _run(args, body)


async def consumer_progress(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        progress = await AsyncAdmin(args.namesrv, instance=instance).consumer_progress(
            args.group, args.topic)
        if not progress.queues:
            raise ClientError(f"no progress recorded for group {args.group}"
                              + (f" in {args.topic}" if args.topic else ""))
        print(f"{'topic':<24} {'broker':<16} {'queue':>5} {'broker offset':>14} "
              f"{'consumer offset':>16} {'lag':>10}")
        for q in progress.queues:
            print(f"{q.queue.topic:<24} {q.queue.broker_name:<16} {q.queue.queue_id:>5} "
                  f"{q.broker_offset:>14} {q.consumer_offset:>16} {q.lag:>10}")
        print(f"total lag: {progress.total_lag}")
        return 0
    return await _run(args, body)


async def consumer_connections(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        found = False
        for name, addr in sorted((await _masters(args, instance)).items()):
            r = await instance.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": args.group}))
            if r.code != ResponseCode.SUCCESS:
                continue
            found = True
            data = orjson.loads(r.body)
            print(f"{name}: {data['messageModel']} {data['consumeType']} "
                  f"{data['consumeFromWhere']}")
            for c in data["connectionSet"]:
                print(f"  {c['clientId']:<40} {c['clientAddr']:<22} {c['language']} "
                      f"{c['version']}")
            for topic, sub in sorted(data["subscriptionTable"].items()):
                print(f"  subscribes {topic}: {sub['subString']}")
        if not found:
            raise ClientError(f"the consumer group {args.group} is not online")
        return 0
    return await _run(args, body)


def _show(records: list[Any]) -> None:
    for rec in records:
        _print({"topic": rec.topic, "msgId": rec.msg_id, "offsetMsgId": rec.offset_msg_id,
                "queueId": rec.queue_id, "queueOffset": rec.queue_offset,
                "tags": rec.tags, "keys": rec.keys, "properties": rec.properties,
                "bornTimestamp": rec.born_timestamp, "storeTimestamp": rec.store_timestamp,
                "reconsumeTimes": rec.reconsume_times,
                "body": rec.body.decode("utf-8", "replace")})


async def message_by_id(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        admin = AsyncAdmin(args.namesrv, instance=instance)
        _show([await admin.message_by_id(args.msg_id, args.topic)])
        return 0
    return await _run(args, body)


async def message_by_key(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        admin = AsyncAdmin(args.namesrv, instance=instance)
        found = await admin.query_messages(args.topic, args.key, max_num=args.max)
        if not found:
            raise ClientError(f"no message of {args.topic} with key {args.key}")
        _show(found)
        return 0
    return await _run(args, body)


async def send(args: argparse.Namespace) -> int:
    from ..client.message import Message
    from ..client.producer import AsyncProducer

    producer = AsyncProducer(args.group, args.namesrv, **security(args))
    await producer.start()
    try:
        if args.body == "-":
            loop = asyncio.get_running_loop()
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    break
                r = await producer.send(Message(args.topic, line.rstrip("\n").encode(),
                                                tags=args.tags,
                                                keys=args.keys.split() if args.keys else None))
                print(f"{r.status.value} {r.msg_id} {r.queue} offset {r.queue_offset}")
        else:
            for _ in range(args.count):
                r = await producer.send(Message(args.topic, args.body.encode(), tags=args.tags,
                                                keys=args.keys.split() if args.keys else None))
                print(f"{r.status.value} {r.msg_id} {r.queue} offset {r.queue_offset}")
    finally:
        await producer.shutdown()
    return 0


#: The consumer group of tail: the tools' group every RocketMQ broker creates at start (what
#: mqadmin's consumeMessage uses), so that a tail leaves no group of its own behind.
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"


async def tail(args: argparse.Namespace) -> int:
    """Print the topic's messages: its queues assigned, not shared with a group, and each
    one's position set here (its first or its last offset), never committed."""
    from ..client.pull import AsyncPullConsumer

    consumer = AsyncPullConsumer(TOOLS_CONSUMER_GROUP, args.namesrv,
                                 from_where=args.from_where, auto_commit=False,
                                 **security(args))
    try:
        queues = await consumer.fetch_queues(args.topic)
        consumer.assign(queues)
        if args.expression != "*":
            consumer.subscribe(args.topic, args.expression)
        await consumer.start()
    except BaseException:
        await consumer.shutdown()
        await consumer.instance.stop()
        raise
    try:
        # Positions of our own: the tools' group may have offsets someone committed.
        for mq in queues:
            await (consumer.seek_to_begin(mq) if args.from_where == "first"
                   else consumer.seek_to_end(mq))
        seen = 0
        idle_since = time.monotonic()
        while True:
            messages = await consumer.poll(0.5)
            if args.count:
                messages = messages[:args.count - seen]  # exactly --count, no more
            for m in messages:
                print(f"{m.queue} offset {m.queue_offset} tags={m.tags} keys={m.keys} "
                      f"{m.body.decode('utf-8', 'replace')}", flush=True)
            if messages:
                idle_since = time.monotonic()
            seen += len(messages)
            if args.count and seen >= args.count:
                break
            if args.timeout and time.monotonic() - idle_since >= args.timeout:
                break
    finally:
        # Forget the positions, so that leaving the group commits none of them.
        for mq in queues:
            consumer.offset_store.remove(mq)
        await consumer.shutdown()
    return 0


# ====================================================================== broker config
def _add_broker_config_parser(groups: Any) -> None:
    broker = groups.add_parser("broker", help="brokers").add_subparsers(
        dest="action", required=True, metavar="ACTION")
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
        p = _leaf(config, name, help=text)
        target = p.add_mutually_exclusive_group(required=True)
        target.add_argument("--broker", action="append", metavar="ADDR",
                            help="a broker's address, host:port (may be repeated)")
        target.add_argument("--cluster", metavar="NAME",
                            help="every broker of this cluster, masters and slaves, as the "
                                 "NameServer (--namesrv) knows them")
        if name == "update":
            p.add_argument("settings", nargs="+", metavar="KEY=VALUE",
                           help="e.g. flushConsumerOffsetInterval=6000")
        p.set_defaults(func=func)


async def _config_targets(args: argparse.Namespace, instance: ClientInstance) -> list[str]:
    """The brokers named with --broker, or those of --cluster (every id, as mqadmin's
    CommandUtil.fetchMasterAndSlaveAddrByClusterName gives them)."""
    if args.broker:
        return list(args.broker)
    info = await _cluster_info(instance)
    names = (info.get("clusterAddrTable") or {}).get(args.cluster)
    if not names:
        raise ClientError(f"the NameServer knows no cluster {args.cluster!r}")
    addrs = []
    for name in sorted(names):
        data = (info.get("brokerAddrTable") or {}).get(name) or {}
        addrs += [addr for _, addr in sorted((int(k), v) for k, v in
                                             (data.get("brokerAddrs") or {}).items())]
    return addrs


async def _ask_each(instance: ClientInstance, addrs: list[str],
                    request: Callable[[], RemotingCommand],
                    done: Callable[[str, RemotingCommand], None]) -> int:
    """Send a request to each broker and hand each success to ``done``; refusals and brokers
    that cannot be reached are reported on standard error, and one does not stop the others.
    Returns how many failed."""
    failed = 0
    for addr in addrs:
        try:
            r = await instance.remoting.invoke(addr, request(), 5)
        except Exception as exc:
            print(f"{addr}: {exc}", file=sys.stderr)
            failed += 1
            continue
        if r.code != ResponseCode.SUCCESS:
            print(f"{addr}: refused ({r.code}): {r.remark}", file=sys.stderr)
            failed += 1
            continue
        done(addr, r)
    return failed


async def broker_config_get(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        addrs = await _config_targets(args, instance)

        def show(addr: str, r: RemotingCommand) -> None:
            if args.cluster or len(addrs) > 1:
                print(f"# {addr}")  # a comment line to properties readers
            sys.stdout.write(r.body.decode("utf-8", "replace"))

        failed = await _ask_each(instance, addrs, lambda: RemotingCommand.request(
            RequestCode.GET_BROKER_CONFIG), show)
        return 1 if failed else 0
    return await _run(args, body)


async def broker_config_update(args: argparse.Namespace) -> int:
    settings = []
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"{item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        settings.append((key.strip(), value.strip()))
    # Java properties text, as mqadmin sends it.
    text = "".join(f"{key}={value}\n" for key, value in settings).encode()

    async def body(instance: ClientInstance) -> int:
        addrs = await _config_targets(args, instance)
        failed = await _ask_each(
            instance, addrs, lambda: RemotingCommand.request(
                RequestCode.UPDATE_BROKER_CONFIG, body=text),
            lambda addr, _: print(f"{addr}: " + ", ".join(f"{k}={v}" for k, v in settings)))
        return 1 if failed else 0
    return await _run(args, body)


# ---------------------------------------------------------------------------- offset reset


def _add_offset_parser(groups: Any) -> None:
    offset = groups.add_parser("offset", help="consumer group offsets").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    p = _leaf(offset, "reset", help="move a group's offsets in a topic to a point in time "
                                        "(online members consume from there at once)")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("--time", required=True, type=reset_time, metavar="WHEN",
                   help="ms since the epoch, an ISO 8601 date-time (local time unless it "
                        "names its zone), or 'now' (the end of each queue)")
    p.add_argument("--no-force", dest="force", action="store_false",
                   help="only move offsets back: a queue whose committed offset is before the "
                        "time keeps it")
    p.set_defaults(func=offset_reset)


def reset_time(text: str) -> int:
    """The ``--time`` of ``offset reset`` as the broker takes it: ms since the epoch, or -1
    for "now" (each queue's end). Also reads mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    import datetime

    value = text.strip()
    if value.lower() == "now":
        return -1
    if value.isdigit():
        return int(value)
    for parse in (datetime.datetime.fromisoformat,
                  lambda v: datetime.datetime.strptime(v, "%Y-%m-%d#%H:%M:%S:%f")):
        try:
            when = parse(value)
        except ValueError:
            continue
        return int(when.timestamp() * 1000)  # a naive date-time is local time
    raise argparse.ArgumentTypeError(
        f"not a time: {text!r} (give ms since the epoch, an ISO 8601 date-time such as "
        "2024-05-01T12:00:00, or now)")


async def offset_reset(args: argparse.Namespace) -> int:
    """INVOKE_BROKER_TO_RESET_OFFSET on every master broker of the topic; prints each
    queue's new offset."""
    from ..client.consumer_calls import parse_reset_offset_body

    async def body(instance: ClientInstance) -> int:
        route = await instance.fetch_route(args.topic)
        if route is None:
            raise ClientError(f"no route for topic {args.topic}")
        header = {"topic": args.topic, "group": args.group, "timestamp": args.time,
                  "isForce": args.force}
        rows = []
        failed = 0
        for name, addrs in sorted(route.broker_addrs.items()):
            if 0 not in addrs:
                continue
            r = await instance.remoting.invoke(addrs[0], RemotingCommand.request(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header))
            if r.code != ResponseCode.SUCCESS:
                print(f"{name} ({addrs[0]}): {r.remark} (code {r.code})", file=sys.stderr)
                failed += 1
                continue
            rows.extend(parse_reset_offset_body(r.body).items())
        if rows:
            when = "the end of each queue" if args.time == -1 else f"{args.time} ms"
            print(f"group {args.group} in {args.topic} reset to {when}"
                  f"{'' if args.force else ' (only moving back)'}")
            print(f"{'broker':<16} {'queue':>5} {'offset':>14}")
            for mq, offset in sorted(rows):
                print(f"{mq.broker_name:<16} {mq.queue_id:>5} {offset:>14}")
        return 1 if failed or not rows else 0
    return await _run(args, body)


# ---------------------------------------------------------------------------- subscription groups
#: Option -> SubscriptionGroupConfig JSON name (mqadmin updateSubGroup's -r, -q, -s, ...).
_GROUP_OPTIONS = {
    "retry_max_times": "retryMaxTimes", "retry_queues": "retryQueueNums",
    "consume_enable": "consumeEnable", "broadcast_enable": "consumeBroadcastEnable",
    "consume_from_min_enable": "consumeFromMinEnable", "broker_id": "brokerId",
    "slow_broker_id": "whichBrokerWhenConsumeSlowly",
    "notify_enable": "notifyConsumerIdsChangedEnable",
    "fifo": "consumeMessageOrderly",
}


def _add_group_parser(groups: Any) -> None:
    group = groups.add_parser(
        "group", help="subscription groups (mqadmin updateSubGroup, deleteSubGroup)",
        description="A consumer group's settings on its brokers: whether it may consume, "
                    "how often a failed message is retried before it goes to the group's "
                    "dead-letter queue, and how many queues its retry topic has. Brokers "
                    "create a group with the defaults when its first consumer appears "
                    "(autoCreateSubscriptionGroup=true).").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    for name, func, text in (
            ("create", group_create, "create a group, or replace its settings; options left "
                                     "out take RocketMQ's defaults"),
            ("update", group_update, "change the given settings of a group, keep the rest"),
            ("delete", group_delete, "delete a group"),
            ("list", group_list, "print every group's settings")):
        p = _leaf(group, name, help=text, description=text)
        if name != "list":
            p.add_argument("group")
        target = p.add_mutually_exclusive_group()
        target.add_argument("--broker", action="append", metavar="ADDR",
                            help="a broker's address, host:port (may be repeated); default: "
                                 "every master broker")
        target.add_argument("--cluster", metavar="NAME", help="every broker of this cluster")
        if name in ("create", "update"):
            p.add_argument("--retry-max-times", type=int, metavar="N",
                           help="attempts before the DLQ (default 16)")
            p.add_argument("--retry-queues", type=int, metavar="N",
                           help="queues of the retry topic, 0 for no retries (default 1)")
            p.add_argument("--consume-enable", action=argparse.BooleanOptionalAction,
                           help="may the group consume (default yes)")
            p.add_argument("--broadcast-enable", action=argparse.BooleanOptionalAction,
                           help="may it consume in broadcasting mode (default yes)")
            p.add_argument("--consume-from-min-enable", action=argparse.BooleanOptionalAction,
                           help="default yes")
            p.add_argument("--notify-enable", action=argparse.BooleanOptionalAction,
                           help="tell members when the group changes (default yes)")
            p.add_argument("--fifo", action=argparse.BooleanOptionalAction,
                           help="a FIFO group for POP consumers (RocketMQ 5's "
                                "consumeMessageOrderly; default no)")
            p.add_argument("--broker-id", type=int, metavar="ID",
                           help="the broker id to consume from (default 0, the master)")
            p.add_argument("--slow-broker-id", type=int, metavar="ID",
                           help="the broker id when consumption is slow (default 1)")
        if name == "delete":
            p.add_argument("--remove-offset", action="store_true",
                           help="also forget the group's committed offsets")
        p.set_defaults(func=func)


async def _group_targets(args: argparse.Namespace, instance: ClientInstance) -> list[str]:
    if args.broker or args.cluster:
        return await _config_targets(args, instance)
    return sorted(set((await _masters(args, instance)).values()))


async def _group_tables(instance: ClientInstance, addrs: list[str]
                        ) -> dict[str, dict[str, Any]]:
    """Each broker's subscription groups (201)."""
    tables = {}
    for addr in addrs:
        r = await instance.remoting.invoke(addr, RemotingCommand.request(
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"{addr}: {r.remark}")
        tables[addr] = orjson.loads(r.body).get("subscriptionGroupTable") or {}
    return tables


def _group_fields(args: argparse.Namespace) -> dict[str, Any]:
    return {json_name: getattr(args, option) for option, json_name in _GROUP_OPTIONS.items()
            if getattr(args, option) is not None}


async def _send_group(args: argparse.Namespace, replace: bool) -> int:
    async def body(instance: ClientInstance) -> int:
        addrs = await _group_targets(args, instance)
        current = {} if replace else await _group_tables(instance, addrs)
        failed = 0
        for addr in addrs:
            config = {**current.get(addr, {}).get(args.group, {}), **_group_fields(args),
                      "groupName": args.group}
            failed += await _ask_each(
                instance, [addr], lambda config=config: RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(config)),
                lambda addr, _: print(f"{addr}: {'created' if replace else 'updated'} "
                                      f"{args.group}"))
        return 1 if failed or not addrs else 0
    return await _run(args, body)


async def group_create(args: argparse.Namespace) -> int:
    return await _send_group(args, replace=True)


async def group_update(args: argparse.Namespace) -> int:
    return await _send_group(args, replace=False)


async def group_delete(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        addrs = await _group_targets(args, instance)
        failed = await _ask_each(
            instance, addrs, lambda: RemotingCommand.request(
                RequestCode.DELETE_SUBSCRIPTIONGROUP,
                {"groupName": args.group, "removeOffset": args.remove_offset}),
            lambda addr, _: print(f"{addr}: deleted {args.group}"))
        return 1 if failed else 0
    return await _run(args, body)


async def group_list(args: argparse.Namespace) -> int:
    async def body(instance: ClientInstance) -> int:
        tables = await _group_tables(instance, await _group_targets(args, instance))
        print(f"{'broker':<22} {'group':<32} consume broadcast retries retryQueues")
        for addr, table in sorted(tables.items()):
            for name, cfg in sorted(table.items()):
                print(f"{addr:<22} {name:<32} {str(cfg.get('consumeEnable')).lower():<7} "
                      f"{str(cfg.get('consumeBroadcastEnable')).lower():<9} "
                      f"{cfg.get('retryMaxTimes'):<7} {cfg.get('retryQueueNums')}")
        return 0
    return await _run(args, body)
