"""Shared fixtures: real NameServers and Brokers on 127.0.0.1, random ports, temp dirs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import pytest

from rocketq.broker import Broker, load_broker_conf
from rocketq.namesrv import NameServer

# Brokers the tests start as processes serve no gRPC port unless a test names one: many run
# at once, and the default port (8081) is one port.
os.environ["ROCKETQ_GRPC_PORT"] = "0"


class Cluster:
    """NameServers and Brokers started in the test's own event loop."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.namesrvs: list[NameServer] = []
        self.brokers: list[Broker] = []

    @property
    def namesrv(self) -> str:
        return ";".join(n.address for n in self.namesrvs)

    async def start_namesrv(self, **kw) -> NameServer:
        ns = NameServer("127.0.0.1", 0, **kw)
        await ns.start()
        self.namesrvs.append(ns)
        return ns

    async def start_broker(self, name="broker-a", **conf) -> Broker:
        values = {"storePathRootDir": str(self.tmp_path / name), "namesrvAddr": self.namesrv,
                  "listenPort": 0, "brokerName": name, "mappedFileSizeCommitLog": 4 << 20,
                  "maxHashSlotNum": 4096, "maxIndexNum": 16384,
                  "flushIntervalConsumeQueue": 200}
        values.update(conf)
        broker = Broker(*load_broker_conf(values))
        await broker.start()
        self.brokers.append(broker)
        return broker

    async def stop(self) -> None:
        for b in self.brokers:
            with contextlib.suppress(Exception):
                await b.stop()
        for n in self.namesrvs:
            with contextlib.suppress(Exception):
                await n.stop()


@pytest.fixture
def cluster(tmp_path):
    return Cluster(tmp_path)


def run_async(coro, timeout: float = 60):
    """Run a test coroutine with an overall bound."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def servers(tmp_path):
    """A NameServer and a Broker on a background loop, for the synchronous client API."""
    from .servers import ServerThread

    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        st.start_broker()
        yield st
    finally:
        st.stop()


@pytest.fixture
def st(tmp_path):
    """A NameServer on an event loop thread, for brokers the test starts; all stopped after."""
    from .servers import ServerThread

    servers = ServerThread(tmp_path)
    try:
        servers.start_namesrv()
        yield servers
    finally:
        servers.stop()


async def until(check, timeout: float = 10.0, interval: float = 0.05):
    """Wait in a coroutine until ``check()`` (or the coroutine it returns) is truthy, and
    return it; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        await asyncio.sleep(interval)
    raise AssertionError("timed out")


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def fetch_route(namesrv: str, topic: str):
    """The topic's route as a NameServer answers it now (None when it has none), asked on a
    fresh client from the test's own thread."""
    from rocketq.client.instance import ClientInstance
    from rocketq.remoting import run

    async def ask():
        instance = ClientInstance(namesrv)
        try:
            return await instance.fetch_route(topic)
        finally:
            await instance.remoting.close()

    return run(ask())


#: Tests that share a process-wide resource and so run on one worker under pytest-xdist: the
#: Spark tests share one SparkSession (a JVM that each worker would start again), the compat
#: tests the client environments they install into one cache, the dashboard's tests one
#: broker and one browser.
ONE_WORKER = ("tests/spark/", "tests/compat/", "tests/dashboard/")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Spread tests one by one over the workers, except those under ``ONE_WORKER``, each
    folder of which goes to a single worker. (``--dist loadgroup`` would say the same with
    markers, but it renames node ids in a way pytest 9.2 no longer sees.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((p for p in ONE_WORKER if nodeid.startswith(p)), nodeid)

    return Scheduling(config, log)
