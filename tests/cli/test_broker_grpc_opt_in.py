"""``rocketq broker`` serves gRPC only when asked (``enableProxy``, ``--enable-proxy``), as
RocketMQ's ``mqbroker`` does: a master and a slave from plain 4.x broker.conf files, which
say nothing of gRPC, start side by side on one host."""

from __future__ import annotations

import os
import socket
import subprocess

import grpc
import pytest

from rocketq import Admin

from ..conftest import wait_for
from .test_cli import ROCKETQ, SMALL_FILES, free_port, stop

pytestmark = pytest.mark.slow


def env_without_grpc_port() -> dict[str, str]:
    """The environment of a broker started as a user would: without the test suite's
    ``ROCKETQ_GRPC_PORT=0``, so the default gRPC port (8081) is what a broker would take."""
    env = dict(os.environ)
    env.pop("ROCKETQ_GRPC_PORT", None)
    return env


def spawn(args: list[str], ready: str = "listening", timeout: float = 20
          ) -> subprocess.Popen:
    proc = subprocess.Popen([*ROCKETQ, "--log-level", "WARNING", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_without_grpc_port())
    assert proc.stdout is not None
    wait_for(lambda: proc.poll() is not None or ready in proc.stdout.readline(), timeout)
    if proc.poll() is not None:
        raise AssertionError(f"{args} exited: {proc.stderr.read()[-2000:]}")
    return proc


def conf_4x(tmp_path, name: str, namesrv: str, port: int, broker_id: int, role: str,
            extra: str = "") -> str:
    """A broker.conf as RocketMQ 4.x ships them (conf/2m-2s-async/broker-a*.properties):
    nothing about gRPC."""
    path = tmp_path / f"{name}.properties"
    path.write_text(f"brokerClusterName=DefaultCluster\nbrokerName=broker-a\n"
                    f"brokerId={broker_id}\ndeleteWhen=04\nfileReservedTime=48\n"
                    f"brokerRole={role}\nflushDiskType=ASYNC_FLUSH\nnamesrvAddr={namesrv}\n"
                    f"listenPort={port}\nstorePathRootDir={tmp_path / name}\n"
                    f"{SMALL_FILES}{extra}")
    return str(path)


def test_a_master_and_a_slave_from_4x_confs_start_on_one_host(tmp_path):
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns = spawn(["namesrv", "--port", str(ns_port)])
    procs = [ns]
    try:
        master_port, slave_port = free_port(), free_port()
        procs.append(spawn(["broker", "-c", conf_4x(tmp_path, "broker-a", namesrv,
                                                     master_port, 0, "ASYNC_MASTER")]))
        procs.append(spawn(["broker", "-c", conf_4x(tmp_path, "broker-a-s", namesrv,
                                                     slave_port, 1, "SLAVE")]))
        with Admin(namesrv) as admin:
            assert wait_for(lambda: len(admin.broker_addresses()) == 2, 10)
            assert sorted(admin.broker_addresses()) == sorted(
                [f"127.0.0.1:{master_port}", f"127.0.0.1:{slave_port}"])
            # Neither serves gRPC, and each says so to brokers that look for it.
            for port in (master_port, slave_port):
                config = admin.broker_config(f"127.0.0.1:{port}")
                assert config["grpcServerPort"] == "0" and config["enableProxy"] == "false"
        assert all(p.poll() is None for p in procs)
    finally:
        for proc in reversed(procs):
            stop(proc)


def grpc_serves(port: int) -> bool:
    """Whether a gRPC server answers on 127.0.0.1:``port`` (a channel gets ready)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=5)
            return True
        except grpc.FutureTimeoutError:
            return False


@pytest.mark.parametrize("how", ["key", "flag"])
def test_enable_proxy_turns_grpc_on(tmp_path, how):
    grpc_port = free_port()
    extra = f"grpcServerPort={grpc_port}\n" + ("enableProxy=true\n" if how == "key" else "")
    conf = conf_4x(tmp_path, "broker-a", "127.0.0.1:1", free_port(), 0, "ASYNC_MASTER",
                   extra)
    proc = spawn(["broker", "-c", conf] + (["--enable-proxy"] if how == "flag" else []),
                 ready=f"gRPC 127.0.0.1:{grpc_port}")
    try:
        assert grpc_serves(grpc_port)
    finally:
        stop(proc)


def test_a_grpc_port_without_enable_proxy_is_not_opened_and_is_said(tmp_path):
    grpc_port = free_port()
    conf = conf_4x(tmp_path, "broker-a", "127.0.0.1:1", free_port(), 0, "ASYNC_MASTER",
                   f"grpcServerPort={grpc_port}\n")
    proc = spawn(["broker", "-c", conf])
    try:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", grpc_port)) != 0
    finally:
        stop(proc)
    assert "add enableProxy=true (or --enable-proxy)" in proc.stderr.read()
