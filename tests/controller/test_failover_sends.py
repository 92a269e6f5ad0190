"""Sends across a master SIGKILL, as a producer with default settings sees them (real
processes: a NameServer, a controller and a controller-mode group). The controller finds
the killed master's process gone and elects at once; the new master registers at once; a
send whose master refused the connection asks for the route again and waits for the new
master within its timeout (tests/client/test_no_master.py: with no master coming back, it
raises NoMasterError once its timeout is spent)."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from rocketq import Message, Producer, SendStatus

from ..conftest import wait_for
from .test_failover import ControlledCluster, assert_read_once, replica_info

pytestmark = pytest.mark.slow


class DefaultSender:
    """A producer with default settings (3 s timeout, 2 retries) sending one message after
    another; every failure is kept."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.acked: list[str] = []
        self.failed: list[Exception] = []
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(namesrv, topic))
        self.thread.start()

    def _run(self, namesrv: str, topic: str) -> None:
        with Producer("pg", namesrv=namesrv) as producer:
            for i in range(20_000):
                if self.halt.is_set():
                    return
                try:
                    r = producer.send(Message(topic, b"m%d" % i))
                except Exception as exc:
                    self.failed.append(exc)
                    time.sleep(0.05)
                    continue
                if r.status is SendStatus.SEND_OK:
                    self.acked.append(r.msg_id)
                else:
                    self.failed.append(RuntimeError(r.status.name))
                time.sleep(0.005)

    def stop(self) -> None:
        self.halt.set()
        self.thread.join(30)


def test_a_default_producer_sees_no_failed_send_across_a_master_sigkill(tmp_path):
    c = ControlledCluster(tmp_path)
    sender = None
    try:
        assert wait_for(lambda: len(replica_info(c.controller).get("syncStateSet", [])) == 3,
                        30), replica_info(c.controller)
        sender = DefaultSender(c.namesrv, "Sends")
        assert wait_for(lambda: len(sender.acked) >= 200 and c.master() is not None, 30)
        old = c.master()
        c.brokers[old].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        assert wait_for(lambda: c.master() not in (None, old), 10)
        to_route = time.monotonic() - killed
        count = len(sender.acked)
        assert wait_for(lambda: len(sender.acked) >= count + 200, 20)
        sender.stop()
        assert sender.failed == [], sender.failed[:3]
        assert to_route < 3, to_route  # the benchmark measures it; here, within a send
        assert_read_once(c.namesrv, "Sends", sender.acked)
    finally:
        if sender is not None:
            sender.stop()
        c.close()
