"""Consensus engines: the one interface the controller needs of a replicated log, and the
embedded Raft engine (pysyncobj) behind it.

An engine holds a ``ControllerState`` and applies proposed events to it in one order on every
node. The controller reads ``state`` freely (it may trail the leader's by a few events; every
decision a broker acts on carries an epoch, so a stale read is refused, never obeyed) and
proposes changes with ``propose``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Protocol

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
            os.makedirs(self.data_dir, exist_ok=True)
            conf.journalFile = os.path.join(self.data_dir, "raft.journal")
            conf.fullDumpFile = os.path.join(self.data_dir, "raft.dump")
        self._consumer = Replicated()
        self._obj = await asyncio.to_thread(
            SyncObj, raft_address(self.self_addr), [raft_address(p) for p in self.peers],
            conf, [self._consumer])
        log.info("controller Raft node %s started (peers %s)", raft_address(self.self_addr),
                 ", ".join(self.peers) or "none")

    async def stop(self) -> None:
        if self._obj is not None:
            obj, self._obj = self._obj, None
            obj.destroy()
            # The tick thread closes the sockets on its next round.
            await asyncio.sleep(0.1)

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
