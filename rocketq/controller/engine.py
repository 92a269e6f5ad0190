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
        """Whether this node may decide (propose elections) now: it leads, and its ``state``
        holds everything committed before it began to lead. A leader still catching up
        answers as a follower does (CONTROLLER_NOT_LEADER)."""
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


def raft_caught_up(obj: Any) -> bool:
    """Whether a pysyncobj leader has applied the no-op entry it appended on becoming leader.

    Entries of earlier terms count as committed only once an entry of the leader's own term
    is, so until then a new leader's ``raftCommitIndex`` and its state may trail what the
    previous leader committed. Once the no-op is applied, every entry before it is too.
    pysyncobj keeps the no-op's index privately (it waits for it the same way before a
    membership change); without one this node has not led in this process."""
    noop = getattr(obj, "_SyncObj__noopIDx", None)
    return noop is not None and obj.raftLastApplied >= noop


class RaftEngine:
    """Embedded Raft from pysyncobj, between the controller nodes themselves (1 or 3 of them,
    no other server). ``self_addr`` and ``peers`` are controller request addresses; Raft
    talks on each one's port + 1. With ``data_dir`` the Raft journal and snapshots are kept
    on disk, so a restarted node recovers the state. With ``password`` (the same on every
    node) Raft traffic is encrypted and authenticated with it (pysyncobj's ``password``:
    Fernet with a key derived by PBKDF2; it needs the ``cryptography`` package): a node
    or client without it can neither read the log nor vote or append."""

    def __init__(self, self_addr: str, peers: list[str], data_dir: str | None = None,
                 password: str | None = None) -> None:
        self.self_addr = self_addr
        self.peers = [p for p in peers if p != self_addr]
        self.data_dir = data_dir
        self.password = password or None
        if self.password is not None:
            from pysyncobj.encryptor import HAS_CRYPTO

            if not HAS_CRYPTO:
                raise ValueError("a controller secret (Raft password) needs the cryptography "
                                 "package: pip install cryptography")
        self._obj: Any = None
        self._consumer: Any = None
        #: The lock on ``data_dir`` while this node runs: two nodes appending to one journal
        #: would corrupt it.
        self._lock: Any = None
        #: The term in which this node leads and has applied its no-op (see ``_on_tick``).
        self._serving_term: int | None = None

    async def start(self) -> None:
        from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated

        class Replicated(SyncObjConsumer):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.state = ControllerState()

            @replicated  # type: ignore[misc]
            def apply(self, event: dict[str, Any]) -> dict[str, Any]:
                return self.state.apply(event)

        # A leader cut from its majority steps down after leaderFallbackTimeout; with
        # pysyncobj's 30 s it would go on saying it leads (to brokers and admins asking)
        # while it can commit nothing and the majority has a leader of its own.
        conf = SyncObjConf(autoTick=True, dynamicMembershipChange=False,
                           connectionRetryTime=1.0, raftMinTimeout=0.4, raftMaxTimeout=1.0,
                           appendEntriesPeriod=0.05, commandsWaitLeader=True,
                           leaderFallbackTimeout=1.0, password=self.password)
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
        self._obj.addOnTickCallback(self._on_tick)
        log.info("controller Raft node %s started (peers %s)", raft_address(self.self_addr),
                 ", ".join(self.peers) or "none")

    async def stop(self) -> None:
        if self._obj is not None:
            obj, self._obj = self._obj, None
            self._serving_term = None
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
        obj = self._obj
        return (obj is not None and bool(obj._isLeader())
                and self._serving_term == obj.raftCurrentTerm)

    def _on_tick(self) -> None:
        """After each round of the Raft thread, which alone changes the log: note the term
        in which this node leads with everything applied (one consistent look, where the
        request thread could see a new term's leader beside the last term's no-op)."""
        obj = self._obj
        if obj is not None:
            self._serving_term = (obj.raftCurrentTerm if obj._isLeader() and raft_caught_up(obj)
                                  else None)

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
    once etcd has let the lease expire. It reads the state in the transaction that wins the
    key, and serves only once its copy is at least that new."""

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
        #: The state's revision as read when this node won the leader key: it serves no
        #: request from an older copy.
        self._leader_revision = 0
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
            if self._lease is not None and self._holds_lease():
                with contextlib.suppress(Exception):
                    await self._lease.revoke()  # hand over at once, not after the TTL
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None
        self._leading_until = 0.0

    def _holds_lease(self) -> bool:
        return time.monotonic() < self._leading_until

    def is_leader(self) -> bool:
        return self._holds_lease() and self._revision >= self._leader_revision

    def leader(self) -> str | None:
        return self.self_addr if self._holds_lease() else self._leader

    def _adopt(self, value: bytes, revision: int) -> None:
        """Take the state as of ``revision``, unless this copy is newer already (reads may
        complete out of order)."""
        if revision > self._revision:
            self.state = ControllerState.from_json(orjson.loads(value))
            self._revision = revision

    async def _refresh(self) -> None:
        got = await self._client.get(self.state_key)
        if got is not None:
            self._adopt(got.value, got.mod_revision)

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
                if self._holds_lease():
                    await self._lease.refresh()
                    self._leading_until = began + self.ttl * 2 / 3
                else:
                    self._lease = await self._client.lease(self.ttl)
                    won, responses = await self._client.transaction(
                        compare=[tx.create(self.leader_key) == 0],
                        success=[tx.put(self.leader_key, self.self_addr.encode(),
                                        lease=self._lease), tx.get(self.state_key)],
                        failure=[])
                    if won:
                        kvs = responses[1] if len(responses) > 1 else []
                        self._leader_revision = kvs[0][1].mod_revision if kvs else 0
                        if kvs:
                            self._adopt(kvs[0][0], self._leader_revision)
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
                        await self._refresh()
                        return result
        except TimeoutError:
            raise EngineError(f"not committed within {timeout} s") from None
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"etcd: {exc}") from exc
