"""The NameServer: brokers register their topics here, clients ask it for routes.

Several NameServers run side by side without talking to each other; brokers register with
all of them. Nothing is written to disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from typing import Any

import orjson

from ..acl import NAMESRV_ADMIN_CODES, AccessControl
from ..protocol import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from ..protocol.topic import OFFSET_LOG_TOPIC, SINK_LEDGER_TOPIC
from ..remoting import Connection, RemotingServer, TlsSettings
from .routes import RouteTable

log = logging.getLogger("rocketq.namesrv")

DEFAULT_PORT = 9876
SYSTEM_TOPICS = {"TBW102", "SELF_TEST_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT",
                 SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, SINK_LEDGER_TOPIC,
                 OFFSET_LOG_TOPIC}

__all__ = ["DEFAULT_PORT", "NameServer", "RouteTable"]


def json_body(value: Any) -> bytes:
    return orjson.dumps(value)


def _int_fields(topic_config: dict[str, Any]) -> bool:
    """Whether a registered TopicConfig's numbers are Java ints (or absent): anything else
    would fail later, when routes are built from them."""
    return all(type(v := topic_config.get(k, 0)) is int and JAVA_INT_MIN <= v <= JAVA_INT_MAX
               for k in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"))


class NameServer:
    """A NameServer listening on ``host:port`` (port 0 picks a free one)."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
                 scan_interval: float = 5.0, acl_file: str | None = None,
                 tls: TlsSettings | None = None) -> None:
        """``acl_file``: check every request against this ``plain_acl.yml`` (registering
        brokers and changing routes or KV config then needs an admin account); ``tls``: the
        port's TLS mode and certificate."""
        self.routes = RouteTable()
        self.kv: dict[str, dict[str, str]] = {}
        self.scan_interval = scan_interval
        self.acl = AccessControl(acl_file, NAMESRV_ADMIN_CODES) if acl_file else None
        self.server = RemotingServer(self.acl.guard(self.handle) if self.acl else self.handle,
                                     host, port, on_close=self._connection_closed, tls=tls)
        self._scan_task: asyncio.Task[None] | None = None
        self._handlers = {
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._all_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._system_topics,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.PUT_KV_CONFIG: self._put_kv,
            RequestCode.GET_KV_CONFIG: self._get_kv,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._kv_list,
        }

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()
        if self.acl is not None:
            self.acl.start_watching()
        self._scan_task = asyncio.get_running_loop().create_task(self._scan())
        log.info("NameServer listening on %s", self.address)

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
        if self.acl is not None:
            await self.acl.stop_watching()
        await self.server.stop()

    async def _scan(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval)
            for addr in self.routes.expire():
                log.warning("broker %s silent for too long: removed from routes", addr)

    def _connection_closed(self, conn: Connection) -> None:
        for addr in self.routes.drop_connection(conn):
            log.info("broker %s disconnected: removed from routes", addr)

    # ------------------------------------------------------------------ dispatch
    def handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._handlers.get(cmd.code)  # type: ignore[call-overload]
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                remark=f" request type {cmd.code} not supported")
        return handler(conn, cmd)

    # ------------------------------------------------------------------ brokers
    def _register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = cmd.body
        expected_crc = cmd.int_field("bodyCrc32", 0)
        if expected_crc and zlib.crc32(body) & 0x7FFFFFFF != expected_crc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="crc32 not match")
        topic_configs: dict[str, dict[str, Any]] | None = None
        data_version: dict[str, Any] = {}
        if body:
            try:
                wrapper = orjson.loads(body).get("topicConfigSerializeWrapper") or {}
            except (orjson.JSONDecodeError, AttributeError):
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    remark="register body is not RegisterBrokerBody JSON")
            if not isinstance(wrapper, dict):
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    remark="topicConfigSerializeWrapper is not a JSON object")
            topic_configs = wrapper.get("topicConfigTable") or {}
            data_version = wrapper.get("dataVersion") or {}
            if not isinstance(topic_configs, dict) or not all(
                    isinstance(t, dict) and _int_fields(t) for t in topic_configs.values()):
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    remark="topicConfigTable is not an object of TopicConfig "
                                           "objects")
            if not isinstance(data_version, dict):
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    remark="dataVersion is not a JSON object")
        timeout = cmd.field("heartbeatTimeoutMillis")
        result = self.routes.register_broker(
            cmd.field("clusterName") or "DefaultCluster", cmd.field("brokerAddr") or "",
            cmd.field("brokerName") or "", cmd.int_field("brokerId", 0),
            cmd.field("haServerAddr") or "", topic_configs, data_version,
            timeout_ms=int(timeout) if timeout and timeout.isdigit() else None, connection=conn)
        if result.holder is not None:
            # Two brokers under one name and id would take each other's routes: the one
            # registered and alive keeps them (see routes.py for controller-mode failover).
            remark = (f"broker {cmd.field('brokerName')} id {cmd.int_field('brokerId', 0)} is "
                      f"registered from {result.holder}, which is alive: "
                      f"{cmd.field('brokerAddr')} refused (stop {result.holder} first, or give "
                      f"this broker another brokerName or brokerId)")
            log.error("%s", remark)
            return cmd.response(ResponseCode.SYSTEM_ERROR, {"conflictBrokerAddr": result.holder},
                                remark=remark)
        return cmd.response(ResponseCode.SUCCESS, {"masterAddr": result.master_addr,
                                                   "haServerAddr": result.ha_server_addr})

    def _unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.unregister_broker(cmd.field("clusterName") or "", cmd.field("brokerAddr")
                                      or "", cmd.field("brokerName") or "",
                                      cmd.int_field("brokerId", 0))
        return cmd.response()

    def _query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        addr = cmd.field("brokerAddr") or ""
        try:
            version = orjson.loads(cmd.body) if cmd.body else {}
        except orjson.JSONDecodeError:
            version = {}
        changed = self.routes.is_changed(addr, version)
        if not changed:
            self.routes.heartbeat(addr)
        return cmd.response(ResponseCode.SUCCESS, {"changed": changed},
                            json_body(self.routes.data_version(addr) or {}))

    # ------------------------------------------------------------------ clients
    def _route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.field("topic") or ""
        route = self.routes.route(topic)
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                remark=f"No topic route info in name server for the topic: "
                                       f"{topic}")
        return cmd.response(ResponseCode.SUCCESS, body=json_body(route))

    def _cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=json_body(self.routes.cluster_info()))

    def _all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS,
                            body=json_body({"topicList": self.routes.topics()}))

    def _topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topics = self.routes.topics_of_cluster(cmd.field("cluster") or "")
        return cmd.response(ResponseCode.SUCCESS, body=json_body({"topicList": topics}))

    def _system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topics = sorted(set(self.routes.topics()) & SYSTEM_TOPICS
                        | set(self.routes.clusters) | set(self.routes.brokers))
        return cmd.response(ResponseCode.SUCCESS, body=json_body({"topicList": topics}))

    def _delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(cmd.field("topic") or "", cmd.field("clusterName"))
        return cmd.response()

    # ------------------------------------------------------------------ KV config
    def _put_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        namespace, key = cmd.field("namespace"), cmd.field("key")
        if not namespace or not key:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark="namespace and key")
        self.kv.setdefault(namespace, {})[key] = cmd.field("value") or ""
        return cmd.response()

    def _get_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        value = self.kv.get(cmd.field("namespace") or "", {}).get(cmd.field("key") or "")
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                remark=f"No config item, Namespace: {cmd.field('namespace')} "
                                       f"Key: {cmd.field('key')}")
        return cmd.response(ResponseCode.SUCCESS, {"value": value})

    def _delete_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.kv.get(cmd.field("namespace") or "", {}).pop(cmd.field("key") or "", None)
        return cmd.response()

    def _kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        table = self.kv.get(cmd.field("namespace") or "")
        if not table:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, remark="no such namespace")
        return cmd.response(ResponseCode.SUCCESS, body=json_body({"table": table}))
