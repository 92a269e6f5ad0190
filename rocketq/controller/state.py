"""The controller's replicated state (RocketMQ 5's ReplicasInfoManager), sans-IO.

Per broker group: its members (controller-assigned ids and addresses), the master's id,
``masterEpoch``, the SyncStateSet and its epoch, and the master's lease. Every change is an
event, applied in the same order on every controller node by the consensus engine. ``apply``
is deterministic: the node that proposes an event stamps it with the time, so every node holds
the same state after the same events.

The lease is what keeps two masters from taking writes at once. The master renews it with
each heartbeat; a new master is elected only once it has run out (on the proposer's clock),
and a master that cannot renew stops taking writes before it runs out (on its own clock,
counted from before it asked). Raft leadership of the controller is not a lease: a partitioned
Raft leader may act for long after its followers elected another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol import ResponseCode


@dataclass
class Group:
    """One broker group (a ``brokerName``) as the controller knows it."""

    cluster: str
    name: str
    #: Controller-assigned broker id (1, 2, ...) -> the broker's address.
    brokers: dict[int, str] = field(default_factory=dict)
    #: Broker id -> where it serves slaves (its HA port).
    ha_addrs: dict[int, str] = field(default_factory=dict)
    next_id: int = 1
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0
    #: When the master's lease runs out, in ms since the epoch on the proposer's clock.
    lease_until_ms: int = 0

    @property
    def master_addr(self) -> str:
        return self.brokers.get(self.master_id, "") if self.master_id is not None else ""

    def info(self) -> dict[str, Any]:
        """The fields a broker is told about its group."""
        return {"masterBrokerId": self.master_id if self.master_id is not None else -1,
                "masterAddress": self.master_addr, "masterEpoch": self.master_epoch,
                "masterHaAddress": (self.ha_addrs.get(self.master_id, "")
                                    if self.master_id is not None else ""),
                "syncStateSetEpoch": self.sync_state_set_epoch,
                "syncStateSet": sorted(self.sync_state_set),
                "brokerAddrs": {str(k): v for k, v in sorted(self.brokers.items())},
                "leaseUntil": self.lease_until_ms}


@dataclass(frozen=True, slots=True)
class Live:
    """What a broker's last heartbeat said (kept by each controller node, not replicated)."""

    addr: str
    epoch: int
    max_offset: int
    confirm_offset: int
    priority: int
    seen_ms: int
    timeout_ms: int

    def alive(self, now_ms: int) -> bool:
        return now_ms - self.seen_ms <= self.timeout_ms


def choose_master(group: Group, live: Mapping[int, Live], unclean: bool = False
                  ) -> int | None:
    """RocketMQ's DefaultElectPolicy: from the live members of the SyncStateSet (of every
    member only if ``unclean``), the highest epoch, then the highest offset, then the lowest
    priority value; None when nobody can take over without losing acknowledged data."""
    pools: list[Iterable[int]] = [group.sync_state_set]
    if unclean:
        pools.append(group.brokers)
    for pool in pools:
        candidates = [i for i in pool if i in live and i in group.brokers]
        if candidates:
            return min(candidates, key=lambda i: (-live[i].epoch, -live[i].max_offset,
                                                  live[i].priority, i))
    return None


def _error(code: ResponseCode, remark: str) -> dict[str, Any]:
    return {"error": int(code), "remark": remark}


