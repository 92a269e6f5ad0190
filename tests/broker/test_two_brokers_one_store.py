"""A second ``rocketq standalone`` or ``rocketq broker`` on a store another one runs on is
refused before it binds, registers or reads a file of it: one line on stderr naming the
directory and the other process, a non-zero exit, and the first one serves on."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rocketq import Message, Producer, PullConsumer, SendStatus

from ..cli.test_cli import SMALL_FILES, free_port, small_conf, start, stop
from ..conftest import fetch_route, wait_for

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]


def run_refused(args: list[str], cwd=None) -> subprocess.CompletedProcess[str]:
    """Run ``rocketq <args>``, which must give up by itself, within 30 s."""
    started = time.monotonic()
    done = subprocess.run([*ROCKETQ, *args], capture_output=True, text=True, timeout=30,
                          cwd=cwd)
    assert time.monotonic() - started < 15, "the refusal took too long"
    return done


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], directory, pid: int) -> None:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("rocketq: ") and "in use by process" in line
    assert f"{directory}" in line and f"process {pid} " in line


def send_and_pull(namesrv: str, topic: str, count: int = 5) -> None:
    """The broker behind ``namesrv`` takes messages and gives them back."""
    with Producer("pg", namesrv=namesrv) as producer:
        sent = [producer.send(Message(topic, b"m%d" % i)) for i in range(count)]
    assert {r.status for r in sent} == {SendStatus.SEND_OK}
    with PullConsumer("pc", namesrv=namesrv, from_where="first") as consumer:
        consumer.subscribe(topic)
        consumer.start()
        got: list = []
        assert wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= count, 15)
    assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)


def test_a_second_standalone_on_the_same_data_dir_is_refused_and_the_first_serves(tmp_path):
    # Both on the default data directory, ./rocketq-data, as two users in one directory
    # would start them; other ports.
    conf = small_conf(tmp_path)
    ns_port = free_port()
    first = subprocess.Popen(
        [*ROCKETQ, "standalone", "--namesrv-port", str(ns_port), "--broker-port",
         str(free_port()), "-c", conf], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    namesrv = f"127.0.0.1:{ns_port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = first.stdout.readline()
            if "connect clients" in line or not line:
                break
        assert "connect clients" in line
        store = tmp_path / "rocketq-data"
        send_and_pull(namesrv, "BeforeTheSecond")
        commitlog = sorted((store / "commitlog").iterdir())
        abort_mtime = os.stat(store / "abort").st_mtime_ns
        done = run_refused(["standalone", "--namesrv-port", str(free_port()),
                            "--broker-port", str(free_port()), "-c", conf], cwd=tmp_path)
        assert_one_line_refusal(done, store, first.pid)
        assert first.poll() is None
        # It read and wrote nothing of the first one's store.
        assert os.stat(store / "abort").st_mtime_ns == abort_mtime
        assert sorted((store / "commitlog").iterdir()) == commitlog
        send_and_pull(namesrv, "AfterTheSecond")
    finally:
        code = stop(first)
    assert code == 0


def test_a_second_broker_on_the_same_store_is_refused_before_it_registers(tmp_path):
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns = start(["namesrv", "--port", str(ns_port)], "listening")
    store = tmp_path / "store"
    confs = []
    for i, name in enumerate(("broker-a", "broker-b")):
        # Another name, so that only the store is shared: the NameServer would take it.
        conf = tmp_path / f"b{i}.conf"
        conf.write_text(f"brokerName={name}\nnamesrvAddr={namesrv}\nlistenPort={free_port()}\n"
                        f"storePathRootDir={store}\n{SMALL_FILES}")
        confs.append(conf)
    first = start(["broker", "-c", str(confs[0])], "listening")
    try:
        done = run_refused(["broker", "-c", str(confs[1])])
        assert_one_line_refusal(done, store, first.pid)
        assert "broker broker-a" in done.stderr  # the holder says what it is
        # Not registered: the NameServer knows of broker-a alone.
        route = fetch_route(namesrv, "TBW102")
        assert set(route.broker_addrs) == {"broker-a"}
        send_and_pull(namesrv, "StillServed")
    finally:
        stop(first)
        stop(ns)
    # The first one stopped: the store is free again.
    again = start(["broker", "-c", str(confs[1]), "--namesrv", "127.0.0.1:1"], "listening")
    assert stop(again) == 0


def test_a_broker_whose_start_fails_half_way_lets_its_store_go(servers, tmp_path, caplog):
    """A start that fails after the store opened (here the HA port is taken) closes the store
    and releases its lock: the same store opens at once in the same process, with no
    traceback of the clean-up."""
    import socket

    import pytest

    from rocketq.broker import Broker
    from rocketq.broker.config import load_broker_conf

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    values = {"storePathRootDir": str(tmp_path / "store"), "namesrvAddr": servers.namesrv,
              "brokerName": "broker-half",
              "listenPort": 0, "mappedFileSizeCommitLog": 8 << 20, "maxHashSlotNum": 4096,
              "maxIndexNum": 16384}
    try:
        with pytest.raises(OSError):
            servers.call(Broker(*load_broker_conf(
                {**values, "haListenPort": busy.getsockname()[1]})).start())
    finally:
        busy.close()
    assert "cleaning up after a failed start" not in caplog.text
    broker = servers.call(_started(Broker(*load_broker_conf({**values, "haListenPort": 0}))))
    try:
        assert broker.store is not None and broker.store.commitlog.max_offset == 0
    finally:
        servers.call(broker.stop())


async def _started(broker):
    await broker.start()
    return broker


def test_a_second_broker_object_on_a_held_store_is_refused_before_writing(servers, tmp_path):
    """Broker(...) in-process takes the store root's lock before its tables write anything:
    a second one on the store of a running broker (here with another name and no
    auto-created topics, which would rewrite topics.json) is refused at construction and
    leaves the first one's files as they were."""
    import pytest

    from rocketq.broker import Broker
    from rocketq.broker.config import load_broker_conf
    from rocketq.store.errors import StoreLockedError

    first = servers.brokers[0]
    root = first.store_config.storePathRootDir
    config_dir = os.path.join(root, "config")
    before = {name: open(os.path.join(config_dir, name), "rb").read()
              for name in sorted(os.listdir(config_dir))}
    with pytest.raises(StoreLockedError) as refused:
        Broker(*load_broker_conf({"storePathRootDir": root, "brokerName": "broker-z",
                                  "autoCreateTopicEnable": "false", "listenPort": 0}))
    assert root in str(refused.value) and f"process {os.getpid()} " in str(refused.value)
    after = {name: open(os.path.join(config_dir, name), "rb").read()
             for name in sorted(os.listdir(config_dir))}
    assert after == before
    send_and_pull(servers.namesrv, "StillServed", 2)
