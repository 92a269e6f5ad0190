"""The fuzzer's cluster and healthy clients: the server processes under fuzz (NameServer,
master, slave, controller) with their ports, memory and logs, and the producer and consumer
groups whose failures and losses count. Used by ``fuzz_servers.py``."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import threading
import time
from collections import Counter
from typing import Any

from fuzz_requests import (
    BROKER_CODES,
    CONTROLLER_CODES,
    FUZZ_TOPIC,
    HEALTHY_TOPIC,
    NAMESRV_CODES,
)
from fuzz_wire import Target
from ha_bench import spawn, stop_all

from rocketq.cli.cluster import free_port
from rocketq.protocol import RemotingCommand, RequestCode

# ---------------------------------------------------------------------------- healthy clients


class Healthy:
    """A producer, a push consumer group and a pull consumer group on their own thread's
    event loop; every failed send and every acknowledged message a group never got count."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.namesrv = namesrv
        self.topic = topic
        self.sent = 0
        self.failed = 0
        self.failures: Counter = Counter()
        self.acked: set[bytes] = set()
        self.got: dict[str, set[bytes]] = {"push": set(), "pull": set()}
        self.probes = 0
        self.probe_failed = 0
        self._stop = threading.Event()
        self._done = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, drain: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(drain + 60)

    def _run(self) -> None:
        from rocketq.remoting import run

        try:
            run(self._main())
        except BaseException as exc:  # reported, not raised on a thread nobody joins
            self.error = exc

    async def _main(self) -> None:
        from rocketq.aio import Message, Producer, PullConsumer, PushConsumer, SendStatus

        async def on_push(messages: list[Any]) -> None:
            for m in messages:
                self.got["push"].add(m.body)

        push = PushConsumer("healthy-push", namesrv=self.namesrv, from_where="first")
        push.subscribe(self.topic)
        push.register(on_push)
        pull = PullConsumer("healthy-pull", namesrv=self.namesrv, from_where="first")
        pull.subscribe(self.topic)
        await push.start()
        await pull.start()
        stopped = asyncio.Event()

        async def poll() -> None:
            for _ in range(100_000_000):
                if stopped.is_set():
                    return
                for m in await pull.poll(0.5):
                    self.got["pull"].add(m.body)

        poller = asyncio.get_running_loop().create_task(poll())
        async with Producer("healthy-producer", namesrv=self.namesrv) as producer:
            async def sender(k: int) -> None:
                for i in range(100_000_000):
                    if self._stop.is_set():
                        return
                    body = b"healthy-%d-%d" % (k, i)
                    self.sent += 1
                    try:
                        r = await producer.send(Message(self.topic, body))
                    except Exception as exc:
                        self.failed += 1
                        self.failures[type(exc).__name__ + ": " + str(exc)[:120]] += 1
                        await asyncio.sleep(0.05)
                        continue
                    if r.status is SendStatus.SEND_OK:
                        self.acked.add(body)
                    else:
                        self.failed += 1
                        self.failures[r.status.name] += 1
                    await asyncio.sleep(0.01)

            await asyncio.gather(*(sender(k) for k in range(2)))
        # Nothing more is sent: wait until both groups have every acknowledged message.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(self.acked - got for got in
                                                  self.got.values()):
            await asyncio.sleep(0.2)
        stopped.set()
        await poller
        await push.shutdown()
        await pull.shutdown()

    def lost(self) -> dict[str, int]:
        return {group: len(self.acked - got) for group, got in self.got.items()}


# ---------------------------------------------------------------------------- servers


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MiB (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Cluster:
    """The processes under fuzz: NameServer, master, slave (over the HA port), controller."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.procs: dict[str, subprocess.Popen[str]] = {}
        ns_port = free_port()
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.ports = {"namesrv": ns_port, "master": free_port(), "slave": free_port(),
                      "ha": free_port(), "controller": free_port(pair=True)}

    def start(self) -> None:
        d = self.directory
        self.procs["namesrv"] = spawn(["namesrv", "--port", str(self.ports["namesrv"])], d,
                                      "namesrv")
        for broker_id, name in enumerate(("master", "slave")):
            conf = os.path.join(d, f"{name}.conf")
            with open(conf, "w") as fh:
                fh.write(f"brokerName=broker-a\nbrokerId={broker_id}\n"
                         f"namesrvAddr={self.namesrv}\nlistenPort={self.ports[name]}\n"
                         f"storePathRootDir={os.path.join(d, name)}\n"
                         "flushDiskType=ASYNC_FLUSH\nautoCreateTopicEnable=false\n"
                         "mappedFileSizeCommitLog=67108864\nmaxHashSlotNum=100000\n"
                         "maxIndexNum=400000\n")
                if broker_id == 0:
                    fh.write(f"brokerRole=ASYNC_MASTER\nhaListenPort={self.ports['ha']}\n")
                else:
                    fh.write("brokerRole=SLAVE\nhaListenPort=0\n"
                             f"haMasterAddress=127.0.0.1:{self.ports['ha']}\n")
            self.procs[name] = spawn(["broker", "-c", conf], d, name)
        self.procs["controller"] = spawn(["controller", "--port", str(self.ports["controller"])],
                                         d, "controller")

    def targets(self) -> list[Target]:
        p = self.ports
        return [Target("namesrv", "127.0.0.1", p["namesrv"], "remoting", NAMESRV_CODES,
                       "namesrv"),
                Target("master", "127.0.0.1", p["master"], "remoting", BROKER_CODES, "master"),
                Target("slave", "127.0.0.1", p["slave"], "remoting", BROKER_CODES, "slave"),
                Target("master-ha", "127.0.0.1", p["ha"], "ha", {}, "master"),
                Target("controller", "127.0.0.1", p["controller"], "remoting",
                       CONTROLLER_CODES, "controller")]

    def rss(self) -> dict[str, float]:
        return {name: round(rss_mb(proc.pid), 1) for name, proc in self.procs.items()}

    def alive(self) -> dict[str, bool]:
        return {name: proc.poll() is None for name, proc in self.procs.items()}

    def stop(self) -> None:
        stop_all(list(self.procs.values()))

    def logs(self) -> dict[str, dict[str, Any]]:
        """Per server log: tracebacks, ERROR lines and the first few distinct ERROR
        messages (timestamps and ports taken out)."""
        out: dict[str, dict[str, Any]] = {}
        for name in self.procs:
            path = os.path.join(self.directory, f"{name}.log")
            tracebacks = errors = 0
            kinds: Counter = Counter()
            with open(path, errors="replace") as fh:
                for line in fh:
                    if line.startswith("Traceback"):
                        tracebacks += 1
                    if " ERROR " in line or " CRITICAL " in line:
                        errors += 1
                        text = line.split(": ", 1)[-1].strip()
                        kinds[re.sub(r"\d+", "N", text)[:160]] += 1
            out[name] = {"tracebacks": tracebacks, "errors": errors,
                         "error_kinds": dict(kinds.most_common(8))}
        return out


async def create_topics(master: str, namesrv: str) -> None:
    from rocketq.client.instance import ClientInstance

    instance = ClientInstance(namesrv)
    try:
        for topic in (HEALTHY_TOPIC, FUZZ_TOPIC):
            r = await instance.remoting.invoke(master, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": 4,
                                                      "writeQueueNums": 4, "perm": 6}))
            assert r.code == 0, r.remark
        for _ in range(200):
            if await instance.fetch_route(HEALTHY_TOPIC):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError("the healthy topic never got a route")
    finally:
        await instance.remoting.close()

