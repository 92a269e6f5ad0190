"""The brokers the dashboard expects, and what they produced today, across a broker's death.

The NameServer lists only the brokers registered now: a SIGKILLed replica drops out of its
list at once (its connection closes), so a page built from that list alone says "2 of 2
answering" where one of three is gone, and "Produced today" falls to the new master's own
count after a failover, since the old master's count left with it. The dashboard therefore
remembers what it saw:

- every broker it has seen listed, by address (a broker's id changes when the controller
  promotes it; its address does not). One the NameServer no longer lists is shown as not
  registered, since when and as what, and counted among the brokers expected, until it has
  been gone for :data:`FORGET_AFTER`;
- the day's counts of every broker process it has seen answer (an address and its
  ``bootTimestamp``, so a restarted broker is a new process), at their last figures. Each
  message is counted once, by the master that stored it (a slave counts none of what it
  replicates), so their sum is what the cluster produced today, whichever masters were
  killed meanwhile. Counts last seen before the dashboard's local midnight are dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..client.admin.cluster import BrokerStatus

#: Seconds after which a broker the NameServer no longer lists is forgotten.
FORGET_AFTER = 86400.0


@dataclass
class _Listed:
    status: BrokerStatus
    #: When the NameServer last listed it (seconds since the epoch).
    at: float


@dataclass
class _Counts:
    put: int
    get: int
    #: When these figures were read.
    at: float


def _local_midnight(now: float) -> float:
    day = time.localtime(now)
    return time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))


class BrokerBook:
    """What the dashboard has seen of the brokers: fed every broker list the NameServer
    gives (:meth:`update`), it adds the brokers gone from that list and keeps the day's
    counts of each broker process."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._listed: dict[str, _Listed] = {}
        self._counts: dict[tuple[str, str], _Counts] = {}

    def update(self, brokers: list[BrokerStatus]) -> list[BrokerStatus]:
        """``brokers`` (as listed now), followed by every broker seen before that is not
        listed any more, each with ``error`` saying so."""
        now = self.clock()
        listed = {b.address for b in brokers}
        for b in brokers:
            self._listed[b.address] = _Listed(b, now)
            if not b.error and b.runtime:
                self._counts[(b.address, b.runtime.get("bootTimestamp", ""))] = _Counts(
                    b.put_today, b.get_today, now)
        midnight = _local_midnight(now)
        self._counts = {k: c for k, c in self._counts.items() if c.at >= midnight}
        gone = []
        for address, seen in list(self._listed.items()):
            if address in listed:
                continue
            if now - seen.at > FORGET_AFTER:
                del self._listed[address]
                continue
            was = seen.status
            when = time.strftime("%H:%M:%S UTC", time.gmtime(seen.at))
            gone.append(BrokerStatus(
                was.cluster, was.broker_name, was.broker_id, address, was.role,
                version=was.version, epoch=was.epoch,
                error=f"not registered with the NameServer any more (last listed at "
                      f"{when}, as {was.broker_name} id {was.broker_id}, {was.role})"))
        return brokers + sorted(gone, key=lambda b: (b.cluster, b.broker_name, b.address))

    def today(self) -> tuple[int, int]:
        """``(produced, consumed)`` today over every broker process seen answering today,
        each at its last figures (see the module's note)."""
        return (sum(c.put for c in self._counts.values()),
                sum(c.get for c in self._counts.values()))
