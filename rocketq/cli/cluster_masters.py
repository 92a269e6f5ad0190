"""Which replica each broker group's master is while ``rocketq cluster`` runs, as the
NameServer sees it: said once every group has one at start, then at each change, so a
failover shows on the command's output."""

from __future__ import annotations

import asyncio
from typing import Any

from .cluster_children import Child

#: How long the start waits for every group to have a master before it says which one.
ELECTION_WAIT = 20.0
#: How often the NameServer is asked for the masters, to report a change.
WATCH_INTERVAL = 1.0


class MasterWatch:
    """Which replica each broker group's master is, as the NameServer sees it: printed once
    every group has one (or the wait is over), then again whenever one changes."""

    def __init__(self, namesrv: str, groups: list[str], brokers: list[Child],
                 **client: Any) -> None:
        from ..client.admin import AsyncAdmin

        self.admin = AsyncAdmin(namesrv, **client)
        self.groups = groups
        self.by_port = {child.port: child for child in brokers}
        self.current: dict[str, str | None] = {}
        #: Each group's last master seen, through an interregnum without one.
        self.last: dict[str, str] = {}

    async def masters(self) -> dict[str, str] | None:
        """``group -> master address``, or None when the NameServer does not answer."""
        from ..client.errors import ClientError

        try:
            return await self.admin.masters()
        except (ClientError, OSError):
            return None

    def line(self, group: str, addr: str | None) -> str:
        """``broker-a master: 127.0.0.1:PORT (replica 1, pid N)``, and what it was."""
        if addr is None:
            text = f"{group} master: none (until the controller elects one)"
        else:
            port = addr.rpartition(":")[2]
            child = self.by_port.get(int(port)) if port.isdigit() else None
            label = child.label.removeprefix(f"{group} ") if child else ""
            text = f"{group} master: {addr}" + (f" ({label}, pid {child.proc.pid})"
                                                 if child else "")
        before = self.last.get(group)
        return text + (f", was {before}" if before and before != addr else "")

    def _set(self, group: str, addr: str | None) -> None:
        self.current[group] = addr
        if addr is not None:
            self.last[group] = addr

    async def first(self, timeout: float = ELECTION_WAIT) -> None:
        """Wait until every group has a master, for at most ``timeout`` seconds; print them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        masters: dict[str, str] = {}
        while loop.time() < deadline:
            masters = await self.masters() or {}
            if all(group in masters for group in self.groups):
                break
            await asyncio.sleep(0.25)
        for group in self.groups:
            print(self.line(group, masters.get(group)), flush=True)
            self._set(group, masters.get(group))

    async def watch(self, interval: float = WATCH_INTERVAL) -> None:
        """Print each change of a group's master, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            masters = await self.masters()
            if masters is None:
                continue
            for group in self.groups:
                addr = masters.get(group)
                if addr != self.current.get(group):
                    print(self.line(group, addr), flush=True)
                    self._set(group, addr)

    async def close(self) -> None:
        await self.admin.close()
