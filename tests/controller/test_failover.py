"""Automatic failover between real processes: a controller, a NameServer and three brokers in
controller mode (every SyncStateSet member acknowledges each send, SYNC_FLUSH), with the
master killed by SIGKILL while a producer sends without pause."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time

import orjson
import pytest

from rocketq import Message, Producer, PullConsumer, SendStatus
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient, run

from ..cli.test_cli import SMALL_FILES, free_port, start, stop
from ..conftest import fetch_route, wait_for
from .conftest import port_pair


def replica_info(controller: str) -> dict:
    async def go():
        client = RemotingClient()
        try:
            r = await client.invoke(controller, RemotingCommand.request(
                RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"}), 3)
        finally:
            await client.close()
        if r.code != ResponseCode.SUCCESS:
            return {}
        return {**r.ext_fields, **orjson.loads(r.body)}
    return run(go())


class ControlledCluster:
    """A NameServer, controller nodes (Raft among ``controllers`` of them, or one on
    ``etcd``) and a broker group in controller mode, each its own process."""

    def __init__(self, tmp_path, replicas: int = 3, extra: str = "", controllers: int = 1,
                 etcd: str | None = None) -> None:
        self.tmp_path = tmp_path
        ns_port = free_port()
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.procs = [start(["namesrv", "--port", str(ns_port)], "listening")]
        ports = [port_pair() for _ in range(controllers)]
        self.controllers = [f"127.0.0.1:{p}" for p in ports]
        self.controller = self.controllers[0]
        #: controller address -> process
        self.controller_procs = {}
        for addr, port in zip(self.controllers, ports, strict=True):
            how = (["--etcd", etcd] if etcd else
                   ["--peers", ",".join(self.controllers)] if controllers > 1 else [])
            self.controller_procs[addr] = start(["controller", "--port", str(port), *how],
                                                "listening")
        self.procs += list(self.controller_procs.values())
        self.brokers: dict[str, object] = {}  # address -> process
        self.dirs: dict[str, object] = {}  # address -> store directory
        self.confs = []
        for i in range(replicas):
            port = free_port()
            conf = tmp_path / f"b{i}.conf"
            conf.write_text(
                f"brokerName=broker-a\nnamesrvAddr={self.namesrv}\nlistenPort={port}\n"
                f"storePathRootDir={tmp_path / f'b{i}'}\n{SMALL_FILES}"
                f"enableControllerMode=true\ncontrollerAddr={';'.join(self.controllers)}\n"
                f"allAckInSyncStateSet=true\nflushDiskType=SYNC_FLUSH\n{extra}")
            self.confs.append(conf)
            self.dirs[f"127.0.0.1:{port}"] = tmp_path / f"b{i}"
            self.brokers[f"127.0.0.1:{port}"] = start(["broker", "-c", str(conf)],
                                                      "listening")

    def replica_info(self) -> dict:
        """The group as the first controller that answers sees it."""
        for addr in self.controllers:
            if self.controller_procs[addr].poll() is None:
                info = replica_info(addr)
                if info:
                    return info
        return {}

    def master(self) -> str | None:
        route = fetch_route(self.namesrv, "TBW102")
        if route is None:
            return None
        return route.broker_addrs.get("broker-a", {}).get(0) or \
            route.broker_addrs.get("broker-a", {}).get("0")

    def commitlog(self, addr: str) -> bytes:
        files = sorted((self.dirs[addr] / "commitlog").iterdir())
        return b"".join(f.read_bytes() for f in files).rstrip(b"\0")

    def close(self) -> None:
        for proc in list(self.brokers.values()) + self.procs[::-1]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
            stop(proc)


class Sender:
    """Sends without pause from a thread, keeping the acknowledged message ids."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.acked: list[str] = []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(namesrv, topic))
        self.thread.start()

    def _run(self, namesrv: str, topic: str) -> None:
        with Producer("pg", namesrv=namesrv, send_timeout=2, retries=1) as producer:
            for i in range(20_000):
                if self.halt.is_set():
                    return
                try:
                    r = producer.send(Message(topic, b"m%d" % i))
                except Exception:
                    time.sleep(0.05)
                    continue
                if r.status is SendStatus.SEND_OK:
                    self.acked.append(r.msg_id)

    def stop(self) -> None:
        self.halt.set()
        self.thread.join(30)


