"""POP state survives a SIGKILL of the broker, and a failover in a ``rocketq cluster``:
nothing acked comes back, nothing out and unacked is lost, and handles stay good."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from rocketq.client.admin import AsyncAdmin
from rocketq.grpc.proto import definition_pb2 as pb
from rocketq.grpc.proto import service_pb2 as spb

from ..cli.test_cli import free_port, small_conf, start, stop
from ..conftest import run_async
from .conftest import Client, message, resource
from .test_pop import ack
from .test_service import receive

pytestmark = pytest.mark.slow


def standalone(tmp_path, ports: tuple[int, int, int] | None = None):
    """A standalone on ``ports`` (NameServer, broker, gRPC), or on fresh ones picked again if
    another test takes one first; returns the process and its ports."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    chosen: list[tuple[int, int, int]] = []

    def argv() -> list[str]:
        ns_port, broker_port, grpc_port = ports or (free_port(), free_port(), free_port())
        chosen.append((ns_port, broker_port, grpc_port))
        return ["standalone", "--data-dir", str(data), "--namesrv-port", str(ns_port),
                "--broker-port", str(broker_port), "--grpc-port", str(grpc_port),
                "-c", small_conf(tmp_path)]

    return start(argv, "connect clients"), chosen[-1]


async def drain(client, group, topic, until: float) -> list[pb.Message]:
    got = []
    while time.monotonic() < until:
        status, ms = await receive(client, group, topic, batch=32, poll_ms=1000)
        for m in ms:
            got.append(m)
            assert (await ack(client, group, topic, m)).code == pb.OK
    return got


def test_sigkill_with_messages_out(tmp_path):
    proc, ports = standalone(tmp_path)
    ns_port, _broker_port, grpc_port = ports
    address = f"127.0.0.1:{grpc_port}"

    async def before():
        async with AsyncAdmin(f"127.0.0.1:{ns_port}") as admin:
            await admin.create_topic("P", 2)
        c = Client(address)
        try:
            r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
                message("P", b"m%d" % i) for i in range(1)]))
            for i in range(1, 20):
                r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
                    message("P", b"m%d" % i)]))
                assert r.status.code == pb.OK
            out = []
            while len(out) < 10:
                status, ms = await receive(c, "G", "P", batch=10 - len(out),
                                           invisible_ms=12_000)
                out.extend(ms)
            for m in out[:5]:
                assert (await ack(c, "G", "P", m)).code == pb.OK
            return out
        finally:
            await c.close()

    out = run_async(before())
    killed_at = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc, _ = standalone(tmp_path, ports)  # the same ports: the handles name this broker
    try:
        async def after():
            c = Client(address)
            try:
                # Handles handed out before the crash still ack (their time is not up).
                for m in out[5:7]:
                    assert (await ack(c, "G", "P", m)).code == pb.OK
                got = await drain(c, "G", "P", killed_at + 25)
                return got
            finally:
                await c.close()
        got = run_async(after(), timeout=90)
    finally:
        assert stop(proc) == 0
    acked = {m.body for m in out[:7]}
    bodies = [m.body for m in got]
    assert not acked & set(bodies), "an acked message came back"
    assert sorted(bodies) == sorted({b"m%d" % i for i in range(20)} - acked)
    back = {m.body: m.system_properties.delivery_attempt for m in got}
    assert all(back[m.body] == 2 for m in out[7:])  # out, unacked: the next attempt


def test_failover_in_a_rocketq_cluster(tmp_path):
    import os
    import subprocess
    import sys

    from rocketq.cli.cluster import free_port as free_pair

    from ..cli.test_cli import SMALL_FILES
    from ..conftest import fetch_route, wait_for
    from ..controller.test_failover import replica_info

    extra = tmp_path / "extra.conf"
    extra.write_text(SMALL_FILES.replace("haListenPort=0\n", ""))
    ns_port, grpc_base = free_port(), free_pair(pair=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketq.cli", "cluster", "--replicas", "2", "--data-dir",
         str(tmp_path / "data"), "--namesrv-port", str(ns_port), "--grpc-port",
         str(grpc_base), "-c", str(extra)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids, grpc_of = {}, {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            if line.startswith("Controller "):
                controller = line.split()[1]
            if " replica " in line:
                # "broker-a replica 0: 127.0.0.1:P, gRPC 127.0.0.1:G (pid N, data ...)"
                addr = line.split(": ", 1)[1].split(",", 1)[0]
                pids[addr] = int(line.split("pid ", 1)[1].split(",", 1)[0])
                grpc_of[addr] = line.split("gRPC ", 1)[1].split(" ", 1)[0]
            if "Ctrl-C stops all" in line:
                break
        namesrv = f"127.0.0.1:{ns_port}"
        assert len(pids) == 2 and len(set(grpc_of.values())) == 2

        async def create():
            async with AsyncAdmin(namesrv) as admin:
                await admin.create_topic("PF", 2)
        run_async(create())
        assert wait_for(lambda: len(replica_info(controller).get("syncStateSet", [])) == 2, 30)
        route = fetch_route(namesrv, "PF").broker_addrs["broker-a"]
        master = route.get(0) or route.get("0")
        other = next(a for a in pids if a != master)

        async def before():
            c = Client(grpc_of[master])
            try:
                for i in range(20):
                    r = await c.call("SendMessage", spb.SendMessageRequest(messages=[
                        message("PF", b"f%d" % i)]))
                    assert r.status.code == pb.OK, r
                out = []
                while len(out) < 10:
                    status, ms = await receive(c, "G", "PF", batch=10 - len(out),
                                               invisible_ms=15_000)
                    out.extend(ms)
                for m in out[:5]:
                    assert (await ack(c, "G", "PF", m)).code == pb.OK
                return out
            finally:
                await c.close()
        out = run_async(before())
        os.kill(pids[master], signal.SIGKILL)
        killed_at = time.monotonic()

        async def after():
            c = Client(grpc_of[other])
            try:
                # The surviving replica routes to itself once elected.
                while True:
                    r = await c.call("QueryRoute", spb.QueryRouteRequest(topic=resource("PF")))
                    if r.status.code == pb.OK and r.message_queues and \
                            r.message_queues[0].broker.endpoints.addresses[0].port == \
                            int(grpc_of[other].rsplit(":", 1)[1]):
                        break
                    assert time.monotonic() - killed_at < 20, r
                    await asyncio.sleep(0.3)
                # Handles of the old master are good on the new one.
                assert (await ack(c, "G", "PF", out[5])).code == pb.OK
                return await drain(c, "G", "PF", killed_at + 30)
            finally:
                await c.close()
        got = run_async(after(), timeout=120)
        acked = {m.body for m in out[:6]}
        bodies = [m.body for m in got]
        assert not acked & set(bodies), "an acked message came back"
        assert sorted(bodies) == sorted({b"f%d" % i for i in range(20)} - acked)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
