"""Replication: master and slave brokers on RocketMQ's own HA stream (``protocol``), the
master's side (``master.HAServer``) and the slave's (``slave.HAClient``). Uses ``store`` and
``protocol`` below it; the broker starts the side its ``brokerRole`` asks for."""

from .master import HAServer
from .protocol import HAProtocolError
from .slave import HAClient

__all__ = ["HAClient", "HAProtocolError", "HAServer"]
