"""The broker's periodic chores: saving the tables kept in memory (consumer offsets, delay
and timer progress, transaction progress) and forgetting clients that went silent.

A save that fails (a full disk, a config directory that cannot be written) is logged once
until it works again; the table stays in memory and is saved again at the next round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .clients import ClientTable
    from .config import BrokerConfig
    from .offsets.table import ConsumerOffsets
    from .schedule.delay import DelayDelivery
    from .schedule.timer import TimerWheel
    from .transactions.half_messages import Transactions

log = logging.getLogger("rocketq.broker")


class Housekeeping:
    """Saves the tables every ``flushConsumerOffsetInterval`` and expires silent clients
    every 10 s (``run``); saves them all once more when the broker stops (``save_all``)."""

    def __init__(self, config: BrokerConfig, config_dir: str, offsets: ConsumerOffsets,
                 schedule: DelayDelivery, transactions: Transactions, timer: TimerWheel,
                 clients: ClientTable) -> None:
        self.config = config
        self.config_dir = config_dir
        self.offsets = offsets
        self.schedule = schedule
        self.transactions = transactions
        self.timer = timer
        self.clients = clients
        #: Tables whose last save failed, with the error (logged once until saved again).
        self.unsaved: dict[str, str] = {}

    def save(self, name: str, save: Callable[[], None]) -> bool:
        """Run one of the tables' ``persist``; see the module docstring for a failure."""
        try:
            save()
        except OSError as exc:
            if name not in self.unsaved:
                log.error("cannot save the %s in %s: %s; kept in memory, and saved again "
                          "every %d ms until it works", name, self.config_dir, exc,
                          self.config.flushConsumerOffsetInterval)
            self.unsaved[name] = str(exc)
            return False
        if self.unsaved.pop(name, None) is not None:
            log.warning("the %s: saved in %s again", name, self.config_dir)
        return True

    def save_all(self) -> None:
        """Save every table now, whatever their intervals (the broker is stopping)."""
        for name, save in (("consumer offsets", lambda: self.offsets.persist(force=True)),
                           ("delay offsets", self.schedule.persist),
                           ("transaction progress", self.transactions.persist),
                           ("timer progress", self.timer.persist)):
            self.save(name, save)

    async def run(self) -> None:
        """Persist offsets and delivery progress, expire silent clients; until cancelled."""
        cfg = self.config
        last_expire = time.monotonic()
        while True:
            await asyncio.sleep(cfg.flushConsumerOffsetInterval / 1000)
            await asyncio.to_thread(self.save, "consumer offsets", self.offsets.persist)
            await asyncio.to_thread(self.save, "delay offsets", self.schedule.persist)
            self.save("timer progress", self.timer.persist)
            if time.monotonic() - last_expire >= 10:
                last_expire = time.monotonic()
                self.clients.expire(cfg.channelExpiredTimeout / 1000)
