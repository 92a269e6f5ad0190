"""What every consumer of a group does (RocketMQ's RebalanceImpl and the consumer impls'
shared parts): subscriptions, heartbeats, rebalancing queues among the group's members,
finding where to start in a queue, and committing offsets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from typing import Any

import orjson

from ..acl import Credentials
from ..protocol import (
    PullSysFlag,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    is_retry_topic,
    retry_topic,
)
from ..protocol.filter import Subscription
from ..remoting import RemotingError, cancel_tasks
from .allocate import STRATEGIES, AllocateAveragely, AllocateStrategy
from .checks import FROM_WHERE, MODELS, check_group, starting_position
from .consumer_calls import serve_consumer_calls, stop_consumer_calls
from .errors import ClientError, InvalidArgumentError, NameServerError
from .instance import ClientInstance
from .message import MessageQueue, MessageSelector
from .offset_store import LocalOffsetStore, OffsetStore, RemoteOffsetStore
from .rebalance import apply_share

log = logging.getLogger("rocketq.client")

#: Seconds between looks for a subscribed topic without a route (a topic the first send will
#: create, the group's retry topic the broker creates at the first heartbeat) while it has
#: been missing for less than MISSING_ROUTE_FAST_PERIOD seconds; after that the wait doubles
#: up to MISSING_ROUTE_MAX_RETRY (or the rebalance interval, if shorter).
MISSING_ROUTE_RETRY = 1.0
MISSING_ROUTE_FAST_PERIOD = 30.0
MISSING_ROUTE_MAX_RETRY = 5.0
#: Seconds before the first look again while no NameServer answers; each failed look doubles
#: the wait, up to NAMESRV_MAX_RETRY, and logs a warning naming the addresses.
NAMESRV_RETRY = 1.0
NAMESRV_MAX_RETRY = 30.0


def pull_request(group: str, mq: MessageQueue, offset: int, max_nums: int, sub: Subscription,
                 *, sysflag: int, commit: int = 0, suspend_ms: int = 0) -> RemotingCommand:
    """A PULL_MESSAGE request (PullMessageRequestHeader) for ``max_nums`` messages of ``mq``
    from ``offset``."""
    ext = {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id,
           "queueOffset": offset, "maxMsgNums": max_nums, "sysFlag": sysflag,
           "commitOffset": commit, "suspendTimeoutMillis": suspend_ms,
           "subscription": sub.expression, "subVersion": sub.sub_version,
           "expressionType": sub.expression_type}
    if mq.broker_name:
        ext["bname"] = mq.broker_name
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)


class GroupConsumer:
    """Base of the push and pull consumers.

    ``from_where`` says where the group starts in a queue it has no committed offset for:
    ``"last"`` (the default: messages sent from now on; a queue that still holds its first
    message is read from there, as RocketMQ's brokers answer), ``"first"`` (every message
    kept), or ``"timestamp"`` (the first message stored at or after ``consume_timestamp``,
    ms since the epoch). ``"earliest"`` and ``"latest"`` are accepted for ``"first"`` and
    ``"last"``, as the Spark options and Kafka spell them."""

    consume_type = "CONSUME_PASSIVELY"
    #: Clustering push consumers also consume their group's retry topic.
    subscribes_retry_topic = True

    def __init__(self, group: str, namesrv: str, *, model: str = "clustering",
                 from_where: str = "last", consume_timestamp: int | None = None,
                 allocate: AllocateStrategy | str = "averagely",
                 rebalance_interval: float = 20.0, persist_interval: float = 5.0,
                 offset_store_dir: str | None = None,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None,
                 instance: ClientInstance | None = None) -> None:
        if model not in MODELS:
            raise InvalidArgumentError(f"model must be one of {sorted(MODELS)}, not {model!r}")
        from_where = starting_position(from_where)
        self.group = check_group(group, "consumer")
        self.model = model
        self.from_where = from_where
        self.consume_timestamp = consume_timestamp
        if isinstance(allocate, str):
            if allocate not in STRATEGIES:
                raise InvalidArgumentError(f"allocate must be one of {sorted(STRATEGIES)}")
            allocate = STRATEGIES[allocate]()
        self.allocate: AllocateStrategy = allocate or AllocateAveragely()
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_interval
        self.instance = instance or ClientInstance(namesrv, credentials=credentials, tls=tls)
        self.subscriptions: dict[str, Subscription] = {}
        self.owned: dict[MessageQueue, Any] = {}
        #: Per queue, the broker id its last pull answer suggested (0: the master).
        self._suggested: dict[MessageQueue, int] = {}
        self.offset_store: OffsetStore
        if model == "broadcasting":
            directory = offset_store_dir or os.path.join(os.path.expanduser("~"),
                                                         ".rocketq_offsets")
            self.offset_store = LocalOffsetStore(directory, self.instance.client_id.split(
                "#")[0].replace("@", "-").replace(":", "_"), group)
        else:
            self.offset_store = RemoteOffsetStore(self.instance, group)
        self.running = False
        self._tasks: list[asyncio.Task[Any]] = []
        self._rebalance_now: asyncio.Event | None = None
        #: False in assign mode: the caller picks the queues, no rebalancing.
        self.rebalancing = True
        #: When start() ran, in ms (ConsumerRunningInfo's PROP_CONSUMER_START_TIMESTAMP).
        self.start_timestamp = 0
        #: Held while the owned queues change (rebalance, assignment, an offset reset).
        self._queues_lock = asyncio.Lock()
        #: Subscribed topics without a route -> when (loop time) a rebalance first missed it.
        self._missing_since: dict[str, float] = {}
        #: Why the last route lookup failed when no NameServer answered it (None once one
        #: does): the consumer cannot find its queues, which ``poll`` must not pass off as an
        #: empty topic.
        self.namesrv_error: NameServerError | None = None
        self._namesrv_wait = NAMESRV_RETRY

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume ``topic``, keeping messages whose tag matches ``expression`` (``"*"``, or
        tags joined by ``||``), or that a ``MessageSelector.by_sql(...)`` condition selects."""
        if isinstance(expression, MessageSelector):
            text, kind = expression.expression, expression.type
        else:
            text, kind = expression, "TAG"
        self.subscriptions[topic] = Subscription.parse(topic, text, kind,
                                                       int(time.time() * 1000))
        self._changed()

    def _ready(self) -> bool:
        """Whether this member joins its group and takes queues yet (push consumers wait for
        a listener, so that nothing is pulled before there is one to give it to)."""
        return True

    def _changed(self) -> None:
        """The subscriptions (or the listener) changed while running: tell the brokers in a
        heartbeat and rebalance now, not at the next rounds (30 s and 20 s away)."""
        if not self.running:
            return
        task = asyncio.get_running_loop().create_task(self._announce())
        self._tasks.append(task)
        task.add_done_callback(
            lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _announce(self) -> None:
        try:
            for topic in self._all_subscriptions():
                if topic not in self.instance.routes:
                    # Learn the brokers of a new topic first, so the heartbeat reaches them.
                    with contextlib.suppress(ClientError, RemotingError, OSError):
                        await self.instance.route(topic, refresh=True)
            await self.instance.heartbeat_all()
        except (ClientError, RemotingError, OSError) as exc:
            log.info("heartbeat of group %s after a change failed: %s", self.group, exc)
        if self._rebalance_now is not None:
            self._rebalance_now.set()

    def _all_subscriptions(self) -> dict[str, Subscription]:
        subs = dict(self.subscriptions)
        if self.model == "clustering" and self.subscribes_retry_topic:
            rt = retry_topic(self.group)
            subs[rt] = Subscription.parse(rt, "*", "TAG", 0)
        return subs

    def _heartbeat_data(self) -> dict[str, Any]:
        return {"groupName": self.group, "consumeType": self.consume_type,
                "messageModel": MODELS[self.model], "consumeFromWhere": FROM_WHERE[self.from_where],
                "unitMode": False,
                "subscriptionDataSet": [s.to_json() for s in self._all_subscriptions().values()]}

    # ------------------------------------------------------------------ lifecycle
    async def _start_group(self) -> None:
        self.running = True
        instance = self.instance
        previous = instance.heartbeat_data

        def heartbeat() -> dict[str, Any]:
            data = dict(previous())
            if self._ready():
                data["consumerDataSet"] = [*data.get("consumerDataSet", []),
                                           self._heartbeat_data()]
            return data

        instance.heartbeat_data = heartbeat
        instance.on_request[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = self._on_notify
        self.start_timestamp = int(time.time() * 1000)
        self._missing_since.clear()
        serve_consumer_calls(instance, self)
        await self.offset_store.load()
        await instance.start()
        for topic in self._all_subscriptions():
            try:
                await instance.route(topic, refresh=True)
            except NameServerError as exc:
                self.namesrv_error = exc
            except (ClientError, RemotingError, OSError) as exc:
                log.warning("no route for %s yet: %s", topic, exc)
        await instance.heartbeat_all()
        loop = asyncio.get_running_loop()
        self._rebalance_now = asyncio.Event()
        self._tasks = [loop.create_task(self._rebalance_loop()),
                       loop.create_task(self._persist_loop())]

    async def _stop_loops(self) -> None:
        self.running = False
        if self._rebalance_now is not None:
            # Wake the loop too: Python 3.11's wait_for can swallow a cancellation that
            # arrives as the event fires; the loop then sees running is False and ends.
            self._rebalance_now.set()
        await cancel_tasks(self._tasks)
        self._tasks = []

    async def _leave_group(self) -> None:
        stop_consumer_calls(self.instance, self)
        await self.offset_store.persist(list(self.owned))
        await self.instance.unregister(None, self.group)
        await self.instance.stop()

    # ------------------------------------------------------------------ rebalance
    def _on_notify(self, conn: Any, cmd: RemotingCommand) -> None:
        if self._rebalance_now is not None:
            self._rebalance_now.set()
        return None

    async def _rebalance_loop(self) -> None:
        assert self._rebalance_now is not None
        # While a subscribed topic has no route (a topic its first send will create, or the
        # group's retry topic, which the broker creates at the first heartbeat), look again
        # every second for a while, then less often, rather than after the whole interval:
        # the broker registers a new topic with the NameServers at once, and its first
        # messages would otherwise wait for the next round, up to 20 s.
        wait_missing = MISSING_ROUTE_RETRY
        while self.running:
            try:
                if self.rebalancing:
                    await self.rebalance()
            except Exception:
                log.exception("rebalance of group %s failed", self.group)
            loop = asyncio.get_running_loop()
            since = [t for topic, t in self._missing_since.items()
                     if topic in self._all_subscriptions()]
            if self.namesrv_error is not None:
                timeout = min(self._namesrv_wait, max(self.rebalance_interval, NAMESRV_RETRY))
                log.warning("consumer group %s cannot find its topics' queues: %s; is the "
                            "NameServer running at that address? Trying again in %.0f s",
                            self.group, self.namesrv_error, timeout)
                self._namesrv_wait = min(self._namesrv_wait * 2, NAMESRV_MAX_RETRY)
            elif not since or not self.rebalancing:
                timeout, wait_missing = self.rebalance_interval, MISSING_ROUTE_RETRY
            elif loop.time() - min(since) < MISSING_ROUTE_FAST_PERIOD:
                timeout = wait_missing = MISSING_ROUTE_RETRY
            else:
                wait_missing = min(wait_missing * 2, MISSING_ROUTE_MAX_RETRY)
                timeout = min(wait_missing, self.rebalance_interval)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._rebalance_now.wait()
            self._rebalance_now.clear()

    async def rebalance(self) -> None:
        """Work out which queues this member owns now, and start or stop their pulls. A
        subscribed topic without a route (its queues not known yet) is noted in
        ``_missing_since``, which sets when the rebalance loop looks again."""
        if not self._ready():
            return
        for topic in self._all_subscriptions():
            try:
                route = await self.instance.route(topic)
            except NameServerError as exc:
                self.namesrv_error = exc  # the rebalance loop warns, and looks again
                route = None
            except (ClientError, RemotingError, OSError) as exc:
                log.info("rebalance: no route for %s: %s", topic, exc)
                route = None
            else:
                self._namesrv_answered()
            if route is None:
                self._missing_since.setdefault(topic, asyncio.get_running_loop().time())
                continue
            self._missing_since.pop(topic, None)
            queues = sorted(route.subscribe_queues)
            if self.model == "broadcasting":
                mine = queues
            else:
                consumers = await self._consumer_ids(topic, queues)
                if consumers is None:
                    continue
                mine = self.allocate.allocate(self.group, self.instance.client_id, queues,
                                              consumers)
            await self._update_queues(topic, set(mine))

    def _namesrv_answered(self) -> None:
        if self.namesrv_error is not None:
            log.warning("consumer group %s: a NameServer answers again", self.group)
        self.namesrv_error = None
        self._namesrv_wait = NAMESRV_RETRY

    def _check_namesrv(self) -> None:
        """Raise NameServerError when no NameServer answered the last route lookup and the
        consumer has no queue to read: it is not waiting for messages, it cannot find them."""
        if self.namesrv_error is not None and not self.owned:
            raise NameServerError(
                f"consumer group {self.group} has no queue to read: {self.namesrv_error} "
                f"(is the NameServer running at that address?)")

    async def _consumer_ids(self, topic: str, queues: list[MessageQueue]) -> list[str] | None:
        brokers = sorted({q.broker_name for q in queues})
        for name in brokers:
            try:
                response = await self.instance.invoke_broker(name, RemotingCommand.request(
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group}), 3,
                    topic, master_only=False)
            except (ClientError, RemotingError, OSError):
                continue
            if response.code == ResponseCode.SUCCESS:
                return sorted(orjson.loads(response.body).get("consumerIdList") or [])
        return None

    async def _update_queues(self, topic: str, mine: set[MessageQueue]) -> None:
        async with self._queues_lock:
            await self._update_queues_locked(topic, mine)

    async def _update_queues_locked(self, topic: str, mine: set[MessageQueue]) -> None:
        async def stop(mq: MessageQueue, _state: Any) -> None:
            self._queue_removed(mq)

        await apply_share(self.owned, topic, mine, self.offset_store, self.group, stop=stop,
                          start_offset=self._start_offset, start=self._queue_added)

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Consume the owned queues of ``topic`` in ``offsets`` from there
        (RESET_CONSUMER_CLIENT_OFFSET, after an admin reset the group's offsets)."""
        raise NotImplementedError

    def _queue_added(self, mq: MessageQueue, offset: int) -> Any:
        """Start consuming ``mq`` at ``offset``; return what ``owned`` keeps for it."""
        raise NotImplementedError

    def _queue_removed(self, mq: MessageQueue) -> None:
        """Stop consuming ``mq`` (another member owns it now)."""
        raise NotImplementedError

    async def _start_offset(self, mq: MessageQueue) -> int:
        """RocketMQ's computePullFromWhere."""
        stored = await self.offset_store.read(mq)
        if stored is not None and stored >= 0:
            return stored
        if self.from_where == "first" or is_retry_topic(mq.topic):
            return 0
        if self.from_where == "timestamp" and self.consume_timestamp is not None:
            return await self._offset_query(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq,
                                            timestamp=self.consume_timestamp)
        return await self._offset_query(RequestCode.GET_MAX_OFFSET, mq)

    async def _pull(self, mq: MessageQueue, offset: int, sub: Subscription, sysflag: int,
                    commit: int, batch: int, suspend_timeout: float) -> RemotingCommand | None:
        """One PULL_MESSAGE (long-polled when ``sysflag`` allows); None after a failure, once
        the 3 s back-off RocketMQ's clients use has passed."""
        instance = self.instance
        found = instance.pull_addr(mq.broker_name, self._suggested.get(mq, 0))
        if found is None:
            with contextlib.suppress(ClientError, RemotingError, OSError):
                await instance.update_route(mq.topic)
            found = instance.pull_addr(mq.broker_name, self._suggested.get(mq, 0))
        if found is None:
            log.info("no broker of %s to pull %s from; retrying in 3 s", mq.broker_name, mq)
            await asyncio.sleep(3)
            return None
        addr, slave = found
        if slave:  # offsets are committed to the master only, as RocketMQ's clients do
            sysflag &= ~PullSysFlag.COMMIT_OFFSET
        cmd = pull_request(self.group, mq, offset, batch, sub, sysflag=sysflag, commit=commit,
                           suspend_ms=int(suspend_timeout * 1000))
        try:
            response = await instance.remoting.invoke(addr, cmd, suspend_timeout + 15)
        except (ClientError, RemotingError, OSError) as exc:
            log.info("pull from %s at %s failed: %s; retrying in 3 s", mq, addr, exc)
            # The broker may be gone: learn the route now (a slave may serve), not in 30 s.
            with contextlib.suppress(ClientError, RemotingError, OSError):
                await instance.update_route(mq.topic)
            await asyncio.sleep(3)
            return None
        suggested = response.ext_fields.get("suggestWhichBrokerId")
        if suggested is not None and suggested.isdigit():
            self._suggested[mq] = int(suggested)
        return response

    async def _offset_query(self, code: int, mq: MessageQueue, **extra: Any) -> int:
        response = await self.instance.invoke_broker(mq.broker_name, RemotingCommand.request(
            code, {"topic": mq.topic, "queueId": mq.queue_id, **extra}), 3, mq.topic,
            master_only=False)
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(f"offset query for {mq}: {response.remark}")
        return int(response.ext_fields.get("offset", "0"))

    async def _persist_loop(self) -> None:
        while self.running:
            await asyncio.sleep(self.persist_interval)
            await self.offset_store.persist(list(self.owned))

    # ------------------------------------------------------------------ introspection
    def assigned_queues(self) -> list[MessageQueue]:
        return sorted(self.owned)
