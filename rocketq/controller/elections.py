"""Broker liveness and elections, a part of the controller node (``server.Controller``):
this node's own table of broker heartbeats, the leader's loop that elects a new master for a
group whose master is silent and out of lease, the quick election when a master's process
is found gone (its heartbeat connection closed, its ports refusing connections), and the
role notices sent to a group's brokers after an election. The requests that feed it are in
``server``; the replicated state it proposes to is in ``state``, through ``engine``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson

from ..protocol import RemotingCommand, RequestCode
from ..remoting import Connection, RemotingClient
from .config import ControllerConfig
from .engine import Engine, EngineError
from .state import Group, Live, choose_master

log = logging.getLogger("rocketq.controller")

#: The pauses (s) before each look at whether a master whose connection closed is gone.
_GONE_PROBE_PAUSES = (0.0, 0.05, 0.1, 0.2)


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, the unit of the leases and heartbeats the controller
    replicates."""
    return int(time.time() * 1000)


class Elections:
    """Liveness and elections: a part of :class:`server.Controller`, sharing its state
    (declared below, set by ``Controller``)."""

    engine: Engine
    config: ControllerConfig
    client: RemotingClient
    #: group -> broker id -> its last heartbeat (this node's own view).
    live: dict[str, dict[int, Live]]
    #: Elections this node decided, per (group, result).
    elections: dict[tuple[str, str], int]
    #: Elections decided without waiting for the lease, the master's process found gone.
    fast_elections: int
    _tasks: list[asyncio.Task[None]]
    _warned: set[tuple[str, int]]
    _heartbeat_conns: dict[Connection, tuple[str, int]]

    def _count_election(self, group: str, result: str) -> None:
        self.elections[(group, result)] = self.elections.get((group, result), 0) + 1

    def _live(self, name: str, now: int) -> dict[int, Live]:
        return {i: v for i, v in self.live.get(name, {}).items() if v.alive(now)}

    def _alive(self, name: str, broker_id: int, now: int) -> bool:
        entry = self.live.get(name, {}).get(broker_id)
        return entry is not None and entry.alive(now)

    async def _scan(self) -> None:
        """On the leader: elect a new master for every group whose master is silent and out
        of lease."""
        while True:
            await asyncio.sleep(self.config.scanNotActiveBrokerInterval / 1000)
            self._forget_silent(wall_clock_ms())
            if not self.engine.is_leader():
                continue
            for name, group in list(self.engine.state.groups.items()):
                try:
                    await self._maybe_elect(name, group)
                except EngineError as exc:
                    log.warning("election for %s not committed: %s", name, exc)

    def _forget_silent(self, now: int) -> None:
        """Drop the heartbeats of brokers silent past their timeout, as RocketMQ's
        scanNotActiveBroker does: elections only look at live ones, and without this every
        name and id a heartbeat ever carried would stay in memory."""
        for name, by_id in list(self.live.items()):
            for broker_id, live in list(by_id.items()):
                if not live.alive(now):
                    del by_id[broker_id]
            if not by_id:
                del self.live[name]

    def _connection_closed(self, conn: Connection) -> None:
        """A connection closed: if it carried the heartbeats of a group's master, and this
        node decides, look at once whether that master's process is gone."""
        key = self._heartbeat_conns.pop(conn, None)
        if (key is None or not self._tasks or not self.config.electWhenMasterGone
                or not self.engine.is_leader()):
            return
        name, broker_id = key
        group = self.engine.state.groups.get(name)
        if group is None or group.master_id != broker_id:
            return
        task = asyncio.get_running_loop().create_task(
            self._master_gone(name, broker_id, group.master_epoch))
        self._tasks.append(task)
        task.add_done_callback(lambda t: t in self._tasks and self._tasks.remove(t))

    async def _refused(self, addr: str) -> bool:
        """Whether a TCP connection to ``addr`` is refused now: nothing listens there. A
        connection made, a timeout or any other error is not a refusal."""
        host, _, port = addr.rpartition(":")
        try:
            async with asyncio.timeout(self.config.masterGoneProbeTimeoutMillis / 1000):
                _, writer = await asyncio.open_connection(host, int(port))
        except ConnectionRefusedError:
            return True
        except (OSError, ValueError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        return False

    async def _master_gone(self, name: str, broker_id: int, epoch: int) -> None:
        """The master's heartbeat connection closed. Its process is gone when both its
        broker port and its HA port refuse connections: then it can take no write, and a
        new master is elected without waiting for its heartbeats to time out and its lease
        to run out. A master alive (a connection closed for another reason), paused, or
        cut off by a partition that drops packets accepts or does not answer: the lease
        decides, as before."""
        group = self.engine.state.groups.get(name)
        if group is None or group.master_id != broker_id or group.master_epoch != epoch:
            return
        addrs = [group.brokers.get(broker_id, ""), group.ha_addrs.get(broker_id, "")]
        if not all(addrs):
            return
        # A killed process's connections may close a moment before its listening sockets
        # do (the kernel closes its files one by one): look a few times, briefly.
        for pause in _GONE_PROBE_PAUSES:
            await asyncio.sleep(pause)
            group = self.engine.state.groups.get(name)
            if group is None or group.master_id != broker_id or group.master_epoch != epoch:
                return
            if all([await self._refused(addr) for addr in addrs]):
                break
        else:
            log.debug("master %d of %s closed a connection but still listens", broker_id,
                      name)
            return
        log.info("master %d of %s at %s is gone (its connection closed, its ports refuse "
                 "connections): electing without waiting for its lease", broker_id, name,
                 addrs[0])
        self.live.get(name, {}).pop(broker_id, None)
        try:
            await self._maybe_elect(name, group, gone=(broker_id, epoch))
        except EngineError as exc:
            log.warning("election for %s not committed: %s", name, exc)

    async def _maybe_elect(self, name: str, group: Group,
                           gone: tuple[int, int] | None = None) -> None:
        """Elect a new master for ``name`` if its master is silent and out of lease, or
        found gone (``gone``: its id and epoch)."""
        now = wall_clock_ms()
        if group.master_id is None:
            return  # no master yet (brokers ask for the first)
        found_gone = gone is not None and gone == (group.master_id, group.master_epoch)
        if not found_gone and (self._alive(name, group.master_id, now)
                               or now < group.lease_until_ms):
            return  # it still holds on
        choice = choose_master(group, self._live(name, now),
                               self.config.enableElectUncleanMaster)
        if choice is None:
            if (name, group.master_epoch) not in self._warned:
                self._warned.add((name, group.master_epoch))
                self._count_election(name, "no_master_elected")  # once per epoch, as logged
                log.warning("master %d of %s is gone and nobody in its SyncStateSet %s is "
                            "alive: no election", group.master_id, name,
                            sorted(group.sync_state_set))
            return
        event: dict[str, Any] = {"op": "elect", "group": name, "master_id": choice,
                                 "now_ms": now, "lease_ms": self.config.masterLeaseMillis}
        if found_gone and gone is not None:
            event.update(gone_master=gone[0], gone_epoch=gone[1])
        result = await self.engine.propose(event)
        self._count_election(name, "no_master_elected" if "error" in result
                             else "new_master_elected")
        if "error" not in result and found_gone:
            self.fast_elections += 1
        if "error" not in result:
            log.info("broker %d elected master of %s, epoch %d", choice, name,
                     result["masterEpoch"])
            self._notify(name)

    def _notify(self, name: str) -> None:
        """Tell the group's live brokers their roles now (they poll too, so a lost notice
        only delays them)."""
        if not self.config.notifyBrokerRoleChanged:
            return
        group = self.engine.state.groups.get(name)
        if group is None:
            return
        info = group.info()
        header = {"masterAddress": info["masterAddress"], "masterEpoch": info["masterEpoch"],
                  "masterHaAddress": info["masterHaAddress"],
                  "syncStateSetEpoch": info["syncStateSetEpoch"],
                  "masterBrokerId": info["masterBrokerId"]}
        body = orjson.dumps({"syncStateSet": info["syncStateSet"],
                             "syncStateSetEpoch": info["syncStateSetEpoch"],
                             "brokerAddrs": info["brokerAddrs"]})
        loop = asyncio.get_running_loop()
        for broker_id in self._live(name, wall_clock_ms()):
            addr = group.brokers.get(broker_id)
            if addr:  # a command each: every request carries its own opaque
                loop.create_task(self._send_quietly(addr, RemotingCommand.request(
                    RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, body=body)))

    async def _send_quietly(self, addr: str, cmd: RemotingCommand) -> None:
        with contextlib.suppress(Exception):
            await self.client.invoke_oneway(addr, cmd)
