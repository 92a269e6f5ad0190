"""Controller mode on the broker's side (RocketMQ 5's ReplicasManager): join the group at the
controller, heartbeat it, hold the master's lease, and take the role the controller gives.

A broker in controller mode starts fenced (it takes no writes) and registers with the
controller, keeping the id it was given in ``brokerIdentity``. The group's first broker to ask
becomes master; the others follow it. Every heartbeat (``brokerHeartbeatInterval``) renews a
master's lease; a master whose lease runs out on its own clock, counted from before it asked,
stops taking writes before the controller may elect another. Role changes arrive pushed
(NOTIFY_BROKER_ROLE_CHANGED) or polled (GET_REPLICA_INFO), and are applied only for a higher
``masterEpoch``. A demoted master cuts its CommitLog back to the last offset it agrees on
with the new master (compared through their epoch files, ``epochs.py``) before it follows.

Its requests (to the controllers, and the epoch look-up at a new master) are signed with the
broker's own credentials and use TLS exactly as its NameServer requests do: a controller
with an ACL serves only signed brokers, and one with TLS only TLS ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...remoting import RemotingClient, RemotingError
from ..config import BrokerConfig
from ..files import write_atomically
from .epochs import EpochFile

log = logging.getLogger("rocketq.broker")


@dataclass
class Role:
    """What the controller said of this broker's group."""

    master_id: int
    master_addr: str
    master_ha_addr: str
    master_epoch: int
    sync_state_set: set[int]
    sync_state_set_epoch: int


