"""Fixtures of the controller tests: loopback port pairs and a real etcd server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from rocketq.cli.cluster import free_port
from rocketq.controller import Controller, ControllerConfig, RaftEngine

from ..conftest import until


def port_pair() -> int:
    """A port whose next one is free too (a controller's Raft port is its port + 1)."""
    return free_port(pair=True)


#: Quick scans, leases and heartbeat timeouts, so failovers take a second.
FAST = ControllerConfig(scanNotActiveBrokerInterval=50, masterLeaseMillis=800,
                        brokerHeartbeatTimeoutMillis=800)




async def start_controllers(n: int, config: ControllerConfig = FAST) -> list[Controller]:
    """``n`` controller nodes on the embedded Raft engine, once they have a leader every node
    knows."""
    ports = [port_pair() for _ in range(n)]
    peers = [f"127.0.0.1:{p}" for p in ports]
    nodes = [Controller(RaftEngine(addr, peers), "127.0.0.1", p, config)
             for addr, p in zip(peers, ports, strict=True)]
    for node in nodes:
        await node.start()
    await until(lambda: any(n.engine.is_leader() for n in nodes), 15)
    await until(lambda: all(n.engine.leader() for n in nodes), 15)  # the followers know it
    return nodes


@pytest.fixture
def etcd(tmp_path):
    """A real etcd server (Debian's etcd-server) on loopback ports."""
    binary = shutil.which("etcd")
    if binary is None:
        pytest.fail("etcd is not installed: `make test` installs Debian's etcd-server")
    client_port, peer_port = port_pair(), port_pair()
    url = f"http://127.0.0.1:{client_port}"
    proc = subprocess.Popen(
        [binary, "--data-dir", str(tmp_path / "etcd"), "--listen-client-urls", url,
         "--advertise-client-urls", url, "--listen-peer-urls",
         f"http://127.0.0.1:{peer_port}", "--initial-advertise-peer-urls",
         f"http://127.0.0.1:{peer_port}", "--initial-cluster",
         f"default=http://127.0.0.1:{peer_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", client_port)) == 0:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
