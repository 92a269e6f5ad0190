"""The processes the cluster tests run on: ``rocketq cluster`` (two broker groups with a slave
each, controller mode) and a Spark standalone cluster; a driver script run against both; and
reading a topic back with rocketq's own client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketq import Admin, PullConsumer
from rocketq.cli.cluster import free_port

from ..cli.test_cli import SMALL_FILES

DRIVER = Path(__file__).with_name("cluster_driver.py")


@dataclass
class RocketqCluster:
    """``rocketq cluster --groups 2 --replicas 2`` as a child process."""

    directory: Path
    proc: subprocess.Popen[str] | None = None
    namesrv: str = ""
    brokers: dict[str, int] = field(default_factory=dict)  # address -> pid

    def start(self, timeout: float = 90) -> RocketqCluster:
        extra = self.directory / "extra.conf"
        self.directory.mkdir(parents=True, exist_ok=True)
        extra.write_text(SMALL_FILES.replace("haListenPort=0\n", ""))
        port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketq.cli", "cluster", "--groups", "2", "--replicas", "2",
             "--data-dir", str(self.directory / "data"), "--namesrv-port", str(port),
             "--grpc-port", "0", "-c", str(extra)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("rocketq cluster exited:\n" + "".join(seen))
            seen.append(line)
            if " replica " in line and "pid " in line:
                addr = line.split(": ", 1)[1].split(" ", 1)[0].rstrip(",")
                self.brokers[addr] = int(line.split("pid ", 1)[1].split(",", 1)[0])
            if "Ctrl-C stops all" in line:
                self.namesrv = f"127.0.0.1:{port}"
                return self
        self.stop()
        raise TimeoutError("rocketq cluster did not start:\n" + "".join(seen))

    def create_topic(self, topic: str, queues: int) -> dict[str, str]:
        """``topic`` with ``queues`` queues on both groups' masters; their name -> address."""
        with Admin(self.namesrv) as admin:
            return admin.create_topic(topic, queues)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def half_messages(namesrv: str, topic: str) -> int:
    """Half messages stored on the masters of ``topic``'s groups (the transactional half
    topic's queue 0 holds every half)."""
    from rocketq.protocol import TRANS_HALF_TOPIC, RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient, run

    from ..conftest import fetch_route

    masters = {name: by_id.get(0) or by_id.get("0")
               for name, by_id in fetch_route(namesrv, topic).broker_addrs.items()}

    async def count() -> int:
        client = RemotingClient()
        try:
            total = 0
            for addr in masters.values():
                r = await client.invoke(addr, RemotingCommand.request(
                    RequestCode.GET_MAX_OFFSET, {"topic": TRANS_HALF_TOPIC, "queueId": 0}))
                total += int(r.ext_fields["offset"])
            return total
        finally:
            await client.close()

    return run(count())


def run_driver(spark_url: str, namesrv: str, *args: str, timeout: float = 400) -> dict:
    """Run cluster_driver.py with ``args``; its JSON result (AssertionError with its output
    if it failed)."""
    proc = subprocess.run(
        [sys.executable, str(DRIVER), spark_url, namesrv, *args], capture_output=True,
        text=True, timeout=timeout, env={**os.environ, "PYSPARK_PYTHON": sys.executable,
                                         "SPARK_LOCAL_IP": "127.0.0.1"})
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"driver failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-6000:]}")


def read_topic(namesrv: str, topic: str, expect: int, seconds: float = 60) -> list:
    """Every message of ``topic`` from its first offset, by a new consumer group: polls until
    ``expect`` arrived, then a little longer, so a duplicate would show."""
    got: list = []
    with PullConsumer(f"check-{topic}-{time.monotonic_ns()}", namesrv=namesrv,
                      from_where="first") as consumer:
        consumer.subscribe(topic)
        consumer.start()
        deadline = time.monotonic() + seconds
        while len(got) < expect and time.monotonic() < deadline:
            got.extend(consumer.poll(0.2))
        settle = time.monotonic() + 1.5
        while time.monotonic() < settle:
            got.extend(consumer.poll(0.2))
    return got
