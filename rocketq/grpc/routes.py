"""Routes for the 5.x clients (the proxy's RouteActivity in "local mode"): QueryRoute names,
for each master broker of a topic, its queues at that broker's own gRPC port (learnt from the
NameServer's route and each broker's ``grpcServerPort``), and QueryAssignment the brokers a
consumer group pops from.

``Routes`` is a part of ``service.MessagingService``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from ..acl.plain import SUB
from ..protocol import Perm, RemotingCommand, RequestCode, ResponseCode
from .common import answers, is_ipv4, status
from .proto import definition_pb2 as pb
from .proto import service_pb2 as spb

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("rocketq.grpc")


class Routes:
    """QueryRoute and QueryAssignment: a part of :class:`service.MessagingService`, whose
    ``config``, ``accepted_types``, ``_enter``, ``_topic`` and ``_group`` it calls."""

    broker: Broker
    #: brokerAddr -> (gRPC address, when learnt): other brokers' gRPC ports.
    _grpc_addrs: dict[str, tuple[str, float]]

    def _endpoints(self, address: str) -> pb.Endpoints:
        host, _, port = address.rpartition(":")
        return pb.Endpoints(scheme=pb.IPv4 if is_ipv4(host) else pb.DOMAIN_NAME,
                            addresses=[pb.Address(host=host, port=int(port))])

    @property
    def address(self) -> str:
        """This broker's own gRPC address, as routes name it."""
        return f"{self.config.brokerIP1}:{self.config.grpcServerPort}"

    @answers(spb.QueryRouteResponse, "QueryRoute")
    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any
                         ) -> spb.QueryRouteResponse:
        self._enter(context, [(request.topic.name, False, SUB)])
        topic_config = self._topic(request.topic)
        queues = []
        for name, broker_id, address, read, write, perm in await self._route(
                request.topic.name, topic_config):
            queues.extend(self._queues(request.topic, name, broker_id, address, read,
                                       write, perm, self.accepted_types(topic_config)))
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    def _queues(self, topic: pb.Resource, broker_name: str, broker_id: int, address: str,
                read: int, write: int, perm: int, types: tuple[int, ...]
                ) -> list[pb.MessageQueue]:
        """One entry per queue, as the proxy's RouteActivity: the queues both readable and
        writable, then the read-only and write-only ones, with ids counted on."""
        broker = pb.Broker(name=broker_name, id=broker_id, endpoints=self._endpoints(address))
        both = min(read, write)
        kinds = ([pb.READ_WRITE] * both + [pb.READ] * (read - both) +
                 [pb.WRITE] * (write - both))
        out = []
        for queue_id, kind in enumerate(kinds):
            if not perm & Perm.READ and kind != pb.WRITE:
                kind = pb.WRITE if kind == pb.READ_WRITE else pb.NONE
            if not perm & Perm.WRITE and kind != pb.READ:
                kind = pb.READ if kind == pb.READ_WRITE else pb.NONE
            out.append(pb.MessageQueue(topic=topic, id=queue_id, permission=kind,
                                       broker=broker, accept_message_types=list(types)))
        return out

    async def _route(self, topic: str, topic_config: Any
                     ) -> list[tuple[str, int, str, int, int, int]]:
        """``(broker name, id, gRPC address, read queues, write queues, perm)`` of each
        master of the topic: from the NameServers, with each broker's gRPC port asked of
        it; this broker's own queues when the NameServers cannot say."""
        own = [(self.config.brokerName, 0, self.address, topic_config.read_queue_nums,
                topic_config.write_queue_nums, topic_config.perm)]
        client = self.broker.namesrv_client
        data = None
        for namesrv in self.config.namesrv_addrs:
            try:
                conn = await client.connection(namesrv)
                response = await conn.request(RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 3)
            except Exception:
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                try:
                    data = orjson.loads(response.body)
                except orjson.JSONDecodeError:
                    continue
                break
        if not data:
            return own
        masters = {b.get("brokerName"): (b.get("brokerAddrs") or {}).get("0")
                   for b in data.get("brokerDatas") or ()}
        out = []
        for queue_data in data.get("queueDatas") or ():
            name = queue_data.get("brokerName")
            addr = masters.get(name)
            if not addr:
                continue  # no master now (a failover under way): not routed
            if addr == self.broker.address:
                grpc_addr = self.address
            else:
                grpc_addr = await self._grpc_address(addr)
                if grpc_addr is None:
                    continue
            out.append((name, 0, grpc_addr, int(queue_data.get("readQueueNums", 0)),
                        int(queue_data.get("writeQueueNums", 0)),
                        int(queue_data.get("perm", 6))))
        return out or own

    async def _grpc_address(self, broker_addr: str) -> str | None:
        """Another broker's gRPC address, from its config (GET_BROKER_CONFIG), cached."""
        cached = self._grpc_addrs.get(broker_addr)
        if cached is not None and time.monotonic() - cached[1] < 30:
            return cached[0] or None
        address = ""
        try:
            conn = await self.broker.namesrv_client.connection(broker_addr)
            response = await conn.request(RemotingCommand.request(
                RequestCode.GET_BROKER_CONFIG, {}), 3)
            if response.code == ResponseCode.SUCCESS:
                table = dict(line.split("=", 1) for line in response.body.decode().splitlines()
                             if "=" in line)
                port = int(table.get("grpcServerPort", "0") or 0)
                if port > 0:
                    host = table.get("brokerIP1") or broker_addr.rpartition(":")[0]
                    address = f"{host}:{port}"
        except Exception as exc:
            log.debug("cannot read the gRPC port of broker %s: %s", broker_addr, exc)
            return cached[0] if cached else None
        self._grpc_addrs[broker_addr] = (address, time.monotonic())
        return address or None

    @answers(spb.QueryAssignmentResponse, "QueryAssignment")
    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context: Any
                              ) -> spb.QueryAssignmentResponse:
        self._enter(context, [(request.topic.name, False, SUB), (request.group.name, True, SUB)])
        topic_config = self._topic(request.topic)
        group_config = self._group(request.group)
        fifo = group_config.consume_message_orderly
        assignments = []
        for name, broker_id, address, read, _write, perm in await self._route(
                request.topic.name, topic_config):
            if not perm & Perm.READ or read <= 0:
                continue
            broker = pb.Broker(name=name, id=broker_id,
                               endpoints=self._endpoints(address))
            # The whole broker: its queues are popped with queue id -1 (one queue each
            # for a FIFO group, which then gets a queue's messages in order).
            ids = range(read) if fifo else [-1]
            for queue_id in ids:
                assignments.append(pb.Assignment(message_queue=pb.MessageQueue(
                    topic=request.topic, id=queue_id, permission=pb.READ_WRITE,
                    broker=broker, accept_message_types=list(
                        self.accepted_types(topic_config)))))
        return spb.QueryAssignmentResponse(status=status(), assignments=assignments)


__all__ = ["Routes"]
