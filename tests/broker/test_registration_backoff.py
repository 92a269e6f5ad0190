"""A broker started before its NameServer registers within a second or two of the NameServer
answering (every 0.5 s, doubling to 2 s, while none has acknowledged), then every
registerNameServerPeriod again."""

from __future__ import annotations

import asyncio
import socket
import time

from rocketq.client.admin import AsyncAdmin
from rocketq.namesrv import NameServer

from ..conftest import run_async


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def registered(admin: AsyncAdmin, name: str) -> bool:
    try:
        return name in await admin.masters()
    except Exception:
        return False


def test_a_broker_started_before_its_namesrv_appears_soon_after_it(cluster):
    async def main() -> tuple[float, int, int]:
        port = free_port()
        broker = await cluster.start_broker(namesrvAddr=f"127.0.0.1:{port}")
        await asyncio.sleep(3.5)  # rounds at 0.5, 1.5 and 3.5 s meanwhile, none answered
        ns = NameServer("127.0.0.1", port)
        await ns.start()
        cluster.namesrvs.append(ns)
        started = time.monotonic()
        async with AsyncAdmin(ns.address) as admin:
            while not await registered(admin, "broker-a"):
                assert time.monotonic() - started < 10, "the broker never registered"
                await asyncio.sleep(0.05)
            seen = time.monotonic() - started
            # Acknowledged: back to every registerNameServerPeriod (30 s), not every few s.
            rounds = []
            original = broker.registration.register_all

            async def counted() -> None:
                rounds.append(time.monotonic())
                await original()

            broker.registration.register_all = counted
            await asyncio.sleep(5)
        await cluster.stop()
        return seen, len(rounds), broker.config.registerNameServerPeriod

    seen, rounds, period = run_async(main())
    assert seen <= 2.0, f"registered {seen:.1f} s after the NameServer started"
    assert period == 30_000 and rounds == 0
