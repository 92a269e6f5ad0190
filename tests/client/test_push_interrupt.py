"""Ctrl-C on a PushConsumer, with real processes: a child process consumes with a slow
listener and gets SIGINT once (it stops taking messages, waits a bounded time for the ones
being consumed, commits) or twice (it exits at once, without a traceback). A member started
afterwards gets exactly the messages the child's listener did not finish: nothing committed
is lost, nothing finished comes again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from rocketq import ConsumeResult, Message, Producer, PushConsumer

from ..conftest import wait_for

pytestmark = pytest.mark.slow

TOPIC, GROUP, COUNT = "Slow", "slow-group", 100

#: The child: a consumer with two listener threads; each of the first ``fast`` batches takes
#: 0.3 s, every later one 60 s. Each message finished is written to ``out`` as its body.
CHILD = r"""
import sys, threading, time
from rocketq import ConsumeResult, PushConsumer

namesrv, topic, group, out, fast, bound = sys.argv[1:7]
done = open(out, "a", buffering=1)
lock = threading.Lock()
calls = [0]

def listener(messages):
    with lock:
        calls[0] += 1
        n = calls[0]
    time.sleep(0.3 if n <= int(fast) else 60)
    for m in messages:
        done.write(m.body.decode() + "\n")
    return ConsumeResult.SUCCESS

with PushConsumer(group, namesrv=namesrv, from_where="first", consume_thread_min=2,
                  consume_thread_max=2, persist_interval=3600,
                  await_termination_when_shutdown=float(bound)) as consumer:
    consumer.subscribe(topic)
    consumer.register(listener)
    threading.Event().wait()
"""


def finished(path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def start_child(servers, out, fast: int, bound: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, servers.namesrv, TOPIC, GROUP, str(out), str(fast),
         str(bound)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def send_all(servers) -> set[str]:
    servers.create_topic(TOPIC, 4)
    bodies = {f"m{i}" for i in range(COUNT)}
    with Producer("slow-producer", namesrv=servers.namesrv) as producer:
        for body in sorted(bodies):
            producer.send(Message(TOPIC, body.encode()))
    return bodies


def consume_rest(servers, expected: int) -> list[str]:
    """What a member started now gets, once ``expected`` messages came and 2 s more passed."""
    got: list[str] = []
    lock = threading.Lock()

    def listener(messages):
        with lock:
            got.extend(m.body.decode() for m in messages)
        return ConsumeResult.SUCCESS

    with PushConsumer(GROUP, namesrv=servers.namesrv, from_where="first") as consumer:
        consumer.subscribe(TOPIC)
        consumer.register(listener)
        wait_for(lambda: len(got) >= expected, timeout=30)
        time.sleep(2)
    with lock:
        return list(got)


def stop(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()
    child.communicate(timeout=10)


def test_one_ctrl_c_waits_for_the_messages_being_consumed_only_and_commits_them(
        servers, tmp_path):
    bodies = send_all(servers)
    out = tmp_path / "finished"
    child = start_child(servers, out, fast=COUNT, bound=5)
    try:
        assert wait_for(lambda: len(finished(out)) >= 6, timeout=30)
        child.send_signal(signal.SIGINT)
        began = time.monotonic()
        _, stderr = child.communicate(timeout=30)
        took = time.monotonic() - began
    finally:
        stop(child)
    done = finished(out)
    # Two messages were in the listener (0.3 s each); the ~90 pulled but not started would
    # take 14 s more: they are not handed to the listener, and the exit is well in the bound.
    assert took < 4, stderr
    assert len(done) < 30
    assert "waiting up to 5.0 s for 2 message(s) being consumed" in stderr
    rest = consume_rest(servers, COUNT - len(done))
    assert sorted(rest) == sorted(bodies - set(done))


def test_a_second_ctrl_c_exits_at_once_cleanly_and_keeps_what_was_committed(
        servers, tmp_path):
    bodies = send_all(servers)
    out = tmp_path / "finished"
    child = start_child(servers, out, fast=6, bound=60)
    try:
        assert wait_for(lambda: len(finished(out)) >= 6, timeout=30)
        time.sleep(0.5)  # two 60 s batches are in the listener now
        child.send_signal(signal.SIGINT)
        lines: list[str] = []
        assert child.stderr is not None

        def read() -> None:
            for line in child.stderr:
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert wait_for(lambda: any("waiting up to" in line for line in lines), timeout=10)
        child.send_signal(signal.SIGINT)
        began = time.monotonic()
        code = child.wait(timeout=30)
        took = time.monotonic() - began
        reader.join(5)
    finally:
        stop(child)
    stderr = "".join(lines)
    assert took < 5, stderr
    assert code == 130, stderr
    assert "Traceback" not in stderr
    done = finished(out)
    assert len(done) == 6
    # The two messages abandoned in the listener come again; nothing finished does.
    rest = consume_rest(servers, COUNT - len(done))
    assert sorted(rest) == sorted(bodies - set(done))
