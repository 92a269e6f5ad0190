"""Consensus engines: the one interface the controller needs of a replicated log, and the
embedded Raft engine (pysyncobj) behind it.

An engine holds a ``ControllerState`` and applies proposed events to it in one order on every
node. The controller reads ``state`` freely (it may trail the leader's by a few events; every
decision a broker acts on carries an epoch, so a stale read is refused, never obeyed) and
proposes changes with ``propose``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any, Protocol

import orjson

from .state import ControllerState

log = logging.getLogger("rocketq.controller")


class EngineError(Exception):
    """The event could not be committed (no leader reachable, or the engine is stopping)."""


class Engine(Protocol):
    """What the controller asks of a consensus engine."""

    state: ControllerState

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def is_leader(self) -> bool:
        """Whether this node may decide (propose elections) now."""
        ...

    def leader(self) -> str | None:
        """The deciding node's controller address, if known."""
        ...

    async def propose(self, event: dict[str, Any]) -> dict[str, Any]:
        """Commit ``event`` and return what applying it returned."""
        ...


def raft_address(controller_addr: str) -> str:
    """The Raft port of a controller is its request port + 1."""
    host, _, port = controller_addr.rpartition(":")
    return f"{host}:{int(port) + 1}"


def controller_address(raft_addr: str) -> str:
    host, _, port = raft_addr.rpartition(":")
    return f"{host}:{int(port) - 1}"


class RaftEngine:
    """Embedded Raft from pysyncobj, between the controller nodes themselves (1 or 3 of them,
    no other server). ``self_addr`` and ``peers`` are controller request addresses; Raft
    talks on each one's port + 1. With ``data_dir`` the Raft journal and snapshots are kept
    on disk, so a restarted node recovers the state."""

    def __init__(self, self_addr: str, peers: list[str], data_dir: str | None = None) -> None:
        self.self_addr = self_addr
        self.peers = [p for p in peers if p != self_addr]
        self.data_dir = data_dir
        self._obj: Any = None
        self._consumer: Any = None
        #: The lock on ``data_dir`` while this node runs: two nodes appending to one journal
        #: would corrupt it.
        self._lock: Any = None

    async def start(self) -> None:
        from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated

        class Replicated(SyncObjConsumer):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.state = ControllerState()

            @replicated  # type: ignore[misc]
            def apply(self, event: dict[str, Any]) -> dict[str, Any]:
                return self.state.apply(event)

        conf = SyncObjConf(autoTick=True, dynamicMembershipChange=False,
                           connectionRetryTime=1.0, raftMinTimeout=0.4, raftMaxTimeout=1.0,
                           appendEntriesPeriod=0.05, commandsWaitLeader=True)
        if self.data_dir:
            from ..dirlock import DirectoryLock

            # Before pysyncobj opens the journal or binds the Raft port: a second controller
            # on this directory is refused (DirectoryLockedError) and the first goes on.
            self._lock = DirectoryLock.acquire(
                self.data_dir, f"controller {self.self_addr} (Raft {raft_address(self.self_addr)})",
                what="controller data directory")
            conf.journalFile = os.path.join(self.data_dir, "raft.journal")
            conf.fullDumpFile = os.path.join(self.data_dir, "raft.dump")
        self._consumer = Replicated()
        try:
            self._obj = await asyncio.to_thread(
                SyncObj, raft_address(self.self_addr), [raft_address(p) for p in self.peers],
                conf, [self._consumer])
        except BaseException:
            self._release_lock()
            raise
        log.info("controller Raft node %s started (peers %s)", raft_address(self.self_addr),
                 ", ".join(self.peers) or "none")

    async def stop(self) -> None:
        if self._obj is not None:
            obj, self._obj = self._obj, None
            obj.destroy()
            # The tick thread closes the sockets on its next round.
            await asyncio.sleep(0.1)
        self._release_lock()

    def _release_lock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    @property
    def state(self) -> ControllerState:
        """The replicated state (read through the consumer: a restored snapshot replaces
        its attributes)."""
        if self._consumer is None:
            return ControllerState()
        return self._consumer.state

    def is_leader(self) -> bool:
        return self._obj is not None and bool(self._obj._isLeader())

    def leader(self) -> str | None:
        if self._obj is None:
            return None
        node = self._obj._getLeader()
        return controller_address(node.address) if node is not None else None

    async def propose(self, event: dict[str, Any], timeout: float = 3.0) -> dict[str, Any]:
        if self._obj is None:
            raise EngineError("the engine is stopped")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[dict[str, Any]] = loop.create_future()

        def callback(result: Any, error: Any) -> None:
            def settle() -> None:
                if done.done():
                    return
                if error == 0:  # FAIL_REASON.SUCCESS
                    done.set_result(result)
                else:
                    done.set_exception(EngineError(f"not committed (reason {error})"))
            loop.call_soon_threadsafe(settle)

        self._consumer.apply(event, callback=callback)
        try:
            async with asyncio.timeout(timeout):
                return await done
        except TimeoutError:
            raise EngineError(f"not committed within {timeout} s") from None


