"""Replication between real processes: brokers started with ``rocketq broker`` and killed
with SIGKILL."""

from __future__ import annotations

import signal

import pytest

from rocketq import Message, Producer, PullConsumer

from ..cli.test_cli import SMALL_FILES, free_port, start, stop
from ..conftest import wait_for


def broker_conf(tmp_path, name: str, namesrv: str, extra: str) -> str:
    path = tmp_path / f"{name}.conf"
    path.write_text(f"brokerName=broker-a\nnamesrvAddr={namesrv}\nlistenPort={free_port()}\n"
                    f"storePathRootDir={tmp_path / name}\n{SMALL_FILES}"
                    f"haSendHeartbeatInterval=300\n{extra}")
    return str(path)


def commitlog(tmp_path, name: str) -> bytes:
    files = sorted((tmp_path / name / "commitlog").iterdir())
    return b"".join(f.read_bytes() for f in files).rstrip(b"\0")


@pytest.mark.slow
def test_killed_slave_catches_up_and_serves_when_the_master_is_killed(tmp_path):
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns = start(["namesrv", "--port", str(ns_port)], "listening")
    ha_port = free_port()
    master_conf = broker_conf(tmp_path, "master", namesrv, f"haListenPort={ha_port}\n")
    slave_conf = broker_conf(tmp_path, "slave", namesrv,
                             f"brokerId=1\nbrokerRole=SLAVE\nhaMasterAddress=127.0.0.1:{ha_port}\n")
    master = start(["broker", "-c", master_conf], "listening")
    slave = start(["broker", "-c", slave_conf], "listening")
    try:
        sent = []
        with Producer("pg", namesrv=namesrv) as producer:
            sent += [producer.send(Message("Kept", b"a%d" % i)) for i in range(100)]
            slave.send_signal(signal.SIGKILL)
            slave.wait(10)
            sent += [producer.send(Message("Kept", b"b%d" % i)) for i in range(100)]
        slave = start(["broker", "-c", slave_conf], "listening")
        # The restarted slave catches up: its CommitLog is the master's again.
        assert wait_for(lambda: commitlog(tmp_path, "slave") == commitlog(tmp_path, "master"),
                        20)
        master.send_signal(signal.SIGKILL)
        master.wait(10)
        # With the master gone, a consumer reads everything from the slave.
        with PullConsumer("reader", namesrv=namesrv, from_where="first") as consumer:
            consumer.subscribe("Kept")
            consumer.start()
            got = []
            wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= len(sent), 30)
        assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)
    finally:
        stop(slave)
        stop(master)
        stop(ns)


@pytest.mark.slow
def test_a_slave_on_an_empty_disk_catches_up_with_a_master_holding_data(tmp_path):
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns = start(["namesrv", "--port", str(ns_port)], "listening")
    ha_port = free_port()
    master = start(["broker", "-c", broker_conf(tmp_path, "master", namesrv,
                                                f"haListenPort={ha_port}\n")], "listening")
    slave = None
    try:
        with Producer("pg", namesrv=namesrv) as producer:
            for i in range(300):
                producer.send(Message("Before", b"%d-" % i + b"p" * 300))
        # A new slave with nothing asks from offset 0: the master starts it at its last
        # CommitLog file (here the only one), as RocketMQ's does.
        slave = start(["broker", "-c", broker_conf(
            tmp_path, "slave", namesrv,
            f"brokerId=1\nbrokerRole=SLAVE\nhaMasterAddress=127.0.0.1:{ha_port}\n")],
            "listening")
        assert wait_for(lambda: (tmp_path / "slave" / "commitlog").exists()
                        and commitlog(tmp_path, "slave") == commitlog(tmp_path, "master"), 20)
    finally:
        if slave is not None:
            stop(slave)
        stop(master)
        stop(ns)