def read_ids(namesrv: str, topic: str, expected: int, group: str = "reader") -> list[str]:
    """What ``group`` reads of ``topic`` (up to ``expected``), committing its offsets."""
    got = []
    with PullConsumer(group, namesrv=namesrv, from_where="first") as consumer:
        consumer.subscribe(topic)
        consumer.start()
        wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= expected, 30)
        consumer.commit()
    READ_AT.clear()
    for m in got:
        READ_AT.setdefault(m.msg_id, []).append((m.queue_id, m.queue_offset, m.broker_name))
    return [m.msg_id for m in got]


#: Where read_ids found each message: (queue, offset, broker) per time read.
READ_AT: dict[str, list[tuple[int, int, str]]] = {}


def assert_read_once(namesrv: str, topic: str, acked: list[str]) -> None:
    """A new group reads every acknowledged message of ``topic``, and none twice."""
    ids = read_ids(namesrv, topic, len(acked))
    assert not set(acked) - set(ids), f"{len(set(acked) - set(ids))} acknowledged lost"
    twice = collections.Counter(ids) - collections.Counter(set(ids))
    assert not twice, f"read twice: {READ_AT and [READ_AT[i] for i in twice]}"


@pytest.mark.slow
def test_a_paused_master_is_replaced_then_rejoins_as_a_slave(tmp_path):
    c = ControlledCluster(tmp_path)
    sender = None
    try:
        assert wait_for(lambda: len(replica_info(c.controller).get("syncStateSet", [])) == 3,
                        30)
        old = c.master()
        sender = Sender(c.namesrv, "Paused")
        assert wait_for(lambda: len(sender.acked) >= 300, 30)
        with Producer("fresh", namesrv=c.namesrv, send_timeout=2) as producer:
            # A topic the master creates just before it stops: its config never reaches the
            # slaves (they copy it every 3 s), its message does.
            assert producer.send(Message("Fresh", b"first")).status is SendStatus.SEND_OK
            c.brokers[old].send_signal(signal.SIGSTOP)  # past its lease: it cannot renew
            assert wait_for(lambda: replica_info(c.controller).get("masterEpoch") == "2", 15)
            assert wait_for(lambda: c.master() not in (None, old), 15)
            count = len(sender.acked)
            assert wait_for(lambda: len(sender.acked) >= count + 200, 20)

            def fresh_sends() -> bool:
                try:
                    return producer.send(Message("Fresh", b"next")).status \
                        is SendStatus.SEND_OK
                except Exception:
                    return False
            # The new master routes it from the queues in its replicated log.
            assert wait_for(fresh_sends, 5)
        c.brokers[old].send_signal(signal.SIGCONT)
        # It takes no write on its stale lease, learns of epoch 2 and follows the new master
        # (after cutting anything the new master does not share): the two logs become one.
        new = c.master()
        assert wait_for(lambda: old in fetch_route(c.namesrv, "Paused").broker_addrs.get(
            "broker-a", {}).values() and c.master() == new, 20)
        sender.stop()
        assert wait_for(lambda: c.commitlog(old) == c.commitlog(new), 20)
        assert_read_once(c.namesrv, "Paused", sender.acked)
        with PullConsumer("fresh-reader", namesrv=c.namesrv, from_where="first") as consumer:
            consumer.subscribe("Fresh")
            consumer.start()
            bodies: list[bytes] = []
            assert wait_for(lambda: bodies.extend(m.body for m in consumer.poll(0.2))
                            or {b"first", b"next"} <= set(bodies), 20)
    finally:
        if sender is not None:
            sender.stop()
        c.close()


@pytest.mark.slow
def test_a_master_restarted_within_its_lease_keeps_its_epoch_and_its_slaves(tmp_path):
    # The HA port is chosen anew at each start (haListenPort=0): the slaves must follow the
    # restarted master to its new one.
    c = ControlledCluster(tmp_path)
    sender = None
    try:
        assert wait_for(lambda: len(c.replica_info().get("syncStateSet", [])) == 3, 30)
        master = c.master()
        index = list(c.brokers).index(master)
        sender = Sender(c.namesrv, "Restart")
        assert wait_for(lambda: len(sender.acked) >= 200, 30)
        c.brokers[master].kill()
        c.brokers[master].wait()
        c.brokers[master] = start(["broker", "-c", str(c.confs[index])], "listening")
        count = len(sender.acked)
        assert wait_for(lambda: len(sender.acked) >= count + 200, 20)
        info = c.replica_info()
        if info["masterEpoch"] == "1":  # back before the controller gave up on it
            assert c.master() == master
            assert wait_for(lambda: len(c.replica_info()["syncStateSet"]) == 3, 10)
        epochs = (c.dirs[master] / "epochFileCheckpoint").read_text().splitlines()
        assert epochs[2] == "1-0"  # where epoch 1 began, kept across the restart
        sender.stop()
        assert_read_once(c.namesrv, "Restart", sender.acked)
    finally:
        if sender is not None:
            sender.stop()
        c.close()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["raft", "etcd"])
