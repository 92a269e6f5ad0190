"""A controller's Raft journal directory has one writer: a second node on it is refused
before pysyncobj opens the journal, and the first one goes on."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import pytest

from rocketq.cli import main
from rocketq.controller import Controller, RaftEngine
from rocketq.controller.engine import raft_address
from rocketq.dirlock import DirectoryLock, DirectoryLockedError

from ..cli.test_cli import start, stop
from .conftest import FAST, port_pair, until


def test_a_second_raft_node_on_the_same_data_dir_is_refused(tmp_path):
    data = tmp_path / "raft"

    async def main():
        port, other = port_pair(), port_pair()
        addr, other_addr = f"127.0.0.1:{port}", f"127.0.0.1:{other}"
        first = Controller(RaftEngine(addr, [addr], str(data)), "127.0.0.1", port, FAST)
        await first.start()
        try:
            await until(first.engine.is_leader, 15)
            journal = sorted(os.listdir(data))
            second = RaftEngine(other_addr, [other_addr], str(data))
            with pytest.raises(DirectoryLockedError) as refused:
                await second.start()
            assert refused.value.pid == os.getpid()
            assert "controller data directory" in str(refused.value)
            assert str(data) in str(refused.value) and addr in str(refused.value)
            assert sorted(os.listdir(data)) == journal
            with socket.socket() as s:  # its Raft port was never bound
                s.bind(("127.0.0.1", int(raft_address(other_addr).rsplit(":", 1)[1])))
            assert first.engine.is_leader()
        finally:
            await first.stop()
        # Stopped: the directory is free for the next node.
        again = RaftEngine(other_addr, [other_addr], str(data))
        await again.start()
        await again.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_rocketq_controller_twice_on_one_data_dir_refuses_the_second(tmp_path):
    data = tmp_path / "controller"
    port = port_pair()
    first = start(["controller", "--port", str(port), "--data-dir", str(data)], "listening")
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "rocketq.cli", "controller", "--port",
                               str(port_pair()), "--data-dir", str(data)],
                              capture_output=True, text=True, timeout=30)
        assert time.monotonic() - started < 15
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("rocketq: the controller data directory")
        assert str(data) in lines[0] and f"process {first.pid} " in lines[0]
        assert first.poll() is None
    finally:
        assert stop(first) == 0


def test_a_second_rocketq_cluster_on_one_data_dir_starts_nothing(tmp_path, capsys):
    data = tmp_path / "cluster"
    with DirectoryLock.acquire(str(data), "the first cluster"):
        code = main(["cluster", "--data-dir", str(data), "--namesrv-port", str(port_pair())])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("rocketq: the cluster directory") and str(data) in err[0]
    assert f"process {os.getpid()} (the first cluster)" in err[0]
    assert os.listdir(data) == ["lock"]  # no log, no broker.conf, no child started


def test_a_second_nameserver_hosting_a_controller_on_one_data_dir_opens_nothing(tmp_path):
    """`rocketq namesrv --enable-controller` starts its controller (which takes the data
    directory's lock) before its NameServer listens: a second one on the same directory is
    refused without ever opening its NameServer port."""
    data = tmp_path / "controller"
    first = start(["namesrv", "--port", str(port_pair()), "--enable-controller",
                   "--controller-port", str(port_pair()), "--controller-data-dir", str(data)],
                  "listening")
    try:
        ns_port = port_pair()
        done = subprocess.run(
            [sys.executable, "-m", "rocketq.cli", "namesrv", "--port", str(ns_port),
             "--enable-controller", "--controller-port", str(port_pair()),
             "--controller-data-dir", str(data)], capture_output=True, text=True, timeout=30)
        assert done.returncode != 0
        assert "NameServer listening" not in done.stdout + done.stderr
        assert "controller data directory" in done.stderr and str(data) in done.stderr
        assert first.poll() is None
    finally:
        assert stop(first) == 0
