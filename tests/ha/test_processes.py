"""Replication between real processes: brokers started with ``rocketq broker`` and killed
with SIGKILL."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time

import pytest

from rocketq import (
    LocalTransactionState,
    Message,
    Producer,
    PullConsumer,
    SendStatus,
    TransactionProducer,
)

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


class Commit:
    def execute_local_transaction(self, message, arg):
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, message):
        return LocalTransactionState.COMMIT


def read_all(namesrv: str, group: str, topic: str, expected: int, timeout: float = 30):
    """What a consumer group reads of ``topic`` within ``timeout`` (stopping at ``expected``)."""
    got = []
    with PullConsumer(group, namesrv=namesrv, from_where="first") as consumer:
        consumer.subscribe(topic)
        consumer.start()
        wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= expected, timeout)
        consumer.commit()
    return got


class Cluster:
    """A NameServer, a master and (on demand) its slave, each its own ``rocketq`` process."""

    def __init__(self, tmp_path, master_extra: str = "", slave_extra: str = "") -> None:
        self.tmp_path = tmp_path
        ns_port = free_port()
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.ha_port = free_port()
        self.procs = [start(["namesrv", "--port", str(ns_port)], "listening")]
        self.master_conf = broker_conf(tmp_path, "master", self.namesrv,
                                       f"haListenPort={self.ha_port}\n{master_extra}")
        self.slave_conf = broker_conf(
            tmp_path, "slave", self.namesrv,
            f"brokerId=1\nbrokerRole=SLAVE\nhaMasterAddress=127.0.0.1:{self.ha_port}\n"
            f"{slave_extra}")
        self.master = self._start(self.master_conf)
        self.slave = None

    def _start(self, conf: str):
        proc = start(["broker", "-c", conf], "listening")
        self.procs.append(proc)
        return proc

    def start_slave(self):
        self.slave = self._start(self.slave_conf)
        return self.slave

    def kill(self, proc) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a test may have stopped it
            stop(proc)


@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(**kw) -> Cluster:
        made.append(Cluster(tmp_path, **kw))
        return made[-1]
    yield make
    for c in made:
        c.close()


@pytest.mark.slow
def test_mixed_sends_replicate_byte_for_byte_with_metadata_and_outlive_the_master(cluster,
                                                                                 tmp_path):
    c = cluster()
    c.start_slave()
    with Producer("pg", namesrv=c.namesrv) as producer:
        sent = [producer.send(Message("Mixed", b"single-%d" % i, tags="s")) for i in range(40)]
        sent.append(producer.send_batch([Message("Mixed", b"batch-%d" % i) for i in range(10)]))
        sent += [producer.send(Message("Mixed", b"delayed-%d" % i, delay_level=1))
                 for i in range(5)]
    with TransactionProducer("tpg", Commit(), namesrv=c.namesrv) as tp:
        for i in range(3):
            tp.send_message_in_transaction(Message("Mixed", b"txn-%d" % i))
    bodies = ({b"single-%d" % i for i in range(40)} | {b"batch-%d" % i for i in range(10)}
              | {b"delayed-%d" % i for i in range(5)} | {b"txn-%d" % i for i in range(3)})
    # Read on the master: the delayed messages are delivered, the transactions committed,
    # and the group "cg" commits its offsets there.
    first = read_all(c.namesrv, "cg", "Mixed", len(bodies))
    assert {m.body for m in first} == bodies
    # The slave's CommitLog is the master's, byte for byte: singles, the batch, the delay
    # topic's records and their deliveries, half messages, op records and commits.
    assert wait_for(lambda: commitlog(tmp_path, "slave") == commitlog(tmp_path, "master"), 20)
    # Within a SlaveSync round (10 s), the slave holds the master's topics and offsets.
    slave_config = tmp_path / "slave" / "config"

    def copied() -> bool:
        try:
            topics = (slave_config / "topics.json").read_text()
            offsets = (slave_config / "consumerOffset.json").read_text()
        except FileNotFoundError:
            return False
        return '"Mixed"' in topics and "Mixed@cg" in offsets
    assert wait_for(copied, 25)
    c.kill(c.master)
    # With the master gone: a new group reads everything from the slave; "cg" goes on from
    # the offsets the slave copied, so it has nothing left to read.
    again = read_all(c.namesrv, "fresh", "Mixed", len(bodies))
    assert sorted(m.body for m in again) == sorted(m.body for m in first)
    assert read_all(c.namesrv, "cg", "Mixed", 1, timeout=3) == []


@pytest.mark.slow
def test_sync_master_reports_a_missing_and_a_stopped_slave(cluster):
    c = cluster(master_extra="brokerRole=SYNC_MASTER\nsyncFlushTimeout=500\n")
    with Producer("pg", namesrv=c.namesrv) as producer:
        # No slave: stored on the master, and the sender hears it is not replicated.
        assert producer.send(Message("Safe", b"alone")).status is SendStatus.SLAVE_NOT_AVAILABLE
        slave = c.start_slave()
        assert wait_for(lambda: producer.send(Message("Safe", b"probe")).status
                        is SendStatus.SEND_OK, 15)
        slave.send_signal(signal.SIGSTOP)  # connected, but acknowledges nothing
        stuck = producer.send(Message("Safe", b"stuck"))
        assert stuck.status is SendStatus.FLUSH_SLAVE_TIMEOUT
        slave.send_signal(signal.SIGCONT)
        assert wait_for(lambda: producer.send(Message("Safe", b"resumed")).status
                        is SendStatus.SEND_OK, 15)


@pytest.mark.slow
def test_sync_master_sync_flush_acks_survive_the_masters_disk(cluster, tmp_path):
    c = cluster(master_extra="brokerRole=SYNC_MASTER\nflushDiskType=SYNC_FLUSH\n")
    c.start_slave()
    acked: list[str] = []
    halt = threading.Event()

    def send(worker: int) -> None:
        with Producer(f"pg{worker}", namesrv=c.namesrv, retries=0) as producer:
            for i in range(5000):
                if halt.is_set():
                    return
                try:
                    result = producer.send(Message("Durable", b"w%d-%d" % (worker, i)))
                except Exception:
                    continue  # the master is gone: what it never acknowledged may be lost
                if result.status is SendStatus.SEND_OK:
                    acked.append(result.msg_id)

    with Producer("warm", namesrv=c.namesrv) as producer:
        assert wait_for(lambda: producer.send(Message("Durable", b"warm")).status
                        is SendStatus.SEND_OK, 15)
    senders = [threading.Thread(target=send, args=(w,)) for w in range(4)]
    for t in senders:
        t.start()
    try:
        assert wait_for(lambda: len(acked) >= 400, 30)
        # Sends are in flight when the master dies and its disk goes.
        c.kill(c.master)
        shutil.rmtree(tmp_path / "master")
        before = list(acked)
    finally:
        halt.set()
        for t in senders:
            t.join(30)
    assert acked == before  # nothing is acknowledged by a dead master
    got = read_all(c.namesrv, "reader", "Durable", len(before) + 1)
    missing = set(before) - {m.msg_id for m in got}
    assert not missing, f"{len(missing)} acknowledged sends are not on the slave"


def stop_under_load(data, conf) -> None:
    """Start a SYNC_MASTER with a slave, keep 256 sends in flight, SIGTERM it: it exits."""
    from rocketq.cli import spawn_standalone

    proc, namesrv = spawn_standalone(str(data), config=str(conf),
                                     extra=["--slaves", "1", "--sync-master"])
    halt = threading.Event()
    window = threading.Semaphore(256)
    answered = []
    try:
        with Producer("pg", namesrv=namesrv, send_timeout=2, retries=0) as producer:
            producer.send(Message("Load", b"first"))

            def load() -> None:  # sends in flight until halted (bounded: 100k, 30 s)
                ends = time.monotonic() + 30
                for _ in range(100_000):
                    if halt.is_set() or time.monotonic() > ends:
                        return
                    window.acquire()
                    future = producer.send_async(Message("Load", b"x" * 128))
                    future.add_done_callback(lambda f: (answered.append(1), window.release()))

            loader = threading.Thread(target=load)
            loader.start()
            try:
                assert wait_for(lambda: len(answered) >= 2000, 20)
                proc.terminate()  # with sends in flight on the broker and the HA link
                try:
                    assert proc.wait(20) == 0
                except subprocess.TimeoutExpired:
                    pytest.fail("no exit 20 s after SIGTERM")
            finally:
                halt.set()
                for _ in range(256):  # let a loader blocked on the window go
                    window.release()
                loader.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_master_and_slave_stop_promptly_on_sigterm_under_load(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(SMALL_FILES)
    for round_ in range(3):
        stop_under_load(tmp_path / f"data-{round_}", conf)


@pytest.mark.slow
def test_killed_slave_catches_up_and_serves_when_the_master_is_killed(cluster, tmp_path):
    c = cluster()
    slave = c.start_slave()
    sent = []
    with Producer("pg", namesrv=c.namesrv) as producer:
        sent += [producer.send(Message("Kept", b"a%d" % i)) for i in range(100)]
        c.kill(slave)
        sent += [producer.send(Message("Kept", b"b%d" % i)) for i in range(100)]
    c.start_slave()
    # The restarted slave catches up: its CommitLog is the master's again.
    assert wait_for(lambda: commitlog(tmp_path, "slave") == commitlog(tmp_path, "master"), 20)
    c.kill(c.master)
    # With the master gone, a consumer reads everything from the slave.
    got = read_all(c.namesrv, "reader", "Kept", len(sent))
    assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)


@pytest.mark.slow
def test_a_slave_on_an_empty_disk_catches_up_with_a_master_holding_data(cluster, tmp_path):
    c = cluster()
    with Producer("pg", namesrv=c.namesrv) as producer:
        for i in range(300):
            producer.send(Message("Before", b"%d-" % i + b"p" * 300))
    # A new slave with nothing asks from offset 0: the master starts it at its last
    # CommitLog file (here the only one), as RocketMQ's does.
    c.start_slave()
    assert wait_for(lambda: (tmp_path / "slave" / "commitlog").exists()
                    and commitlog(tmp_path, "slave") == commitlog(tmp_path, "master"), 20)
