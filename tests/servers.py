"""Real NameServers and Brokers on 127.0.0.1, run on an event loop in a background thread, for
tests that drive them with the synchronous client API."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from rocketq.broker import Broker, load_broker_conf
from rocketq.namesrv import NameServer


class ServerThread:
    """An event loop thread hosting NameServers and Brokers."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.namesrvs: list[NameServer] = []
        self.brokers: list[Broker] = []

    def call(self, coro, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def namesrv(self) -> str:
        return ";".join(n.address for n in self.namesrvs)

    def start_namesrv(self, **kw) -> NameServer:
        async def go():
            ns = NameServer("127.0.0.1", 0, **kw)
            await ns.start()
            return ns
        ns = self.call(go())
        self.namesrvs.append(ns)
        return ns

    def start_broker(self, name: str = "broker-a", **conf) -> Broker:
        values = {"storePathRootDir": str(self.tmp_path / name), "namesrvAddr": self.namesrv,
                  "listenPort": 0, "haListenPort": 0, "brokerName": name,
                  "mappedFileSizeCommitLog": 8 << 20,
                  "maxHashSlotNum": 4096, "maxIndexNum": 16384,
                  "flushIntervalConsumeQueue": 200}
        values.update(conf)

        async def go():
            broker = Broker(*load_broker_conf(values))
            await broker.start()
            return broker
        broker = self.call(go())
        self.brokers.append(broker)
        return broker

    def stop_broker(self, broker: Broker) -> None:
        self.call(broker.stop())
        self.brokers.remove(broker)

    def create_topic(self, topic: str, queues: int = 4) -> None:
        from rocketq.broker.topics import TopicConfig

        async def go():
            for broker in self.brokers:
                broker.topics.update(TopicConfig(topic, queues, queues))
            await asyncio.gather(*(b.register_all() for b in self.brokers))
        self.call(go())

    def stop(self) -> None:
        for b in list(self.brokers):
            try:
                self.call(b.stop())
            except Exception:
                pass
        for n in self.namesrvs:
            try:
                self.call(n.stop())
            except Exception:
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
