"""The ``rocketq`` command as a user runs it: real processes, signals, SIGKILL."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import orjson
import pytest

from rocketq import Message, Producer, PullConsumer
from rocketq.cli import main

from ..conftest import fetch_route, wait_for

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: haListenPort=0: a master's HA port on any free port, not the one after listenPort (which
#: another test's client may hold).
SMALL_FILES = ("mappedFileSizeCommitLog=8388608\nmaxHashSlotNum=4096\nmaxIndexNum=16384\n"
               "mappedFileSizeConsumeQueue=60000\nhaListenPort=0\n")


def small_conf(directory, extra: str = "") -> str:
    """A broker.conf with small store files, so tests do not preallocate gigabytes."""
    path = directory / "small-broker.conf"
    path.write_text(SMALL_FILES + extra)
    return str(path)


def start(args, ready: str, timeout: float = 20) -> subprocess.Popen:
    """Start ``rocketq *args`` and wait for ``ready`` on its stdout.

    ``args`` may be a function that picks fresh free ports each time it is called: a port
    found free can be taken by another test's client before the child binds it, so a child
    that fails with "address already in use" is started again on new ports (three tries).
    """
    for attempt in range(3):
        argv = args() if callable(args) else args
        proc = subprocess.Popen([*ROCKETQ, *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if ready in line:
                return proc
            if proc.poll() is not None:
                break
        proc.kill()
        error = proc.stderr.read()[-2000:]
        if not (callable(args) and "already in use" in error and attempt < 2):
            raise AssertionError(f"{argv} did not start: {error}")
    raise AssertionError("unreachable")


def stop(proc: subprocess.Popen, sig=signal.SIGINT) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_help_everywhere(capsys):
    for args in (["--help"], ["standalone", "--help"], ["broker", "--help"],
                 ["namesrv", "--help"], ["admin", "--help"], ["admin", "topic", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 0
    assert "standalone" in capsys.readouterr().out


@pytest.mark.slow
def test_standalone_serves_admin_and_stops_cleanly_on_ctrl_c(tmp_path, capsys):
    ns_port, broker_port = free_port(), free_port()
    data = tmp_path / "data"
    proc = start(["standalone", "--data-dir", str(data), "--namesrv-port", str(ns_port),
                  "--broker-port", str(broker_port), "-c", small_conf(tmp_path)],
                 "connect clients")
    namesrv = f"127.0.0.1:{ns_port}"
    try:
        assert (data / "abort").exists()  # running
        admin = ["admin", "--namesrv", namesrv]
        assert main([*admin, "topic", "create", "Cli", "--queues", "3"]) == 0
        assert main([*admin, "send", "Cli", "hi there", "--tags", "t", "--keys", "key-1",
                     "--count", "2"]) == 0
        out = capsys.readouterr().out
        assert out.count("SEND_OK") == 2
        assert main([*admin, "topic", "list"]) == 0
        assert "Cli" in capsys.readouterr().out.split()
        assert main([*admin, "topic", "route", "Cli"]) == 0
        route = orjson.loads(capsys.readouterr().out)
        assert route["queueDatas"][0]["writeQueueNums"] == 3
        assert main([*admin, "topic", "status", "Cli"]) == 0
        assert len(capsys.readouterr().out.strip().splitlines()) == 4
        assert main([*admin, "message", "key", "Cli", "key-1"]) == 0
        assert '"body": "hi there"' in capsys.readouterr().out
        assert main([*admin, "tail", "Cli", "--from", "first", "--count", "2",
                     "--timeout", "10"]) == 0
        assert capsys.readouterr().out.count("hi there") == 2
        assert main([*admin, "cluster", "list"]) == 0
        assert f"127.0.0.1:{broker_port}" in capsys.readouterr().out
        with PullConsumer("cli-group", namesrv=namesrv, from_where="first") as consumer:
            consumer.subscribe("Cli")
            consumer.start()
            got = []
            wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 2)
            consumer.commit()
        assert main([*admin, "consumer", "progress", "cli-group"]) == 0
        assert "total lag: 0" in capsys.readouterr().out
        assert main([*admin, "topic", "delete", "Cli"]) == 0
    finally:
        code = stop(proc)
    assert code == 0
    assert not (data / "abort").exists()  # clean shutdown
    assert (data / "config" / "topics.json").exists()


@pytest.mark.slow
def test_broker_killed_with_sigkill_leaves_routes_and_recovers(tmp_path):
    ns_port, broker_port = free_port(), free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns = start(["namesrv", "--port", str(ns_port)], "listening")
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerClusterName=TestCluster\nbrokerName=broker-x\n"
                    f"namesrvAddr={namesrv}\nlistenPort={broker_port}\n"
                    f"storePathRootDir={tmp_path / 'store'}\n{SMALL_FILES}"
                    "flushDiskType=ASYNC_FLUSH\n")
    broker = start(["broker", "-c", str(conf)], "listening")
    try:
        with Producer("pg", namesrv=namesrv) as producer:
            sent = [producer.send(Message("Survive", b"m%d" % i)) for i in range(50)]
        broker.send_signal(signal.SIGKILL)
        broker.wait(10)
        # The NameServer drops the dead broker (its connection closed; the 120 s expiry
        # would drop it too).
        assert wait_for(lambda: fetch_route(namesrv, "Survive") is None, 10)
        broker = start(["broker", "-c", str(conf)], "listening")
        assert (tmp_path / "store" / "abort").exists()
        with PullConsumer("pc", namesrv=namesrv, from_where="first") as consumer:
            consumer.subscribe("Survive")
            consumer.start()
            got = []
            wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 50, 15)
        assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)
    finally:
        stop(broker)
        stop(ns)


def test_bad_config_is_reported(tmp_path, capsys):
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskType=SOMETIMES\n")
    assert main(["broker", "-c", str(conf)]) == 1
    assert "flushDiskType" in capsys.readouterr().err




def test_a_standalone_whose_dashboard_fails_to_stop_still_stops_the_rest(tmp_path,
                                                                        monkeypatch):
    import asyncio

    import rocketq.cli.dashboard
    import rocketq.cli.standalone
    from rocketq.cli import build_parser

    stops: list[asyncio.Event] = []
    started: list = []

    def stop_event() -> asyncio.Event:
        stops.append(asyncio.Event())
        return stops[-1]

    class Failing:
        async def stop(self) -> None:
            raise RuntimeError("the dashboard would not stop")

    async def start_dashboard(args, broker, namesrv):
        started.append((broker, namesrv))
        stops[0].set()  # as Ctrl-C would, once all is up
        return Failing()

    monkeypatch.setattr(rocketq.cli.standalone, "_stop_on_signal", stop_event)
    monkeypatch.setattr(rocketq.cli.dashboard, "start_for_standalone", start_dashboard)
    args = build_parser().parse_args([
        "standalone", "--data-dir", str(tmp_path / "data"), "--namesrv-port", "0",
        "--broker-port", "0", "--grpc-port", "0"])
    with pytest.raises(RuntimeError, match="would not stop"):
        asyncio.run(args.func(args))
    [(broker, namesrv)] = started
    for addr in (broker.address, namesrv):  # both stopped all the same
        host, port = addr.rsplit(":", 1)
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), 1).close()
    from rocketq.store.lock import StoreLock

    with StoreLock.acquire(str(tmp_path / "data"), "test"):  # the store let go of its files
        pass