class EtcdEngine:
    """etcd as the consensus engine, through aetcd: the production option.

    The state is one JSON value; every event is applied to the latest value and written back
    in a transaction that succeeds only if nobody wrote in between (compare on the value's
    ``mod_revision``), so events take effect one at a time, in one order, as a replicated log
    gives. The deciding node holds a key under an etcd lease (``ttl`` seconds): it decides
    only while the lease is fresh on its own clock, and another node can take the key only
    once etcd has let the lease expire."""

    def __init__(self, self_addr: str, endpoint: str, prefix: str = "/rocketq/controller",
                 ttl: int = 2) -> None:
        self.self_addr = self_addr
        host_port = endpoint.split("://", 1)[-1].rstrip("/")
        host, _, port = host_port.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port or 2379)
        self.state_key = f"{prefix}/state".encode()
        self.leader_key = f"{prefix}/leader".encode()
        self.ttl = ttl
        self.state = ControllerState()
        self._revision = 0
        self._client: Any = None
        self._lease: Any = None
        self._leading_until = 0.0
        self._leader: str | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        import aetcd

        self._client = aetcd.Client(self.host, self.port, timeout=3)
        await self._refresh()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._campaign()), loop.create_task(self._follow())]
        log.info("controller %s on etcd %s:%d", self.self_addr, self.host, self.port)

    async def stop(self) -> None:
        from ..remoting import cancel_tasks

        await cancel_tasks(self._tasks)
        self._tasks = []
        if self._client is not None:
            if self._lease is not None and self.is_leader():
                with contextlib.suppress(Exception):
                    await self._lease.revoke()  # hand over at once, not after the TTL
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None
        self._leading_until = 0.0

    def is_leader(self) -> bool:
        return time.monotonic() < self._leading_until

    def leader(self) -> str | None:
        return self.self_addr if self.is_leader() else self._leader

    async def _refresh(self) -> None:
        got = await self._client.get(self.state_key)
        if got is None:
            self.state, self._revision = ControllerState(), 0
        elif got.mod_revision != self._revision:
            self.state = ControllerState.from_json(orjson.loads(got.value))
            self._revision = got.mod_revision

    async def _follow(self) -> None:
        """Keep the local copy of the state fresh (reads never wait for etcd)."""
        while True:
            with contextlib.suppress(Exception):
                await self._refresh()
            await asyncio.sleep(0.1)

    async def _campaign(self) -> None:
        """Hold the leader key under a lease, or learn who does."""
        tx = self._client.transactions
        while True:
            try:
                began = time.monotonic()
                if self.is_leader():
                    await self._lease.refresh()
                    self._leading_until = began + self.ttl * 2 / 3
                else:
                    self._lease = await self._client.lease(self.ttl)
                    won, _ = await self._client.transaction(
                        compare=[tx.create(self.leader_key) == 0],
                        success=[tx.put(self.leader_key, self.self_addr.encode(),
                                        lease=self._lease)],
                        failure=[])
                    if won:
                        self._leading_until = began + self.ttl * 2 / 3
                        log.info("controller %s leads (etcd)", self.self_addr)
                    else:
                        with contextlib.suppress(Exception):
                            await self._lease.revoke()
                        got = await self._client.get(self.leader_key)
                        self._leader = got.value.decode() if got is not None else None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._leading_until = 0.0
                log.warning("etcd unreachable from controller %s: %s", self.self_addr, exc)
            await asyncio.sleep(self.ttl / 4)

    async def propose(self, event: dict[str, Any], timeout: float = 3.0) -> dict[str, Any]:
        if self._client is None:
            raise EngineError("the engine is stopped")
        tx = self._client.transactions
        try:
            async with asyncio.timeout(timeout):
                while True:
                    got = await self._client.get(self.state_key)
                    revision = got.mod_revision if got is not None else 0
                    state = (ControllerState.from_json(orjson.loads(got.value))
                             if got is not None else ControllerState())
                    result = state.apply(event)
                    if "error" in result:  # nothing changed: nothing to write
                        return result
                    guard = (tx.mod(self.state_key) == revision if revision
                             else tx.create(self.state_key) == 0)
                    ok, _ = await self._client.transaction(
                        compare=[guard],
                        success=[tx.put(self.state_key, orjson.dumps(state.to_json()))],
                        failure=[])
                    if ok:
                        self.state = state
                        await self._refresh()
                        return result
        except TimeoutError:
            raise EngineError(f"not committed within {timeout} s") from None
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"etcd: {exc}") from exc
