"""Registration with the NameServers (RocketMQ's BrokerOuterAPI.registerBrokerAll and
unregisterBrokerAll).

The broker registers its topic table with every NameServer at start, every
``registerNameServerPeriod`` after that, and at once when its topics change; it unregisters
when it stops. A NameServer that refuses or cannot be reached is logged and tried again at the
next round: the others are not held up. While no NameServer has acknowledged the last round
(the broker started before them, or they all restarted), the broker registers again after
0.5 s, doubling to 2 s, so that it is in the routes within 2 s of one answering
(RocketMQ waits the whole period); once one has, every period again.

A slave (not in controller mode) whose NameServers answer with no master (it started first,
or its master is gone), or whose HA link is down, registers again after 1 s, then a little
later each round up to 5 s, until an answer names a master and it follows it; its HA client
connects at once to a master newly named. RocketMQ's slave waits for the
next period, and a SYNC_MASTER refuses sends as SLAVE_NOT_AVAILABLE meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...remoting import RemotingClient, RemotingError
from ..config import BrokerConfig
from ..topics import TopicTable

if TYPE_CHECKING:
    from ...ha.slave import HAClient

log = logging.getLogger("rocketq.broker")


#: Seconds before a slave seeking its master registers again, at first and at most (x1.5 a
#: round), and how often a slave looks whether it still follows its master.
_SEEK_FIRST = 1.0
_SEEK_MOST = 5.0
_TICK = 0.5
#: Seconds before registering again while no NameServer acknowledged the last round, at
#: first and at most (doubling each round).
_UNACKED_FIRST = 0.5
_UNACKED_MOST = 2.0


class DuplicateBrokerError(ValueError):
    """A NameServer refused this broker's registration: another broker, alive at another
    address, is registered under the same brokerName and brokerId."""


class Registration:
    """Keeps the broker registered with the NameServers named in its config."""

    def __init__(self, config: BrokerConfig, topics: TopicTable,
                 client: RemotingClient) -> None:
        self.config = config
        self.topics = topics
        self.client = client
        #: Set when the topics changed; None until the broker has started.
        self._soon: asyncio.Event | None = None
        #: This broker's HA port (a master's), sent as ``haServerAddr``.
        self.ha_server_addr = ""
        #: What the NameServers answer a slave: its master's address and HA port.
        self.master_addr = ""
        self.master_ha_addr = ""
        #: Controller mode: no registration until the controller said which role (and so
        #: which brokerId) this broker has; registering as id 0 before would displace the
        #: group's master in the routes.
        self.paused = False
        #: Controller mode: whether this broker may say it is its group's master now (it
        #: holds its lease). A master paused past its lease must not displace the one
        #: elected meanwhile when it wakes.
        self.may_register_as_master: Callable[[], bool] | None = None
        #: NameServer -> why it refused the last registration because another live broker
        #: holds this broker's name and id (empty when none did).
        self.conflicts: dict[str, str] = {}
        #: A slave: whether the last answers named no master (a NameServer answered, none
        #: named one); and the seconds before it registers again while it seeks one.
        self.masterless = False
        self._retry = _SEEK_FIRST
        #: A slave: its HA client now, if any; told to connect when a master is named.
        self.ha_client: Callable[[], HAClient | None] = lambda: None
        self._restarting = False
        #: Whether a NameServer acknowledged the last round (none has before the first);
        #: until one does, rounds come every ``_unacked_retry`` seconds, not every period.
        self.acknowledged = False
        self._unacked_retry = _UNACKED_FIRST
        #: NameServer -> why the last round with it failed, logged once until it changes.
        self._failures: dict[str, str] = {}

    def start(self) -> None:
        """From now on a change of the topics registers at once (see ``soon``)."""
        self._soon = asyncio.Event()

    def soon(self) -> None:
        """Re-register with the NameServers at once (a topic was created or changed)."""
        if self._soon is not None:
            self._soon.set()

    async def run(self) -> None:
        """Register every ``registerNameServerPeriod``, or sooner when asked or while this
        slave seeks its master, until cancelled."""
        assert self._soon is not None, "start() first"
        last = time.monotonic()
        while True:
            seeking = self._seeking()
            if not seeking:
                self._retry = _SEEK_FIRST
            # Read on each round: UPDATE_BROKER_CONFIG may change the period.
            period = self.config.registerNameServerPeriod / 1000
            wait = min(period, self._retry) if seeking else period
            if not self.acknowledged:
                wait = min(wait, self._unacked_retry)
            left = last + wait - time.monotonic()
            if left > 0 and not self._soon.is_set():
                with contextlib.suppress(TimeoutError):
                    # A slave looks again soon: its link to its master may drop meanwhile.
                    async with asyncio.timeout(min(left, _TICK) if self._follows() else left):
                        await self._soon.wait()
                continue
            self._soon.clear()
            last = time.monotonic()
            await self.register_all()
            if seeking:
                self._retry = min(self._retry * 1.5, _SEEK_MOST)
            self._unacked_retry = (_UNACKED_FIRST if self.acknowledged
                                   else min(self._unacked_retry * 2, _UNACKED_MOST))

    def _follows(self) -> bool:
        """A slave not in controller mode (there the controller names its master)."""
        return self.config.brokerId != 0 and not self.config.enableControllerMode

    def _seeking(self) -> bool:
        """A slave that knows no master (the last answers named none) or follows none now (its
        master is gone, or moved): it registers every few seconds until it does."""
        if not self._follows():
            return False
        client = self.ha_client()
        return self.masterless or (client is not None and client.connected_to is None)

    def header(self) -> dict[str, Any]:
        """The fields that name this broker in REGISTER_BROKER and UNREGISTER_BROKER."""
        cfg = self.config
        return {"brokerName": cfg.brokerName, "brokerAddr": cfg.broker_addr,
                "clusterName": cfg.brokerClusterName, "brokerId": cfg.brokerId}

    async def register_at_start(self) -> None:
        """Register with every NameServer before the broker counts as started (its routes
        exist once ``start()`` returns). Raises DuplicateBrokerError when a NameServer names
        another live broker with this name and id: this one would only be a stray copy of
        it, so it stops rather than run outside the routes unnoticed."""
        await self.register_all()
        if self.conflicts:
            namesrv, why = next(iter(self.conflicts.items()))
            raise DuplicateBrokerError(
                f"broker {self.config.brokerName} at {self.config.broker_addr} not started: "
                f"NameServer {namesrv}: {why} (if that broker is gone, the NameServer forgets "
                "it within 120 s; start this one again then)")

    async def register_all(self) -> None:
        """REGISTER_BROKER with the topic table to every NameServer, concurrently."""
        if self.paused:
            return
        if (self.config.brokerId == 0 and self.may_register_as_master is not None
                and not self.may_register_as_master()):
            return
        body = orjson.dumps({"topicConfigSerializeWrapper": self.topics.register_body(
                                 self.config.brokerPermission),
                             "filterServerList": []})
        header = {**self.header(), "haServerAddr": self.ha_server_addr or self.config.broker_addr,
                  "compressed": False, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
        #: Per NameServer that answered: the master it named, if any.
        named: list[tuple[str, str] | None] = []
        acknowledged = False

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)
            try:
                r = await self.client.invoke(
                    addr, cmd, self.config.registerBrokerTimeoutMills / 1000)
                holder = r.ext_fields.get("conflictBrokerAddr")
                if r.code != ResponseCode.SUCCESS and holder:
                    # Once, until it changes: rounds come every few seconds meanwhile.
                    say = log.debug if addr in self.conflicts else log.error
                    say("NameServer %s refused this broker (%s at %s, id %d): %s is "
                        "registered under the same name and id and alive; this broker "
                        "is not in its routes", addr, self.config.brokerName,
                        self.config.broker_addr, self.config.brokerId, holder)
                    self.conflicts[addr] = r.remark or f"{holder} holds the name and id"
                    return
                self.conflicts.pop(addr, None)
                if r.code != ResponseCode.SUCCESS:
                    self._failed(addr, f"NameServer {addr} refused registration: {r.remark}")
                    return
                nonlocal acknowledged
                acknowledged = True
                if self._failures.pop(addr, None) is not None:
                    log.info("registered with NameServer %s", addr)
                if self.config.brokerId != 0:
                    # A slave learns where its master is (RocketMQ's updateHaMasterAddress).
                    master, ha = r.ext_fields.get("masterAddr"), r.ext_fields.get("haServerAddr")
                    named.append((master, ha) if master and ha else None)
            except (RemotingError, OSError) as exc:
                self._failed(addr, f"cannot register with NameServer {addr}: {exc}")

        await asyncio.gather(*(one(a) for a in self.config.namesrv_addrs))
        self.acknowledged = acknowledged
        if self.config.brokerId != 0 and named:
            await self._learn_master([n for n in named if n is not None])

    def _failed(self, addr: str, why: str) -> None:
        """Log why a round with ``addr`` failed: a warning when the reason is new, then at
        debug level while it stays the same (rounds come every few seconds meanwhile)."""
        if self._failures.get(addr) != why:
            log.warning("%s%s", why, "" if self.acknowledged else
                        f"; trying again every {_UNACKED_FIRST:g}-{_UNACKED_MOST:g} s")
        else:
            log.debug("%s", why)
        self._failures[addr] = why

    async def _learn_master(self, named: list[tuple[str, str]]) -> None:
        """A slave: take the master the NameServers named (RocketMQ's updateHaMasterAddress);
        none named, keep the last one and ask again soon."""
        if self.config.enableControllerMode:
            # The controller names the master; these answers only confirm it.
            if named:
                self.master_addr, self.master_ha_addr = named[0]
            return
        was_masterless, self.masterless = self.masterless, not named
        if not named:
            if not was_masterless:
                log.info("the NameServers name no master for %s; registering again every "
                         "%g-%g s until they do", self.config.brokerName, _SEEK_FIRST,
                         _SEEK_MOST)
            return
        if was_masterless or named[0] != (self.master_addr, self.master_ha_addr):
            self.master_addr, self.master_ha_addr = named[0]
            log.info("master of %s: %s (HA %s)", self.config.brokerName, *named[0])
            await self._follow_now()

    async def _follow_now(self) -> None:
        """Have an HA client that follows no master connect now, not after its retry interval."""
        client = self.ha_client()
        if client is None or client.connected_to is not None or self._restarting:
            return
        self._restarting = True  # two rounds at once (a topic change) restart it once
        try:
            await client.stop()
            if self.ha_client() is client:  # not stopped with its broker meanwhile
                client.start()
        finally:
            self._restarting = False

    async def unregister_all(self) -> None:
        """UNREGISTER_BROKER to every NameServer; one that does not answer is left to expire
        the broker by itself."""
        async def one(addr: str) -> None:
            with contextlib.suppress(RemotingError, OSError):
                await self.client.invoke(addr, RemotingCommand.request(
                    RequestCode.UNREGISTER_BROKER, self.header()), 2)

        await asyncio.gather(*(one(a) for a in self.config.namesrv_addrs))
