"""ClientInstance (RocketMQ's MQClientInstance): what producers and consumers share: the
connections, the route cache refreshed every 30 s from the NameServers, heartbeats to every
broker every 30 s, and the handler of requests brokers send to clients."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..acl import Credentials
from ..protocol import AUTO_CREATE_TOPIC_KEY, Perm, RemotingCommand, RequestCode, ResponseCode
from ..remoting import Connection, RemotingClient, RemotingError, cancel_tasks
from .checks import check_namesrv
from .errors import BrokerError, ClientError, NameServerError, NoMasterError
from .message import MessageQueue

#: Requests every NameServer serves: one that answers them "not supported" is none.
NAMESRV_ONLY_CODES = frozenset({RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                RequestCode.GET_BROKER_CLUSTER_INFO,
                                RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER})

log = logging.getLogger("rocketq.client")

MASTER_ID = 0


@dataclass
class TopicRoute:
    """A topic's route: its queues per broker, and the brokers' addresses."""

    topic: str
    queue_datas: list[dict[str, Any]]
    broker_addrs: dict[str, dict[int, str]]
    publish_queues: list[MessageQueue] = field(default_factory=list)
    subscribe_queues: list[MessageQueue] = field(default_factory=list)

    @classmethod
    def parse(cls, topic: str, body: bytes) -> TopicRoute:
        data = orjson.loads(body)
        addrs: dict[str, dict[int, str]] = {}
        for broker in data.get("brokerDatas") or ():
            addrs[broker["brokerName"]] = {int(k): v for k, v in
                                           (broker.get("brokerAddrs") or {}).items()}
        queue_datas = sorted(data.get("queueDatas") or (), key=lambda q: q["brokerName"])
        route = cls(topic, queue_datas, addrs)
        for q in queue_datas:
            name = q["brokerName"]
            if q.get("perm", 6) & Perm.WRITE and MASTER_ID in addrs.get(name, {}):
                route.publish_queues.extend(MessageQueue(topic, name, i)
                                            for i in range(int(q.get("writeQueueNums", 0))))
            if q.get("perm", 6) & Perm.READ:
                route.subscribe_queues.extend(MessageQueue(topic, name, i)
                                              for i in range(int(q.get("readQueueNums", 0))))
        return route

    def masterless(self) -> list[str]:
        """The broker groups with writable queues of the topic but no master now (it stopped,
        or a failover is in progress): sends cannot go there until one is elected."""
        return sorted({q["brokerName"] for q in self.queue_datas
                       if q.get("perm", 6) & Perm.WRITE and int(q.get("writeQueueNums", 0))
                       and MASTER_ID not in self.broker_addrs.get(q["brokerName"], {})})


def no_master(topic: str, brokers: list[str]) -> NoMasterError:
    """The error for a send to ``topic`` whose broker groups ``brokers`` have no master."""
    names = ", ".join(repr(b) for b in brokers)
    many = len(brokers) > 1
    of_topic = f" of topic {topic}" if topic else ""
    return NoMasterError(topic, brokers, f"broker group{'s' if many else ''} {names}{of_topic} "
                         f"{'have' if many else 'has'} no master right now (a failover may be "
                         "in progress)")


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class ClientInstance:
    """Shared machinery of one producer or consumer."""

    def __init__(self, namesrv: str, *, heartbeat_interval: float = 30.0,
                 route_interval: float = 30.0, instance_name: str | None = None,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None) -> None:
        self.namesrv_addrs = check_namesrv(namesrv)
        self.client_id = (f"{_local_ip()}@{os.getpid()}#"
                          f"{instance_name or format(random.getrandbits(48), 'x')}")
        self.heartbeat_interval = heartbeat_interval
        self.route_interval = route_interval
        #: ACL credentials every request is signed with (None: requests go unsigned).
        self.credentials = Credentials.of(credentials)
        self.remoting = RemotingClient(
            self._handle_request, ssl=tls,
            signer=self.credentials.sign if self.credentials is not None else None)
        self.routes: dict[str, TopicRoute] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self._namesrv_index = random.randrange(len(self.namesrv_addrs))
        self._tasks: list[asyncio.Task[Any]] = []
        self.heartbeat_data: Callable[[], dict[str, Any]] = lambda: {}
        self.on_request: dict[int, Callable[[Connection, RemotingCommand],
                                            Awaitable[RemotingCommand | None] |
                                            RemotingCommand | None]] = {}
        self.topics: set[str] = set()
        #: Consumer group -> the started consumer of that group (MQClientInstance's
        #: consumerTable): requests brokers make of consumers name their group.
        self.consumers: dict[str, Any] = {}
        self.started = False
        #: Correlation id -> the request waiting for that reply.
        self.replies: dict[str, asyncio.Future[Any]] = {}
        self.on_request[RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT] = self._on_reply

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.started:
            return
        self.started = True
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._route_loop()),
                       loop.create_task(self._heartbeat_loop())]

    async def stop(self) -> None:
        self.started = False
        await cancel_tasks(self._tasks)
        self._tasks = []
        await self.remoting.close()
        self.started = False

    async def _route_loop(self) -> None:
        while self.started:
            await asyncio.sleep(self.route_interval)
            for topic in list(self.topics):
                with contextlib.suppress(ClientError, RemotingError, OSError):
                    await self.update_route(topic)

    async def _heartbeat_loop(self) -> None:
        while self.started:
            await asyncio.sleep(self.heartbeat_interval)
            await self.heartbeat_all()

    # ------------------------------------------------------------------ NameServer
    async def invoke_namesrv(self, cmd_factory: Callable[[], RemotingCommand],
                             timeout: float = 3.0) -> RemotingCommand:
        """Ask the NameServers in turn until one answers. An address that answers a request
        every NameServer serves with "not supported" is not a NameServer (a broker's port
        given by mistake, most often): it is passed over, and named as such."""
        errors = []
        for i in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[(self._namesrv_index + i) % len(self.namesrv_addrs)]
            try:
                cmd = cmd_factory()
                response = await self.remoting.invoke(addr, cmd, timeout)
                if (response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                        and cmd.code in NAMESRV_ONLY_CODES):
                    errors.append(await self._not_a_namesrv(addr, cmd.code, timeout))
                    continue
                self._namesrv_index = (self._namesrv_index + i) % len(self.namesrv_addrs)
                return response
            except (RemotingError, OSError) as exc:
                errors.append(f"{addr}: {exc}")
        raise NameServerError("no NameServer answered: " + "; ".join(errors))

    async def _not_a_namesrv(self, addr: str, code: int, timeout: float) -> str:
        """Why ``addr`` is no NameServer: it answered ``code`` "not supported". A peer that
        answers GET_BROKER_RUNTIME_INFO is named a broker."""
        what = "is not a NameServer"
        with contextlib.suppress(RemotingError, OSError):
            r = await self.remoting.invoke(addr, RemotingCommand.request(
                RequestCode.GET_BROKER_RUNTIME_INFO), timeout)
            if r.code == ResponseCode.SUCCESS:
                what = "answers as a broker, not a NameServer"
        return (f"{addr} {what} (request code {code} not supported); the NameServer's "
                f"default port is 9876")

    async def fetch_route(self, topic: str) -> TopicRoute | None:
        """The route of ``topic`` from a NameServer, or None if it has none."""
        response = await self.invoke_namesrv(lambda: RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            raise NameServerError(f"route of {topic}: {response.remark} (code {response.code})")
        return TopicRoute.parse(topic, response.body)

    async def update_route(self, topic: str) -> TopicRoute | None:
        route = await self.fetch_route(topic)
        if route is not None:
            self.routes[topic] = route
            self._learn_brokers(route)
        return route

    def _learn_brokers(self, route: TopicRoute) -> None:
        """Take the broker addresses of ``route``; heartbeat at once when one is new."""
        known = {a for addrs in self.broker_addrs.values() for a in addrs.values()}
        for name, addrs in route.broker_addrs.items():
            self.broker_addrs[name] = addrs
        if self.started and any(a not in known for addrs in route.broker_addrs.values()
                                for a in addrs.values()):
            # Tell new brokers who we are now, not at the next 30 s heartbeat: they need
            # our groups (transaction check-backs, consumer lists) from the first request.
            task = asyncio.get_running_loop().create_task(self.heartbeat_all())
            self._tasks.append(task)

    async def route(self, topic: str, refresh: bool = False) -> TopicRoute | None:
        self.topics.add(topic)
        route = self.routes.get(topic)
        if route is None or refresh:
            route = await self.update_route(topic)
        return route

    async def publish_route(self, topic: str, default_queue_nums: int = 4) -> TopicRoute:
        """The route to send to: the topic's, or TBW102's (the broker then creates the
        topic), as RocketMQ's producers do for a topic the NameServers do not know yet.

        A cached route without a writable queue is asked for again. NoMasterError when the
        topic has a route but its writable broker groups have no master now (a failover):
        the topic exists, so TBW102 is no answer; the producer tries again later."""
        cached = self.routes.get(topic)
        route = await self.route(topic, refresh=cached is not None and not cached.publish_queues)
        if route is not None and route.publish_queues:
            return route
        masterless = route.masterless() if route is not None else []
        if masterless:
            raise no_master(topic, masterless)
        default = await self.fetch_route(AUTO_CREATE_TOPIC_KEY)
        if default is None or not default.publish_queues:
            raise ClientError(f"No route info of this topic: {topic} (and no "
                              f"{AUTO_CREATE_TOPIC_KEY} for auto-creation)")
        # As fresh as any (a master may have changed); and a producer whose first send
        # creates the topic is known to the brokers at once (its transaction check-backs).
        self._learn_brokers(default)
        queues: list[MessageQueue] = []
        for q in default.queue_datas:
            n = min(default_queue_nums, int(q.get("writeQueueNums", 0)))
            if q.get("perm", 6) & Perm.WRITE and MASTER_ID in default.broker_addrs.get(
                    q["brokerName"], {}):
                queues.extend(MessageQueue(topic, q["brokerName"], i) for i in range(n))
        return TopicRoute(topic, default.queue_datas, default.broker_addrs, queues, [])

    # ------------------------------------------------------------------ brokers
    def broker_addr(self, broker_name: str, master_only: bool = True) -> str | None:
        addrs = self.broker_addrs.get(broker_name) or {}
        if MASTER_ID in addrs:
            return addrs[MASTER_ID]
        if not master_only and addrs:
            return addrs[min(addrs)]
        return None

    def pull_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> tuple[str, bool] | None:
        """Where to pull from (RocketMQ's findBrokerAddressInSubscribe): the broker the last
        pull suggested, else the master's first slave, else any broker of the group (a slave
        when the master is gone); and whether it is a slave. None when the group has none."""
        addrs = self.broker_addrs.get(broker_name) or {}
        addr = addrs.get(broker_id)
        if addr is None and broker_id == MASTER_ID:
            broker_id = MASTER_ID + 1
            addr = addrs.get(broker_id)
        if addr is None and addrs:
            broker_id = min(addrs)
            addr = addrs[broker_id]
        return None if addr is None else (addr, broker_id != MASTER_ID)

    async def broker_addr_or_refresh(self, broker_name: str, topic: str | None = None,
                                     master_only: bool = True) -> str:
        addr = self.broker_addr(broker_name, master_only)
        if addr is None and topic is not None:
            await self.update_route(topic)
            addr = self.broker_addr(broker_name, master_only)
        if addr is None:
            if master_only and self.broker_addrs.get(broker_name):
                raise no_master(topic or "", [broker_name])  # only slaves: a failover
            raise ClientError(f"The broker[{broker_name}] not exist")
        return addr

    async def invoke_broker(self, broker_name: str, cmd: RemotingCommand, timeout: float,
                            topic: str | None = None, *, master_only: bool = True
                            ) -> RemotingCommand:
        """Send ``cmd`` to the broker group's master; a read may go to a slave when the
        master is gone (``master_only=False``), as RocketMQ's consumers do."""
        addr = await self.broker_addr_or_refresh(broker_name, topic, master_only)
        return await self.remoting.invoke(addr, cmd, timeout)

    async def heartbeat_all(self) -> None:
        data = self.heartbeat_data()
        if not data.get("producerDataSet") and not data.get("consumerDataSet"):
            return
        body = orjson.dumps({"clientID": self.client_id, **data})
        addrs = {a for addrs in self.broker_addrs.values() for a in addrs.values()}

        async def one(addr: str) -> None:
            try:
                r = await self.remoting.invoke(
                    addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, body), 3)
                if r.code != ResponseCode.SUCCESS:
                    log.warning("heartbeat to %s refused: %s", addr, r.remark)
            except (RemotingError, OSError) as exc:
                log.info("heartbeat to %s failed: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in sorted(addrs)))

    async def unregister(self, producer_group: str | None, consumer_group: str | None) -> None:
        addrs = {a for addrs in self.broker_addrs.values() for a in addrs.values()}
        cmd_fields = {"clientID": self.client_id, "producerGroup": producer_group or "",
                      "consumerGroup": consumer_group or ""}

        async def one(addr: str) -> None:
            with contextlib.suppress(RemotingError, OSError):
                await self.remoting.invoke(addr, RemotingCommand.request(
                    RequestCode.UNREGISTER_CLIENT, cmd_fields), 2)

        await asyncio.gather(*(one(a) for a in sorted(addrs)))

    # ------------------------------------------------------------------ replies
    def expect_reply(self, correlation: str) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.replies[correlation] = fut
        return fut

    def _on_reply(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: a reply to one of our requests."""
        from ..protocol.message import decode_properties, plain_body
        from .message import ReceivedMessage

        ext = cmd.ext_fields
        props = decode_properties(ext.get("properties", ""))
        fut = self.replies.get(props.get("CORRELATION_ID", ""))
        if fut is None or fut.done():
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="no request waits for it")
        host, _, port = (ext.get("bornHost") or ":0").rpartition(":")
        store_host, _, store_port = (ext.get("storeHost") or ":0").rpartition(":")
        body = plain_body(cmd.body, int(ext.get("sysFlag", "0") or 0))
        fut.set_result(ReceivedMessage(
            ext.get("topic", ""), body, int(ext.get("queueId", "0") or 0), -1, -1, "", props,
            props.get("UNIQ_KEY", ""), "", int(ext.get("bornTimestamp", "0") or 0),
            int(ext.get("storeTimestamp", "0") or 0), (host, int(port or 0)),
            (store_host, int(store_port or 0)), int(ext.get("reconsumeTimes", "0") or 0)))
        return cmd.response()

    # ------------------------------------------------------------------ broker requests
    def _handle_request(self, conn: Connection, cmd: RemotingCommand):
        handler = self.on_request.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                remark=f" request type {cmd.code} not supported")
        return handler(conn, cmd)


def check_response(response: RemotingCommand, what: str) -> RemotingCommand:
    """Raise BrokerError unless the response is SUCCESS."""
    if response.code != ResponseCode.SUCCESS:
        raise BrokerError(response.code, f"{what}: {response.remark or 'no remark'}")
    return response
