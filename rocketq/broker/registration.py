"""Registration with the NameServers (RocketMQ's BrokerOuterAPI.registerBrokerAll and
unregisterBrokerAll).

The broker registers its topic table with every NameServer at start, every
``registerNameServerPeriod`` after that, and at once when its topics change; it unregisters
when it stops. A NameServer that refuses or cannot be reached is logged and tried again at the
next round: the others are not held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable
from typing import Any

import orjson

from ..protocol import RemotingCommand, RequestCode, ResponseCode
from ..remoting import RemotingClient, RemotingError
from .config import BrokerConfig
from .topics import TopicTable

log = logging.getLogger("rocketq.broker")


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

    def start(self) -> None:
        """From now on a change of the topics registers at once (see ``soon``)."""
        self._soon = asyncio.Event()

    def soon(self) -> None:
        """Re-register with the NameServers at once (a topic was created or changed)."""
        if self._soon is not None:
            self._soon.set()

    async def run(self) -> None:
        """Register every ``registerNameServerPeriod``, or sooner when asked, until cancelled."""
        assert self._soon is not None, "start() first"
        while True:
            with contextlib.suppress(TimeoutError):
                # Read on each round: UPDATE_BROKER_CONFIG may change the period.
                async with asyncio.timeout(self.config.registerNameServerPeriod / 1000):
                    await self._soon.wait()
            self._soon.clear()
            await self.register_all()

    def header(self) -> dict[str, Any]:
        """The fields that name this broker in REGISTER_BROKER and UNREGISTER_BROKER."""
        cfg = self.config
        return {"brokerName": cfg.brokerName, "brokerAddr": cfg.broker_addr,
                "clusterName": cfg.brokerClusterName, "brokerId": cfg.brokerId}

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

        async def one(addr: str) -> None:
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)
            try:
                r = await self.client.invoke(
                    addr, cmd, self.config.registerBrokerTimeoutMills / 1000)
                holder = r.ext_fields.get("conflictBrokerAddr")
                if r.code != ResponseCode.SUCCESS and holder:
                    log.error("NameServer %s refused this broker (%s at %s, id %d): %s is "
                              "registered under the same name and id and alive; this broker "
                              "is not in its routes", addr, self.config.brokerName,
                              self.config.broker_addr, self.config.brokerId, holder)
                    self.conflicts[addr] = r.remark or f"{holder} holds the name and id"
                    return
                self.conflicts.pop(addr, None)
                if r.code != ResponseCode.SUCCESS:
                    log.warning("NameServer %s refused registration: %s", addr, r.remark)
                elif self.config.brokerId != 0:
                    # A slave learns where its master is (RocketMQ's updateHaMasterAddress).
                    master, ha = r.ext_fields.get("masterAddr"), r.ext_fields.get("haServerAddr")
                    if master and ha:
                        self.master_addr, self.master_ha_addr = master, ha
            except (RemotingError, OSError) as exc:
                log.warning("cannot register with NameServer %s: %s", addr, exc)

        await asyncio.gather(*(one(a) for a in self.config.namesrv_addrs))

    async def unregister_all(self) -> None:
        """UNREGISTER_BROKER to every NameServer; one that does not answer is left to expire
        the broker by itself."""
        async def one(addr: str) -> None:
            with contextlib.suppress(RemotingError, OSError):
                await self.client.invoke(addr, RemotingCommand.request(
                    RequestCode.UNREGISTER_BROKER, self.header()), 2)

        await asyncio.gather(*(one(a) for a in self.config.namesrv_addrs))
