"""Controller mode (RocketMQ 5's RIP-44): automatic failover for master/slave broker groups.

A controller keeps, per broker group, the master, ``masterEpoch``, the SyncStateSet and the
master's lease in a replicated state machine (``state``), run by an existing consensus engine
(``engine``: embedded Raft from pysyncobj, or etcd). ``server`` serves RocketMQ's controller
requests; ``elections``, a part of it, tracks broker heartbeats and elects a new master when
one is gone; ``config`` holds the settings.
"""

from .config import ControllerConfig
from .engine import Engine, EngineError, EtcdEngine, RaftEngine
from .server import Controller
from .state import ControllerState, Group, Live, choose_master

__all__ = ["Controller", "ControllerConfig", "ControllerState", "Engine", "EngineError",
           "EtcdEngine", "Group", "Live", "RaftEngine", "choose_master"]
