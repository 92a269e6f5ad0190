"""The controller's settings: RocketMQ's ControllerConfig keys, and the master's lease and
the probe of a master gone that rocketq adds. Each key is a field, named as RocketMQ names it,
so a controller's properties file maps onto it key by key."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ControllerConfig:
    """The controller's settings (RocketMQ's ControllerConfig keys, and the lease)."""

    #: How often the leader looks for masters that are gone (ms).
    scanNotActiveBrokerInterval: int = 200
    #: Elect from every live member, not only the SyncStateSet (may lose acknowledged data).
    enableElectUncleanMaster: bool = False
    #: Push NOTIFY_BROKER_ROLE_CHANGED to a group's brokers after an election.
    notifyBrokerRoleChanged: bool = True
    #: How long a master's lease lasts from each renewal (ms); a new master is elected only
    #: once it has run out.
    masterLeaseMillis: int = 3000
    #: A broker silent for longer than this is not alive (when its heartbeat does not say).
    brokerHeartbeatTimeoutMillis: int = 3000
    #: Elect at once, within the old master's lease, when that master's process is gone:
    #: its heartbeat connection closed and its broker and HA ports refuse connections (a
    #: process killed, even by SIGKILL, leaves exactly that; a partition that drops packets
    #: closes nothing and refuses nothing, so it waits for the lease as before). Off: every
    #: election waits for the heartbeat timeout and the lease.
    electWhenMasterGone: bool = True
    #: How long a probe of a master's port may take (ms); no answer in time is not "gone".
    masterGoneProbeTimeoutMillis: int = 500