def test_a_killed_master_is_replaced_within_seconds_and_loses_no_acknowledged_message(
        tmp_path, engine, request, capsys):
    etcd = request.getfixturevalue("etcd") if engine == "etcd" else None
    c = ControlledCluster(tmp_path, etcd=etcd)
    try:
        assert wait_for(lambda: len(replica_info(c.controller).get("syncStateSet", [])) == 3,
                        30), replica_info(c.controller)
        old_master = c.master()
        assert old_master in c.brokers
        acked: list[str] = []
        failures: list[float] = []
        halt = threading.Event()
        killed_at: list[float] = []

        def produce() -> None:
            with Producer("pg", namesrv=c.namesrv, send_timeout=2, retries=1) as producer:
                for i in range(20_000):
                    if halt.is_set():
                        return
                    try:
                        r = producer.send(Message("Failover", b"m%d" % i))
                    except Exception:
                        failures.append(time.monotonic())
                        time.sleep(0.05)
                        continue
                    if r.status is SendStatus.SEND_OK:
                        acked.append(r.msg_id)
                        if killed_at and len(killed_at) == 1:
                            killed_at.append(time.monotonic())  # the first after the kill

        # A group consuming all along, through the failover: none of what it reads twice.
        live: list[str] = []
        live_halt = threading.Event()

        def consume() -> None:
            with PullConsumer("live", namesrv=c.namesrv, from_where="first") as consumer:
                consumer.subscribe("Failover")
                consumer.start()
                while not live_halt.is_set():
                    live.extend(m.msg_id for m in consumer.poll(0.2))

        sender = threading.Thread(target=produce)
        sender.start()
        reader = threading.Thread(target=consume)
        reader.start()
        try:
            assert wait_for(lambda: len(acked) >= 300, 30)
            # A group reads what is there and commits; its offsets reach the slaves with
            # their next metadata copy (every 3 s in controller mode).
            before = read_ids(c.namesrv, "Failover", len(acked), group="cg")
            assert len(before) >= 300
            time.sleep(4)
            c.brokers[old_master].send_signal(signal.SIGKILL)
            killed_at.append(time.monotonic())
            assert wait_for(lambda: len(killed_at) == 2, 20), "no send succeeded after the kill"
            new_master = c.master()
            count = len(acked)
            assert wait_for(lambda: len(acked) >= count + 200, 20)
        finally:
            halt.set()
            sender.join(30)
            wait_for(lambda: set(live) >= set(acked), 30)
            live_halt.set()
            reader.join(30)
        assert not set(acked) - set(live), "the live group missed acknowledged messages"
        assert len(live) == len(set(live)), "the live group read a message twice"
        failover = killed_at[1] - killed_at[0]
        assert new_master != old_master
        assert failover < 5, f"the new master took {failover:.1f} s"
        info = c.replica_info()
        assert info["masterEpoch"] == "2"
        got = []
        with PullConsumer("reader", namesrv=c.namesrv, from_where="first") as consumer:
            consumer.subscribe("Failover")
            consumer.start()
            wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= len(acked), 30)
        ids = [m.msg_id for m in got]
        assert not set(acked) - set(ids), f"{len(set(acked) - set(ids))} acknowledged lost"
        assert len(ids) == len(set(ids)), "a message was read twice"
        # The group's offsets survived: it goes on after what it had read, not from the start.
        after = read_ids(c.namesrv, "Failover", len(acked) - len(before), group="cg")
        assert not set(after) & set(before), "the group read again what it had committed"
        assert set(before) | set(after) >= set(acked)
        # The admin view: the new master (id 0) and the live slave, both at epoch 2.
        from rocketq.cli import main

        def admin_rows() -> set[tuple[bool, str, str]]:
            capsys.readouterr()
            assert main(["admin", "--namesrv", c.namesrv, "cluster", "list"]) == 0
            rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
            return {(int(r[2]) == 0, r[4], r[5]) for r in rows}
        assert wait_for(lambda: admin_rows() == {(True, "SYNC_MASTER", "2"),
                                                 (False, "SLAVE", "2")}, 5), admin_rows()
    finally:
        c.close()