class ReplicasManager:
    """Keeps one broker in step with the controller; see the module docstring.

    ``become_master(role)`` and ``become_slave(role)`` are the broker's role switches;
    ``max_offset()`` and ``confirm_offset()`` what a heartbeat reports; ``in_sync()`` the
    slaves that kept up, for the SyncStateSet a master reports. ``signed_like``: the
    broker's NameServer client, whose signer (ACL credentials) and TLS context this one's
    requests use too."""

    def __init__(self, config: BrokerConfig, store_root: str, address: Callable[[], str],
                 ha_address: Callable[[], str],
                 become_master: Callable[[Role], Awaitable[None]],
                 become_slave: Callable[[Role], Awaitable[None]],
                 use_sync_state_set: Callable[[set[int]], None],
                 max_offset: Callable[[], int], in_sync: Callable[[], set[int]],
                 signed_like: RemotingClient | None = None) -> None:
        self.config = config
        self.address = address
        self.ha_address = ha_address
        self._become_master = become_master
        self._become_slave = become_slave
        self._use_sync_state_set = use_sync_state_set
        self.max_offset = max_offset
        self.in_sync = in_sync
        self._signer = signed_like.signer if signed_like is not None else None
        self._ssl = signed_like.ssl if signed_like is not None else None
        self.client = self._new_client()
        self.identity_path = os.path.join(store_root, "brokerIdentity")
        self.epochs = EpochFile(os.path.join(store_root, "epochFileCheckpoint"))
        self.broker_id = self._load_identity()
        self.role: Role | None = None
        #: The newest master epoch any controller answer named (may be above ``role``'s
        #: while that role is still being taken).
        self.newest_epoch = -1
        self.is_master = False
        #: Until when (monotonic) a master may take writes: its lease, on its own clock.
        self.lease_deadline = 0.0
        #: Called when this master gains its lease (it was not writable before).
        self.lease_gained: Callable[[], None] | None = None
        self._leader: str | None = None
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle
    @property
    def controllers(self) -> list[str]:
        return [a.strip() for a in self.config.controllerAddr.split(";") if a.strip()]

    def _load_identity(self) -> int:
        try:
            with open(self.identity_path) as fh:
                for line in fh:
                    key, _, value = line.strip().partition("=")
                    if key == "brokerId":
                        return int(value)
        except (OSError, ValueError):
            pass
        return -1

    async def start(self, wait: float = 10.0) -> None:
        """Register and take a role (waiting up to ``wait`` s for one; fenced meanwhile),
        then keep heartbeating and polling in the background."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while loop.time() < deadline:
            with contextlib.suppress(RemotingError, OSError, ValueError):
                if await self._join():
                    break
            await asyncio.sleep(0.2)
        self._tasks += [loop.create_task(self._heartbeats()), loop.create_task(self._poll()),
                        loop.create_task(self._report_sync_state_set())]

    async def stop(self) -> None:
        from ...remoting import cancel_tasks

        await cancel_tasks(self._tasks)
        self._tasks = []
        await self.client.close()
        self.client = self._new_client()  # start() may be called again

    def _new_client(self) -> RemotingClient:
        """The client of the controllers (and of a new master's epochs): signed and with
        TLS as the broker's NameServer client is."""
        return RemotingClient(self.notified, signer=self._signer, ssl=self._ssl)

    def lease_valid(self) -> bool:
        """Whether this master may take a write now."""
        return self.is_master and time.monotonic() < self.lease_deadline

    # ------------------------------------------------------------------ talking to the controller
    async def _invoke(self, code: int, fields: dict[str, Any], body: bytes = b"",
                      timeout: float = 2.0) -> RemotingCommand:
        """A request to the controller leader: the last one known, else each in turn."""
        tried: list[str] = []
        order = ([self._leader] if self._leader else []) + self.controllers
        last: RemotingCommand | None = None
        for addr in order:
            if addr in tried:
                continue
            tried.append(addr)
            try:
                r = await self.client.invoke(
                    addr, RemotingCommand.request(code, fields, body=body), timeout)
            except (RemotingError, OSError):
                continue
            if r.code == ResponseCode.CONTROLLER_NOT_LEADER:
                leader = r.ext_fields.get("controllerLeaderAddress")
                if leader and leader not in tried:
                    order.append(leader)
                last = r
                continue
            self._leader = addr
            return r
        if last is not None:
            return last
        raise RemotingError("no controller answered")

    def _identity_fields(self) -> dict[str, Any]:
        return {"clusterName": self.config.brokerClusterName,
                "brokerName": self.config.brokerName}

    async def _join(self) -> bool:
        """Register; become what the answer says, or ask to be master of a group without
        one. True once this broker has a role."""
        r = await self._invoke(RequestCode.CONTROLLER_REGISTER_BROKER, {
            **self._identity_fields(), "brokerId": self.broker_id,
            "brokerAddress": self.address(), "haServerAddr": self.ha_address()})
        if r.code != ResponseCode.SUCCESS:
            log.warning("controller refused registration: %s", r.remark)
            return False
        broker_id = int(r.ext_fields["brokerId"])
        if broker_id != self.broker_id:
            self.broker_id = broker_id
            write_atomically(self.identity_path, (
                f"brokerName={self.config.brokerName}\nbrokerClusterName="
                f"{self.config.brokerClusterName}\nbrokerId={broker_id}\n").encode())
        if int(r.ext_fields.get("masterBrokerId", -1)) < 0:
            await self._heartbeat_once()
            r = await self._invoke(RequestCode.CONTROLLER_ELECT_MASTER, {
                **self._identity_fields(), "brokerId": self.broker_id,
                "epoch": self.role.master_epoch if self.role else self.epochs.last_epoch})
            if r.code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
                log.warning("no master for %s yet: %s", self.config.brokerName, r.remark)
                return False
        await self.apply(_role(r))
        return self.role is not None

    def _heartbeat_fields(self) -> dict[str, Any]:
        return {**self._identity_fields(), "brokerAddr": self.address(),
                "brokerId": self.broker_id,
                "epoch": self.role.master_epoch if self.role else -1,
                "maxOffset": self.max_offset(), "confirmOffset": self.max_offset(),
                "heartbeatTimeoutMills": self.config.controllerHeartBeatTimeoutMills,
                "electionPriority": self.config.brokerElectionPriority}

    async def _heartbeat_once(self) -> None:
        fields = self._heartbeat_fields()
        sent = time.monotonic()

        async def one(addr: str) -> None:
            # A command of its own for each controller: a request carries its own opaque.
            cmd = RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, fields)
            with contextlib.suppress(RemotingError, OSError):
                r = await self.client.invoke(addr, cmd, 1.0)
                self._renewed(r, sent)
        await asyncio.gather(*(one(a) for a in self.controllers))

    def _renewed(self, r: RemotingCommand, sent: float) -> None:
        """A heartbeat's answer: a lease for this master, counted from ``sent``."""
        lease = r.ext_fields.get("leaseMillis")
        if not (r.code == ResponseCode.SUCCESS and lease and self.is_master and self.role
                and r.ext_fields.get("masterEpoch") == str(self.role.master_epoch)):
            return
        had = self.lease_valid()
        self.lease_deadline = max(self.lease_deadline, sent + int(lease) / 1000)
        if not had and self.lease_valid() and self.lease_gained is not None:
            self.lease_gained()

    async def _renew_now(self) -> None:
        """One heartbeat to the controller leader: a new master's first lease."""
        sent = time.monotonic()
        with contextlib.suppress(RemotingError, OSError, ValueError):
            r = await self._invoke(RequestCode.BROKER_HEARTBEAT, self._heartbeat_fields(),
                                   timeout=1.0)
            self._renewed(r, sent)

    async def _heartbeats(self) -> None:
        while True:
            if self.broker_id > 0:
                try:
                    await self._heartbeat_once()
                except Exception:  # never let one bad round end the heartbeats
                    log.exception("heartbeat to the controller failed")
            await asyncio.sleep(self.config.brokerHeartbeatInterval / 1000)

    async def _poll(self) -> None:
        """GET_REPLICA_INFO every ``syncBrokerMetadataPeriod``: catches a notice lost."""
        while True:
            await asyncio.sleep(self.config.syncBrokerMetadataPeriod / 1000)
            try:
                if self.role is None:
                    await self._join()
                    continue
                await self._ask_and_apply()
            except (RemotingError, OSError, ValueError, KeyError) as exc:
                log.info("controller poll failed: %s", exc)
            except Exception:  # never let one bad round end the polling
                log.exception("applying the controller's answer failed")

    async def _ask_and_apply(self) -> None:
        """GET_REPLICA_INFO from the controller leader, and take the role it says."""
        r = await self._invoke(RequestCode.CONTROLLER_GET_REPLICA_INFO, self._identity_fields())
        if r.code == ResponseCode.SUCCESS and int(r.ext_fields.get("masterBrokerId", -1)) < 0:
            await self._join()  # a group without a master: ask for an election
        elif r.code == ResponseCode.SUCCESS:
            role = _role(r)
            if role is not None:
                self.newest_epoch = max(self.newest_epoch, role.master_epoch)
            await self.apply(role)
        elif r.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            await self._join()

    async def _refresh(self) -> None:
        """A notice said the role changed: ask the controller what it is now."""
        try:
            await self._ask_and_apply()
        except (RemotingError, OSError, ValueError, KeyError) as exc:
            log.info("controller asked after a notice, and failed: %s", exc)
        except Exception:
            log.exception("applying the controller's answer failed")

    async def _report_sync_state_set(self) -> None:
        """A master: tell the controller who keeps up (RocketMQ's checkSyncStateSet)."""
        while True:
            await asyncio.sleep(self.config.checkSyncStateSetPeriod / 1000)
            role = self.role
            if not self.is_master or role is None:
                continue
            members = {self.broker_id} | self.in_sync()
            if members == role.sync_state_set:
                continue
            # Sends wait for the new members from now on, before the controller counts
            # them (RocketMQ's markSynchronizingSyncStateSet): a member it may elect from
            # the moment it commits must hold every message answered from then on.
            self._use_sync_state_set(role.sync_state_set | members)
            r = None
            with contextlib.suppress(RemotingError, OSError, ValueError, KeyError):
                r = await self._invoke(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
                    "brokerName": self.config.brokerName, "masterBrokerId": self.broker_id,
                    "masterEpoch": role.master_epoch}, orjson.dumps({
                        "syncStateSet": sorted(members),
                        "syncStateSetEpoch": role.sync_state_set_epoch}))
                if r.code == ResponseCode.SUCCESS:
                    await self.apply(_role(r), sync_state_set_only=True)
            if (r is None or r.code != ResponseCode.SUCCESS) and self.is_master and self.role:
                self._use_sync_state_set(self.role.sync_state_set)

    def notified(self, conn: Any, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED from a controller: a hint only. The role is asked of
        the controllers this broker is configured with, never taken from the notice: any
        client that reaches the broker port could send one (with a made-up epoch and
        master whose epoch file would have this broker cut its whole CommitLog)."""
        if cmd.code == RequestCode.NOTIFY_BROKER_ROLE_CHANGED:
            task = asyncio.get_running_loop().create_task(self._refresh())
            self._tasks.append(task)
            task.add_done_callback(lambda t: t in self._tasks and self._tasks.remove(t))
        return None

    # ------------------------------------------------------------------ roles
    async def apply(self, role: Role | None, sync_state_set_only: bool = False) -> None:
        """Take the role the controller says, if it is newer than the one held."""
        if role is None:
            return
        async with self._lock:
            held = self.role
            if held is not None and role.master_epoch < held.master_epoch:
                return
            if held is not None and role.master_epoch == held.master_epoch:
                if role.sync_state_set_epoch > held.sync_state_set_epoch:
                    held.sync_state_set = role.sync_state_set
                    held.sync_state_set_epoch = role.sync_state_set_epoch
                    if self.is_master:
                        self._use_sync_state_set(held.sync_state_set)
                moved = ((role.master_addr and role.master_addr != held.master_addr)
                         or (role.master_ha_addr and role.master_ha_addr != held.master_ha_addr))
                if moved and not self.is_master and not sync_state_set_only:
                    # The master restarted within its epoch on other ports: follow it there.
                    was = held.master_addr, held.master_ha_addr
                    held.master_addr = role.master_addr or held.master_addr
                    held.master_ha_addr = role.master_ha_addr or held.master_ha_addr
                    if not await self._follow(held):
                        held.master_addr, held.master_ha_addr = was  # moved again next poll
                return
            if sync_state_set_only or role.master_id < 0:
                return
            self.role = role
            if role.master_id == self.broker_id:
                log.info("broker %s-%d is master, epoch %d", self.config.brokerName,
                         self.broker_id, role.master_epoch)
                self.is_master = True
                # No writes until the controller renews the lease for this process: the one
                # that held the epoch before a restart may have let it run out.
                self.lease_deadline = 0.0
                self.epochs.append(role.master_epoch, self.max_offset())
                await self._renew_now()
                await self._become_master(role)
            else:
                log.info("broker %s-%d follows master %d at %s, epoch %d",
                         self.config.brokerName, self.broker_id, role.master_id,
                         role.master_addr, role.master_epoch)
                self.is_master = False
                self.lease_deadline = 0.0
                if not await self._follow(role):
                    self.role = held  # the role is taken again at the next poll

    async def _follow(self, role: Role) -> bool:
        """Follow ``role``'s master; False when that failed (its epochs could not be read,
        a newer role came meanwhile, the store refused a cut): nothing was followed
        unchecked, and the broker stays a fenced slave until the next poll tries again."""
        try:
            await self._become_slave(role)
        except RemotingError as exc:
            log.warning("%s; trying again at the next poll", exc)
            return False
        except Exception:  # never stop following for good over one failed try
            log.exception("following master %s failed; trying again at the next poll",
                          role.master_addr)
            return False
        return True

    async def master_epochs(self, role: Role, patience: float = 10.0
                            ) -> tuple[list[tuple[int, int]], int]:
        """``role``'s master's epoch file and end (GET_BROKER_EPOCH_CACHE), once the file
        holds ``role.master_epoch``: a slave told of an election may ask before the new
        master has taken its epoch, and an answer without it would leave the epoch out of
        this broker's file for good (and out of the file of every broker that later
        follows this one), blurring where the epochs' logs part. Asks again for up to
        ``patience`` seconds; RemotingError when the master never shows the epoch."""
        deadline = time.monotonic() + patience
        while True:
            r = await self.client.invoke(role.master_addr, RemotingCommand.request(
                RequestCode.GET_BROKER_EPOCH_CACHE), 3)
            if r.code != ResponseCode.SUCCESS:
                raise RemotingError(f"the master answered {r.code}: {r.remark}")
            body = orjson.loads(r.body)
            entries = [(int(e["epoch"]), int(e["startOffset"])) for e in body["epochList"]]
            if entries and entries[-1][0] >= role.master_epoch:
                return entries, int(body["maxOffset"])
            if self.newest_epoch > role.master_epoch:  # held the role lock; let it go
                raise RemotingError(f"epoch {self.newest_epoch} came while waiting for "
                                    f"master {role.master_addr} to take {role.master_epoch}")
            if time.monotonic() >= deadline:
                raise RemotingError(f"the master has not taken epoch {role.master_epoch} "
                                    f"(its last is {entries[-1][0] if entries else None})")
            await asyncio.sleep(0.1)


def _role(cmd: RemotingCommand) -> Role | None:
    """The role fields of a controller answer or notice."""
    ext = cmd.ext_fields
    body = orjson.loads(cmd.body) if cmd.body else {}
    master = int(ext.get("masterBrokerId", -1))
    addrs = body.get("brokerAddrs") or {}
    return Role(master, ext.get("masterAddress") or addrs.get(str(master), ""),
                ext.get("masterHaAddress") or "", int(ext.get("masterEpoch", 0)),
                {int(i) for i in body.get("syncStateSet", [])},
                int(ext.get("syncStateSetEpoch", body.get("syncStateSetEpoch", 0))))
