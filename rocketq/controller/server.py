"""The controller node: RocketMQ 5's controller requests over the remoting protocol, broker
liveness, and the election loop, on top of a consensus engine.

Brokers heartbeat every controller node (BROKER_HEARTBEAT 904); each node keeps its own
liveness table. Only the engine's leader decides: it renews the master's lease on the
master's heartbeat, and when a master has gone silent and its lease has run out, it elects a
new one from the live SyncStateSet and tells the group's brokers (NOTIFY_BROKER_ROLE_CHANGED
1008). Any node answers reads; a node that is not the leader answers a change with
CONTROLLER_NOT_LEADER, naming the leader.

Like the NameServer's and the broker's, the controller's port may check every request
against an ACL (``acl``: brokers sign theirs; an unsigned or wrongly signed one gets
NO_PERMISSION and changes nothing) and serve TLS (``tls``). Its own requests to brokers
(role notices) are signed with ``signer`` and encrypted with ``ssl``.

This module holds the node and its requests; the liveness table, the election loop and the
role notices are in ``elections``, the settings in ``config``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
import time
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from ..protocol import JAVA_LONG_MAX, RemotingCommand, RequestCode, ResponseCode
from ..remoting import (
    Connection,
    RemotingClient,
    RemotingServer,
    Signer,
    TlsSettings,
    cancel_tasks,
)
from .config import ControllerConfig
from .elections import Elections, wall_clock_ms
from .engine import Engine, EngineError
from .state import Live, choose_master

log = logging.getLogger("rocketq.controller")


Handler = Callable[[Connection, RemotingCommand], Any]


class RequestGuard(Protocol):
    """What the controller needs of an ACL: ``acl.AccessControl`` made with
    ``CONTROLLER_ADMIN_CODES`` is one (the controller does not import ``acl``: the CLI hands
    it in)."""

    def guard(self, handler: Handler) -> Handler:
        """``handler`` behind the ACL: a refused request never reaches it."""
        ...

    def start_watching(self) -> None: ...

    async def stop_watching(self) -> None: ...


class Controller(Elections):
    """One controller node, serving on ``host:port``; its liveness table and elections are
    in :class:`elections.Elections`."""

    def __init__(self, engine: Engine, host: str = "127.0.0.1", port: int = 9878,
                 config: ControllerConfig | None = None, *, acl: RequestGuard | None = None,
                 tls: TlsSettings | None = None, signer: Signer | None = None,
                 ssl: _ssl.SSLContext | None = None) -> None:
        """``acl`` checks every request before it is served; ``tls`` is the port's TLS
        mode; ``signer`` and ``ssl`` sign and encrypt the role notices sent to brokers
        (whose ports may check and want them too)."""
        self.engine = engine
        self.config = config or ControllerConfig()
        self.acl = acl
        self.server = RemotingServer(acl.guard(self.handle) if acl is not None else self.handle,
                                     host, port, tls=tls, on_close=self._connection_closed)
        self.client = RemotingClient(signer=signer, ssl=ssl)
        #: group -> broker id -> its last heartbeat (this node's own view).
        self.live: dict[str, dict[int, Live]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._warned: set[tuple[str, int]] = set()
        #: Connection -> the (group, broker id) whose heartbeats it carried: when a master's
        #: closes, the leader looks whether its process is gone.
        self._heartbeat_conns: dict[Connection, tuple[str, int]] = {}
        #: Elections decided without waiting for the lease, the master's process found gone.
        self.fast_elections = 0
        self._started = time.monotonic()
        #: Elections this node decided, per (group, result): new_master_elected,
        #: keep_current_master (asked while the master holds on), no_master_elected.
        self.elections: dict[tuple[str, str], int] = {}
        self._handlers = {
            RequestCode.BROKER_HEARTBEAT: self.heartbeat,
            RequestCode.CONTROLLER_REGISTER_BROKER: self.register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.get_metadata_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.get_sync_state_data,
        }

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        self.server.bind()
        self._started = time.monotonic()
        await self.engine.start()
        await self.server.start()
        if self.acl is not None:
            self.acl.start_watching()
        self._tasks.append(asyncio.get_running_loop().create_task(self._scan()))
        log.info("controller listening on %s", self.address)

    async def stop(self) -> None:
        self._heartbeat_conns.clear()  # the connections closing now say nothing of masters
        await cancel_tasks(self._tasks)
        self._tasks = []
        await self.server.stop()
        if self.acl is not None:
            await self.acl.stop_watching()
        await self.client.close()
        await self.engine.stop()

    # ------------------------------------------------------------------ requests
    def handle(self, conn: Connection, cmd: RemotingCommand):
        handler = self._handlers.get(cmd.code)  # type: ignore[call-overload]
        if (cmd.code == RequestCode.BROKER_HEARTBEAT and conn is not None
                and not conn.closed.done()):
            group, broker_id = cmd.field("brokerName") or "", cmd.int_field("brokerId", -1)
            if group and broker_id > 0:
                self._heartbeat_conns[conn] = (group, broker_id)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                remark=f"request type {cmd.code} not supported")
        return handler(cmd)

    def _not_leader(self, cmd: RemotingCommand) -> RemotingCommand | None:
        if self.engine.is_leader():
            return None
        leader = self.engine.leader() or ""
        return cmd.response(ResponseCode.CONTROLLER_NOT_LEADER,
                            {"controllerLeaderAddress": leader},
                            remark=f"the controller leader is {leader or 'unknown'}")

    async def _commit(self, cmd: RemotingCommand, event: dict[str, Any]) -> RemotingCommand:
        try:
            result = await self.engine.propose(event)
        except EngineError as exc:
            return cmd.response(ResponseCode.CONTROLLER_NOT_LEADER, remark=str(exc))
        return self._answer(cmd, result)

    @staticmethod
    def _answer(cmd: RemotingCommand, result: dict[str, Any],
                code: int = ResponseCode.SUCCESS) -> RemotingCommand:
        if "error" in result:
            return cmd.response(result["error"], remark=result["remark"])
        header = {k: v for k, v in result.items()
                  if k in ("masterBrokerId", "masterAddress", "masterHaAddress", "masterEpoch",
                           "syncStateSetEpoch", "brokerId", "leaseUntil")}
        body = {"syncStateSet": result["syncStateSet"],
                "syncStateSetEpoch": result["syncStateSetEpoch"],
                "brokerAddrs": result["brokerAddrs"]}
        return cmd.response(code, header, body=orjson.dumps(body))

    def heartbeat(self, cmd: RemotingCommand):
        """BROKER_HEARTBEAT: note the broker alive; the leader renews a master's lease."""
        group = cmd.field("brokerName") or ""
        broker_id = cmd.int_field("brokerId", -1)
        if not group or broker_id <= 0:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                remark="a heartbeat needs brokerName and brokerId")
        now = wall_clock_ms()
        self.live.setdefault(group, {})[broker_id] = Live(
            cmd.field("brokerAddr") or "", cmd.int_field("epoch", -1),
            cmd.int_field("maxOffset", -1), cmd.int_field("confirmOffset", -1),
            cmd.int_field("electionPriority", 1 << 31),
            now, cmd.int_field("heartbeatTimeoutMills", self.config.brokerHeartbeatTimeoutMillis))
        info = self.engine.state.groups.get(group)
        if info is None or info.master_id != broker_id:
            return cmd.response(ResponseCode.SUCCESS)
        refused = self._not_leader(cmd)
        if refused is not None:
            return refused
        return self._renew(cmd, group, broker_id, now)

    async def _renew(self, cmd: RemotingCommand, group: str, broker_id: int, now: int
                     ) -> RemotingCommand:
        answer = await self._commit(cmd, {
            "op": "renew", "group": group, "broker_id": broker_id,
            "master_epoch": cmd.int_field("epoch", -1), "now_ms": now,
            "lease_ms": self.config.masterLeaseMillis})
        if answer.code == ResponseCode.SUCCESS:
            # The master counts this long from before it asked, on its own clock.
            answer.ext_fields["leaseMillis"] = str(self.config.masterLeaseMillis)
        return answer

    def register_broker(self, cmd: RemotingCommand):
        """CONTROLLER_REGISTER_BROKER: join the group (keeping a persisted id, or getting one)
        and learn its master."""
        refused = self._not_leader(cmd)
        if refused is not None:
            return refused
        group = cmd.field("brokerName") or ""
        addr = cmd.field("brokerAddress") or ""
        if not group or not addr:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                remark="registering needs brokerName and brokerAddress")
        if cmd.int_field("brokerId", -1) >= JAVA_LONG_MAX:
            # The group's next id would be past Java's long, the type brokers read it as.
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                remark="brokerId leaves no id after it")
        return self._register(cmd, group, addr)

    async def _register(self, cmd: RemotingCommand, name: str, addr: str) -> RemotingCommand:
        before = self.engine.state.groups.get(name)
        was = (before.master_addr, before.ha_addrs.get(before.master_id or -1)) if before \
            else None
        answer = await self._commit(cmd, {
            "op": "register", "cluster": cmd.field("clusterName") or "DefaultCluster",
            "group": name, "broker_id": cmd.int_field("brokerId", -1), "addr": addr,
            "ha_addr": cmd.field("haServerAddr") or ""})
        group = self.engine.state.groups.get(name)
        if (answer.code == ResponseCode.SUCCESS and group is not None and was is not None
                and group.master_id is not None
                and was != (group.master_addr, group.ha_addrs.get(group.master_id))):
            # The master restarted within its lease on other ports: its slaves follow it
            # there now rather than at their next poll.
            self._notify(name)
        return answer

    async def elect_master(self, cmd: RemotingCommand) -> RemotingCommand:
        """CONTROLLER_ELECT_MASTER: a broker asks for an election. The first election of a
        group makes the asker master; later ones follow the policy, and only once the
        master's lease has run out."""
        refused = self._not_leader(cmd)
        if refused is not None:
            return refused
        name = cmd.field("brokerName") or ""
        group = self.engine.state.groups.get(name)
        if group is None:
            return cmd.response(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                                remark=f"broker group {name} is not registered")
        now = wall_clock_ms()
        if group.master_id is not None and (now < group.lease_until_ms
                                            or self._alive(name, group.master_id, now)):
            self._count_election(name, "keep_current_master")
            return self._answer(cmd, group.info(), ResponseCode.CONTROLLER_MASTER_STILL_EXIST)
        held = cmd.int_field("epoch", 0)
        if held >= JAVA_LONG_MAX:
            # The new master's epoch would be past Java's long, the type brokers read it as.
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                remark=f"epoch {held} leaves no epoch after it")
        if group.master_epoch == 0 and held > 0 and (
                time.monotonic() - self._started < self.config.masterLeaseMillis / 1000):
            # This controller lost its state while the group had a master: that master may
            # still hold its lease, so no election until a lease has passed.
            return cmd.response(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                                remark="the controller restarted without its state: "
                                       "electing once the old master's lease has run out")
        if group.master_epoch == 0 and held <= 0:
            choice: int | None = cmd.int_field("brokerId", -1)  # a new group
        elif group.master_epoch == 0:
            # After a lost state, nobody knows the SyncStateSet: the live broker with the
            # newest epoch and the longest log, as their heartbeats say.
            choice = choose_master(group, self._live(name, now), unclean=True)
        else:
            choice = choose_master(group, self._live(name, now),
                                   self.config.enableElectUncleanMaster)
        if choice is None or choice not in group.brokers:
            self._count_election(name, "no_master_elected")
            return cmd.response(ResponseCode.CONTROLLER_ELECT_MASTER_FAILED,
                                remark=f"no live broker of {name} in its SyncStateSet")
        answer = await self._commit(cmd, {
            "op": "elect", "group": name, "master_id": choice, "now_ms": now,
            "lease_ms": self.config.masterLeaseMillis, "min_epoch": max(held, 0)})
        self._count_election(name, "new_master_elected" if answer.code == ResponseCode.SUCCESS
                             else "no_master_elected")
        if answer.code == ResponseCode.SUCCESS:
            self._notify(name)
        return answer

    def get_replica_info(self, cmd: RemotingCommand) -> RemotingCommand:
        """CONTROLLER_GET_REPLICA_INFO: the group's master, epochs and SyncStateSet, from
        the leader only (as RocketMQ's controllers answer every request): a follower's copy
        may be stale, a node cut from its majority's for good, and a broker polling it would
        never learn of an election (CONTROLLER_NOT_LEADER names the leader instead)."""
        refused = self._not_leader(cmd)
        if refused is not None:
            return refused
        name = cmd.field("brokerName") or ""
        group = self.engine.state.groups.get(name)
        if group is None:
            return cmd.response(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                                remark=f"broker group {name} is not registered")
        return self._answer(cmd, group.info())

    def alter_sync_state_set(self, cmd: RemotingCommand):
        """CONTROLLER_ALTER_SYNC_STATE_SET: the master reports who is in sync now."""
        refused = self._not_leader(cmd)
        if refused is not None:
            return refused
        try:
            body = orjson.loads(cmd.body or b"{}")
            members = [int(i) for i in body["syncStateSet"]]
            ss_epoch = int(body["syncStateSetEpoch"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                remark="the body must be a SyncStateSet")
        return self._commit(cmd, {
            "op": "alter_sync_state_set", "group": cmd.field("brokerName") or "",
            "master_id": cmd.int_field("masterBrokerId", -1),
            "master_epoch": cmd.int_field("masterEpoch", -1),
            "sync_state_set_epoch": ss_epoch, "members": members})

    def get_metadata_info(self, cmd: RemotingCommand) -> RemotingCommand:
        """CONTROLLER_GET_METADATA_INFO: who leads the controller."""
        leader = self.engine.leader() or ""
        return cmd.response(ResponseCode.SUCCESS, {
            "controllerLeaderAddress": leader, "isLeader": self.engine.is_leader()})

    def get_sync_state_data(self, cmd: RemotingCommand) -> RemotingCommand:
        """CONTROLLER_GET_SYNC_STATE_DATA: every asked group (all when none is named), with
        each member's liveness as this node sees it."""
        try:
            names = orjson.loads(cmd.body) if cmd.body else []
        except orjson.JSONDecodeError:
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                remark="the body must be a list of broker names")
        if names and (not isinstance(names, list)
                      or not all(isinstance(n, str) for n in names)):
            return cmd.response(ResponseCode.CONTROLLER_INVALID_REQUEST,
                                remark="the body must be a list of broker names")
        groups = self.engine.state.groups
        now = wall_clock_ms()
        table = {}
        for name in names or sorted(groups):
            group = groups.get(name)
            if group is None:
                continue
            live = self._live(name, now)
            table[name] = {**group.info(), "replicas": [
                {"brokerId": i, "brokerAddress": a, "alive": i in live,
                 "inSync": i in group.sync_state_set,
                 "maxOffset": live[i].max_offset if i in live else -1}
                for i, a in sorted(group.brokers.items())]}
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"replicasInfoTable": table}))