@pytest.mark.slow
def test_rocketq_cluster_starts_everything_fails_over_and_stops_on_ctrl_c(tmp_path):
    extra = tmp_path / "extra.conf"
    extra.write_text(SMALL_FILES.replace("haListenPort=0\n", ""))
    ns_port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketq.cli", "cluster", "--replicas", "2", "--data-dir",
         str(tmp_path / "data"), "--namesrv-port", str(ns_port), "-c", str(extra)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            if line.startswith("Controller "):
                controller = line.split()[1]
            if " replica " in line:  # "broker-a replica 0: 127.0.0.1:PORT (pid N, ...)"
                addr = line.split(": ", 1)[1].split(" ", 1)[0]
                pids[addr] = int(line.split("pid ", 1)[1].split(",", 1)[0])
            if "Ctrl-C stops all" in line:
                break
        namesrv = f"127.0.0.1:{ns_port}"
        assert len(pids) == 2
        with Producer("pg", namesrv=namesrv, send_timeout=2) as producer:
            assert wait_for(lambda: producer.send(Message("Try", b"x")).status
                            is SendStatus.SEND_OK, 20)
            # Once the slave is in sync, it can take over.
            assert wait_for(lambda: len(replica_info(controller).get("syncStateSet", [])) == 2,
                            30)
            route = fetch_route(namesrv, "Try").broker_addrs["broker-a"]
            master = route.get(0) or route.get("0")
            os.kill(pids[master], signal.SIGKILL)
            began = time.monotonic()

            def sends() -> bool:
                try:
                    return producer.send(Message("Try", b"y")).status is SendStatus.SEND_OK
                except Exception:
                    return False
            assert wait_for(sends, 15)
            assert time.monotonic() - began < 8
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        for pid in pids.values():  # every child is gone
            assert not os.path.exists(f"/proc/{pid}") or \
                open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_controller_node_killed_changes_nothing_for_the_brokers(tmp_path):
    c = ControlledCluster(tmp_path, controllers=3)
    sender = None
    try:
        assert wait_for(lambda: len(c.replica_info().get("syncStateSet", [])) == 3, 30)
        master = c.master()
        leader = None

        def find_leader():
            nonlocal leader
            for addr in c.controllers:
                async def ask(a=addr):
                    client = RemotingClient()
                    try:
                        return await client.invoke(a, RemotingCommand.request(
                            RequestCode.CONTROLLER_GET_METADATA_INFO), 3)
                    finally:
                        await client.close()
                r = run(ask())
                if r.ext_fields.get("isLeader") in ("true", "True"):
                    leader = addr
                    return True
            return False
        assert wait_for(find_leader, 10)
        sender = Sender(c.namesrv, "Steady")
        assert wait_for(lambda: len(sender.acked) >= 200, 30)
        c.controller_procs[leader].send_signal(signal.SIGKILL)  # the Raft leader
        count = len(sender.acked)
        # Raft elects another controller leader well within the master's lease: the master
        # keeps renewing it and keeps taking sends, and no broker election happens.
        assert wait_for(lambda: len(sender.acked) >= count + 500, 30)
        assert c.master() == master
        assert wait_for(c.replica_info, 10)  # only the leader answers; one leads again
        info = c.replica_info()
        assert info["masterEpoch"] == "1" and len(info["syncStateSet"]) == 3
    finally:
        if sender is not None:
            sender.stop()
        c.close()


@pytest.mark.slow
def test_a_controller_inside_the_nameserver_elects_a_master(tmp_path):
    ns_port, ctrl_port = free_port(), port_pair()
    namesrv = f"127.0.0.1:{ns_port}"
    ns = start(["namesrv", "--port", str(ns_port), "--enable-controller", "--controller-port",
                str(ctrl_port)], "listening")
    brokers = []
    try:
        for i in range(2):
            conf = tmp_path / f"b{i}.conf"
            conf.write_text(
                f"brokerName=broker-a\nnamesrvAddr={namesrv}\nlistenPort={free_port()}\n"
                f"storePathRootDir={tmp_path / f'b{i}'}\n{SMALL_FILES}"
                f"enableControllerMode=true\ncontrollerAddr=127.0.0.1:{ctrl_port}\n")
            brokers.append(start(["broker", "-c", str(conf)], "listening"))
        info = replica_info(f"127.0.0.1:{ctrl_port}")
        assert info["masterBrokerId"] == "1" and info["masterEpoch"] == "1"
        with Producer("pg", namesrv=namesrv) as producer:
            assert producer.send(Message("InNamesrv", b"x")).status is SendStatus.SEND_OK
    finally:
        for proc in brokers + [ns]:
            stop(proc)


