"""rocketq.testing as a user's tests meet it: the fixtures (this suite loads the plugin through
its entry point like any project), the helpers, start errors and a clean stop."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import pytest

import rocketq.testing
from rocketq import ClientError, Message, Producer
from rocketq.protocol import RemotingCommand, RequestCode

slow = pytest.mark.slow


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie nobody reaped yet counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def refused(addr: str) -> bool:
    """Whether nothing listens on ``addr`` any more."""
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), 1).close()
    except OSError:
        return True
    return False


def ask(b: rocketq.testing.LocalBroker, code: int, **fields: object) -> dict:
    """A broker admin request's JSON body."""
    r = b._call(b.broker_address, RemotingCommand.request(code, fields))
    assert r.code == 0, r.remark
    return json.loads(r.body)


def test_importing_the_plugin_loads_no_server_client_or_protocol():
    """pytest imports the plugin in every run of every project with rocketq installed."""
    code = ("import sys, rocketq.testing\n"
            "print(' '.join(m for m in sys.modules if m.startswith('rocketq')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=60).stdout.split()
    assert sorted(loaded) == ["rocketq", "rocketq._version", "rocketq.testing"]


@slow
def test_the_session_broker_reads_back_what_was_sent(rocketq_broker):
    b = rocketq_broker
    assert b.running and b.namesrv.startswith("127.0.0.1:")
    assert b.broker_address.startswith("127.0.0.1:") and b.grpc_endpoint is None
    b.create_topic("ReadBack", queues=3)
    with Producer("read-back", namesrv=b.namesrv) as producer:
        for i in range(10):
            producer.send(Message("ReadBack", f"m{i}", tags="t", keys=f"k{i}"))
    got = b.messages("ReadBack")
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(10)]
    assert {m.queue_id for m in got} == {0, 1, 2}
    assert got[3].keys == ["k3"] and got[3].tags == "t" and got[3].topic == "ReadBack"
    assert b.messages("NoSuchTopic") == []


@slow
def test_the_function_broker_is_one_of_its_own(rocketq_broker, rocketq_broker_function):
    assert rocketq_broker_function.namesrv != rocketq_broker.namesrv
    assert rocketq_broker_function.data_dir != rocketq_broker.data_dir
    assert rocketq_broker_function.messages("ReadBack") == []


@slow
def test_create_topic_sets_queues_and_message_type(rocketq_broker):
    rocketq_broker.create_topic("Typed", queues=5, message_type="fifo")
    config = ask(rocketq_broker, RequestCode.GET_TOPIC_CONFIG, topic="Typed")["topicConfig"]
    assert config["readQueueNums"] == config["writeQueueNums"] == 5
    assert config["attributes"] == {"message.type": "FIFO"}
    rocketq_broker.create_topic("Typed", queues=2)  # changed, and the route follows
    assert rocketq_broker._route_queues("Typed") == 2


@slow
def test_create_group_sets_its_settings(rocketq_broker):
    rocketq_broker.create_group("fifo-group", fifo=True, retry_max_times=3)
    rocketq_broker.create_group("plain-group")
    table = ask(rocketq_broker, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG
                )["subscriptionGroupTable"]
    assert table["fifo-group"]["consumeMessageOrderly"] is True
    assert table["fifo-group"]["retryMaxTimes"] == 3
    assert table["plain-group"]["consumeMessageOrderly"] is False
    assert table["plain-group"]["retryMaxTimes"] == 16


@slow
def test_refusals_are_client_errors(rocketq_broker):
    with pytest.raises(ClientError, match="bad topic"):
        rocketq_broker.create_topic("bad topic!")
    with pytest.raises(ClientError, match="message.type|MESSAGE_TYPE|message type"):
        rocketq_broker.create_topic("Typo", message_type="NORMALISH")


@slow
def test_the_helpers_work_inside_a_tests_event_loop(rocketq_broker):
    """The broker has no loop in this process: an async test's loop meets nothing of it."""
    from rocketq.aio import Producer as AsyncProducer

    async def main() -> list[bytes]:
        rocketq_broker.create_topic("FromAsync", queues=1)
        async with AsyncProducer("async-test", namesrv=rocketq_broker.namesrv) as producer:
            await producer.send(Message("FromAsync", b"in a loop"))
        return [m.body for m in rocketq_broker.messages("FromAsync")]

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [b"in a loop"]


@slow
def test_a_bad_conf_is_a_start_error_and_leaves_nothing(monkeypatch):
    made: list[str] = []
    mkdtemp = rocketq.testing.tempfile.mkdtemp

    def recorded(**kw: str) -> str:
        made.append(mkdtemp(**kw))
        return made[-1]

    monkeypatch.setattr(rocketq.testing.tempfile, "mkdtemp", recorded)
    with pytest.raises(rocketq.testing.BrokerStartError, match="maxMessageSze"):
        rocketq.testing.broker(conf={"maxMessageSze": 1024})
    with pytest.raises(rocketq.testing.BrokerStartError, match="maxMessageSize"):
        rocketq.testing.broker(conf={"maxMessageSize": "lots"})
    assert len(made) == 2 and not any(os.path.exists(d) for d in made)


@slow
def test_conf_reaches_the_broker():
    with rocketq.testing.broker(conf={"maxMessageSize": 1024,
                                      "brokerName": "broker-x"}) as b:
        assert b.broker_name == "broker-x"
        with Producer("conf-test", namesrv=b.namesrv) as producer:
            producer.send(Message("Small", b"x" * 100))
            with pytest.raises(ClientError):
                producer.send(Message("Small", b"x" * 2000))
        assert [m.body for m in b.messages("Small")] == [b"x" * 100]


@slow
def test_stop_leaves_no_process_port_or_file():
    with rocketq.testing.broker() as b:
        pid, addrs, data_dir = b.pid, (b.namesrv, b.broker_address), b.data_dir
        assert os.path.isdir(data_dir) and not gone(pid)
        b.create_topic("T")
    assert not b.running
    assert gone(pid)
    assert all(refused(addr) for addr in addrs)
    assert not os.path.exists(data_dir)
    b.stop()  # again: nothing to do
    with pytest.raises(RuntimeError, match="stopped"):
        b.messages("T")


@slow
def test_start_and_stop_times_are_reported():
    """Printed, and held loosely to "starts in under a second" (about 0.5 s and 0.1 s here):
    the median of three starts under 3 s, so that a busy machine does not fail it."""
    times = []
    for _ in range(3):
        with rocketq.testing.broker() as b:
            stopping = time.monotonic()
        times.append((round(b.start_seconds, 3), round(time.monotonic() - stopping, 3)))
    print("start, stop (s):", times)
    starts = sorted(start for start, _ in times)
    assert all(start > 0 for start in starts)
    assert starts[1] < 3, f"the median start took {starts[1]} s"


@slow
def test_broker_works_without_pytest():
    """pytest is a test extra: rocketq.testing.broker() must start and stop without it."""
    code = ("import sys\n"
            "sys.modules['pytest'] = None  # import pytest raises ImportError\n"
            "import rocketq.testing as t\n"
            "assert not hasattr(t, 'rocketq_broker') and 'rocketq_broker' not in t.__all__\n"
            "with t.broker() as b:\n"
            "    b.create_topic('NoPytest')\n"
            "    pid = b.pid\n"
            "print(pid, b.running)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    pid, running = done.stdout.split()
    assert running == "False" and gone(int(pid))