class ControllerState:
    """Every broker group the controller knows; changed only through ``apply``."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}

    def to_json(self) -> dict[str, Any]:
        """The whole state as JSON-able data (for engines that store a value, as etcd)."""
        return {name: {"cluster": g.cluster, "brokers": {str(k): v for k, v in g.brokers.items()},
                       "haAddrs": {str(k): v for k, v in g.ha_addrs.items()},
                       "nextId": g.next_id, "masterId": g.master_id,
                       "masterEpoch": g.master_epoch, "syncStateSet": sorted(g.sync_state_set),
                       "syncStateSetEpoch": g.sync_state_set_epoch,
                       "leaseUntil": g.lease_until_ms}
                for name, g in self.groups.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControllerState:
        state = cls()
        for name, g in data.items():
            state.groups[name] = Group(
                g["cluster"], name, {int(k): v for k, v in g["brokers"].items()},
                {int(k): v for k, v in g.get("haAddrs", {}).items()}, g["nextId"],
                g["masterId"], g["masterEpoch"], set(g["syncStateSet"]),
                g["syncStateSetEpoch"], g["leaseUntil"])
        return state

    def apply(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one event and return its result: the group's info, or ``{"error": code,
        "remark": why}``. Never raises for a well-formed event: it runs on every node."""
        op = event.get("op")
        handler = getattr(self, f"_apply_{op}", None)
        if handler is None:
            return _error(ResponseCode.CONTROLLER_INVALID_REQUEST, f"unknown event {op!r}")
        return handler(event)

    def _apply_register(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """A broker joins its group: it keeps the id it asks for (its persisted one), or gets
        the next free one; a known address keeps its id."""
        group = self.groups.get(e["group"])
        if group is None:
            group = self.groups[e["group"]] = Group(e["cluster"], e["group"])
        broker_id = int(e.get("broker_id") or 0)
        if broker_id <= 0:
            known = [i for i, a in group.brokers.items() if a == e["addr"]]
            broker_id = known[0] if known else group.next_id
        group.brokers[broker_id] = e["addr"]
        if e.get("ha_addr"):
            group.ha_addrs[broker_id] = e["ha_addr"]
        group.next_id = max(group.next_id, broker_id + 1)
        return {**group.info(), "brokerId": broker_id}

    def _apply_elect(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """A new master (or none: ``master_id`` None), proposed once the old one's lease ran
        out, or before, when the proposer found the old master's process gone
        (``gone_master``, ``gone_epoch``: the master and epoch it found gone; a stale finding
        changes nothing). The epochs go up; the SyncStateSet becomes the new master alone."""
        group = self.groups.get(e["group"])
        if group is None:
            return _error(ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                          f"broker group {e['group']} is not registered")
        gone = (e.get("gone_master") is not None and e.get("gone_master") == group.master_id
                and e.get("gone_epoch") == group.master_epoch)
        if group.master_id is not None and e["now_ms"] < group.lease_until_ms and not gone:
            return _error(ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                          f"master {group.master_id} holds its lease")
        master = e.get("master_id")
        if master is not None and master not in group.brokers:
            return _error(ResponseCode.CONTROLLER_INVALID_MASTER, f"no broker {master}")
        group.master_id = master
        # A controller that lost its state (one node, no data dir) hears of the epochs its
        # brokers held: it goes on above them, or they would ignore it as stale.
        group.master_epoch = max(group.master_epoch, int(e.get("min_epoch", 0))) + 1
        if master is not None:
            group.sync_state_set = {master}
            group.sync_state_set_epoch += 1
            group.lease_until_ms = e["now_ms"] + e["lease_ms"]
        return group.info()

    def _apply_renew(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """The master extends its lease; anyone else, or an old epoch, is fenced."""
        group = self.groups.get(e["group"])
        if group is None or group.master_id != e["broker_id"]:
            return _error(ResponseCode.CONTROLLER_INVALID_MASTER,
                          f"broker {e['broker_id']} is not the master")
        if e["master_epoch"] != group.master_epoch:
            return _error(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                          f"epoch {e['master_epoch']} is not {group.master_epoch}")
        group.lease_until_ms = max(group.lease_until_ms, e["now_ms"] + e["lease_ms"])
        return group.info()

    def _apply_alter_sync_state_set(self, e: Mapping[str, Any]) -> dict[str, Any]:
        """The master changes who counts as in sync (RocketMQ's checks, in its order)."""
        group = self.groups.get(e["group"])
        if group is None:
            return _error(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                          f"broker group {e['group']} is not registered")
        members = set(e["members"])
        if members == group.sync_state_set:
            return _error(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                          "the SyncStateSet is unchanged")
        if e["master_id"] != group.master_id:
            return _error(ResponseCode.CONTROLLER_INVALID_MASTER,
                          f"broker {e['master_id']} is not the master")
        if e["master_epoch"] != group.master_epoch:
            return _error(ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                          f"epoch {e['master_epoch']} is not {group.master_epoch}")
        if e["sync_state_set_epoch"] != group.sync_state_set_epoch:
            return _error(ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                          f"SyncStateSet epoch {e['sync_state_set_epoch']} is not "
                          f"{group.sync_state_set_epoch}")
        if not members <= set(group.brokers):
            return _error(ResponseCode.CONTROLLER_INVALID_REPLICAS,
                          f"unknown brokers {sorted(members - set(group.brokers))}")
        if group.master_id not in members:
            return _error(ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                          "the SyncStateSet must hold the master")
        group.sync_state_set = members
        group.sync_state_set_epoch += 1
        return group.info()