@pytest.mark.slow
def test_a_controller_restarted_without_its_state_goes_on_above_the_brokers_epochs(tmp_path):
    c = ControlledCluster(tmp_path, replicas=2)
    sender = None
    try:
        assert wait_for(lambda: len(c.replica_info().get("syncStateSet", [])) == 2, 30)
        sender = Sender(c.namesrv, "Amnesia")
        assert wait_for(lambda: len(sender.acked) >= 100, 30)
        # Make the held epoch 2 by one failover, so a fresh controller's 1 would be stale.
        old = c.master()
        c.brokers[old].kill()
        c.brokers[old].wait()
        assert wait_for(lambda: c.replica_info().get("masterEpoch") == "2", 15)
        index = list(c.brokers).index(old)
        c.brokers[old] = start(["broker", "-c", str(c.confs[index])], "listening")
        assert wait_for(lambda: len(c.replica_info().get("syncStateSet", [])) == 2, 30)
        proc = c.controller_procs[c.controller]
        proc.kill()  # one node, no data dir: everything it knew is gone
        proc.wait()
        port = c.controller.rsplit(":", 1)[1]
        c.controller_procs[c.controller] = start(["controller", "--port", port], "listening")
        c.procs.append(c.controller_procs[c.controller])
        # The brokers tell it their epochs: it elects above them, the newest log first.
        assert wait_for(lambda: int(c.replica_info().get("masterEpoch", 0)) > 2, 20)
        count = len(sender.acked)
        assert wait_for(lambda: len(sender.acked) >= count + 100, 20)
        # Either may lead now (the master's fenced writes stop, so both logs end alike),
        # and nothing acknowledged is lost.
        assert c.master() in c.brokers
        sender.stop()
        assert_read_once(c.namesrv, "Amnesia", sender.acked)
    finally:
        if sender is not None:
            sender.stop()
        c.close()


@pytest.mark.slow
def test_a_forged_role_notice_changes_nothing(tmp_path):
    """NOTIFY_BROKER_ROLE_CHANGED sent to the master by a stranger, naming a huge epoch and a
    master of its own whose epoch file would have the broker cut its whole CommitLog: the
    broker asks its controller instead, stays master and keeps every byte."""
    from rocketq.remoting import RemotingServer

    asked = []

    def fake_master(conn, cmd):  # what a rogue "master" would answer
        asked.append(cmd.code)
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(
            {"epochList": [{"epoch": 1 << 40, "startOffset": 0}], "maxOffset": 0}))

    c = ControlledCluster(tmp_path, replicas=2)
    try:
        assert wait_for(lambda: len(replica_info(c.controller).get("syncStateSet", [])) == 2,
                        30)
        master = c.master()
        with Producer("forged-notice", namesrv=c.namesrv) as producer:
            for i in range(20):
                assert producer.send(Message("Forged", b"%d" % i)).status is SendStatus.SEND_OK
            before = c.commitlog(master)

            async def forge() -> None:
                import asyncio

                server = RemotingServer(fake_master, "127.0.0.1", 0)
                await server.start()
                rogue = server.address
                client = RemotingClient()
                try:
                    await client.invoke_oneway(master, RemotingCommand.request(
                        RequestCode.NOTIFY_BROKER_ROLE_CHANGED, {
                            "masterBrokerId": 9, "masterAddress": rogue,
                            "masterHaAddress": rogue, "masterEpoch": 1 << 40,
                            "syncStateSetEpoch": 1 << 40, "brokerId": 1}))
                    await asyncio.sleep(3)  # more than a poll and a role change take
                finally:
                    await client.close()
                    await server.stop()

            run(forge())
            assert asked == [], "the broker asked the forged master for its epochs"
            assert c.master() == master
            assert replica_info(c.controller)["masterEpoch"] == "1"
            assert producer.send(Message("Forged", b"after")).status is SendStatus.SEND_OK
            assert c.commitlog(master)[:len(before)] == before
    finally:
        c.close()
