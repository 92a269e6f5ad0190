"""``rocketq cluster`` prints every child's pid, starts a broker that exits again (bounded,
with backoff, saying so; ``--no-restart``: never), and gives the NameServer and the
controller the ACL and TLS of the brokers' ``-c`` file."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess

import orjson
import pytest

from rocketq.acl import Credentials
from rocketq.cli.cluster_children import RESTART_LIMIT, Child
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient

from ..certs import make_pki
from ..conftest import wait_for
from ..remoting.test_tls import client_ctx
from .test_cli import ROCKETQ, SMALL_FILES
from .test_first_contact import Lines

ACL = """accounts:
  - accessKey: cluster-admin
    secretKey: cluster-secret-1
    admin: true
"""
ADMIN = Credentials("cluster-admin", "cluster-secret-1")


def test_a_broker_is_restarted_with_backoff_and_then_left_down():
    child = Child("broker-a replica 0", proc=None, argv=["broker"], started=0.0)
    now, delays = 0.0, []
    for _ in range(RESTART_LIMIT + 1):
        now += 5  # each run well under a minute
        delays.append(child.restart_delay(now))
        child.started = now
    assert delays == [5, 10, 20, 30, 30, None]
    steady = Child("broker-a replica 1", proc=None, argv=["broker"], started=0.0,
                   short_runs=4)
    assert steady.restart_delay(61.0) == 5  # a run of a minute starts the count again
    assert Child("NameServer", proc=None).restart_delay(1.0) is None  # only brokers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(tmp_path, extra: str, *args: str) -> tuple[subprocess.Popen, Lines, list[str]]:
    conf = tmp_path / "extra.conf"
    conf.write_text(SMALL_FILES + extra)
    proc = subprocess.Popen(
        [*ROCKETQ, "cluster", "--data-dir", str(tmp_path / "data"), "--namesrv-port",
         str(free_port()), "--grpc-port", "0", "-c", str(conf), *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = Lines(proc.stdout)
    try:
        return proc, out, out.until(lambda line: "Ctrl-C stops all" in line, 90)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def stop_cluster(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def pid_of(line: str) -> int:
    return int(line.split("(pid ", 1)[1].split(")", 1)[0].split(",", 1)[0])


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode()


def ask(addr: str, ssl, credentials: Credentials | None) -> RemotingCommand:
    async def go() -> RemotingCommand:
        client = RemotingClient(ssl=ssl)
        try:
            cmd = RemotingCommand.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {},
                                          body=b'["broker-a"]')
            if credentials is not None:
                credentials.sign(cmd)
            return await client.invoke(addr, cmd, 5)
        finally:
            await client.close()
    return asyncio.run(go())


@pytest.mark.slow
def test_the_controller_takes_the_clusters_acl_and_tls_and_a_killed_broker_comes_back(
        tmp_path):
    pki = make_pki(tmp_path / "pki")
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    proc, out, start = start_cluster(
        tmp_path, f"aclEnable=true\naclFile={acl}\ntlsMode=enforcing\n"
                  f"tls.server.certPath={pki.server_cert}\ntls.server.keyPath={pki.server_key}\n"
                  f"tls.enable=true\ntls.client.trustCertPath={pki.ca}\n",
        "--replicas", "2")
    try:
        # Every child's pid, each of the process it names.
        ns_line = next(line for line in start if line.startswith("NameServer "))
        controller_line = next(line for line in start if line.startswith("Controller "))
        assert " namesrv " in cmdline(pid_of(ns_line))
        assert " controller " in cmdline(pid_of(controller_line))
        controller = controller_line.split()[1]
        # The controller serves TLS only, and checks signatures: the brokers reached it (a
        # master was elected, and the command read it through the NameServer's ACL and TLS).
        masters = [line for line in start if line.startswith("broker-a master: 127.0.0.1:")]
        assert masters, start
        tls = client_ctx(pki)
        with pytest.raises(Exception):  # noqa: B017 - plain: turned away, however it fails
            answer = ask(controller, None, ADMIN)
            assert answer.code == ResponseCode.SUCCESS
        assert ask(controller, tls, None).code == ResponseCode.NO_PERMISSION
        assert ask(controller, tls, ADMIN).code == ResponseCode.SUCCESS

        # A broker killed is started again, says so, and rejoins its group.
        master = masters[0].split()[2]
        replicas = {line.split(": ", 1)[1].split()[0]: (line.split(": ", 1)[0], pid_of(line))
                    for line in start if line.startswith("broker-a replica ")}
        (slave,) = set(replicas) - {master}
        label, pid = replicas[slave]
        os.kill(pid, signal.SIGKILL)
        out.until(lambda line: line == f"{label} (pid {pid}) was killed by SIGKILL", 20)
        out.until(lambda line: line == f"restarting {label} in 5 s", 5)
        again = out.until(lambda line: line.startswith(f"{label} restarted: {slave} (pid "),
                          60)[-1]
        new_pid = pid_of(again)
        assert new_pid != pid and " broker " in cmdline(new_pid)

        def back_in_its_group() -> bool:
            """The controller hears the restarted broker's heartbeats."""
            answer = ask(controller, tls, ADMIN)
            replicas = orjson.loads(answer.body)["replicasInfoTable"]["broker-a"]["replicas"]
            return any(r["brokerAddress"] == slave and r["alive"] for r in replicas)
        assert wait_for(back_in_its_group, 30)
        assert proc.poll() is None
    finally:
        stop_cluster(proc)


@pytest.mark.slow
def test_no_restart_leaves_a_killed_broker_down_and_says_so(tmp_path):
    proc, out, start = start_cluster(tmp_path, "", "--replicas", "1", "--no-restart")
    try:
        line = next(line for line in start if line.startswith("broker-a replica 0: "))
        pid = pid_of(line)
        os.kill(pid, signal.SIGKILL)
        out.until(lambda text: text == f"broker-a replica 0 (pid {pid}) was killed by SIGKILL",
                  20)
        out.until(lambda text: text == "broker-a replica 0 is left down (--no-restart)", 5)
        assert proc.poll() is None
    finally:
        stop_cluster(proc)
