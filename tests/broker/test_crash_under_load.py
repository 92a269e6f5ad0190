"""A broker SIGKILLed while producers send with SYNC_FLUSH, on the default 1 GiB CommitLog
file: restarted on the same store it answers again within 2 s, and every message it
acknowledged (SEND_OK) is there, at the queue and offset the producer was told."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from rocketq import Message
from rocketq.client.admin import AsyncAdmin
from rocketq.client.message import SendStatus
from rocketq.client.producer import AsyncProducer
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.command import RemotingCommand
from rocketq.protocol.message import decode_records
from rocketq.remoting import RemotingClient
from rocketq.remoting.connection import RemotingError

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]
TOPIC = "CrashLoad"
QUEUES = 4
SENDERS = 8
PER_SENDER = 2000  # upper bound on each sender's messages
KILL_AFTER_S = 1.5  # SIGKILL after this long (past a checkpoint, which is written each second)
KILL_AFTER_ACKS = 12000  # ... or once this many sends were acknowledged, whichever comes first
RESTART_BOUND_S = 2.0
PAD = b"x" * 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(args: list[str], log_dir, name: str) -> tuple[subprocess.Popen, str]:
    """Start ``rocketq <args>`` with its output in files (a full pipe never blocks it)."""
    out = str(log_dir / f"{name}.out")
    err = str(log_dir / f"{name}.err")
    with open(out, "w") as fout, open(err, "w") as ferr:
        proc = subprocess.Popen([*ROCKETQ, *args], stdout=fout, stderr=ferr)
    return proc, out


def wait_line(proc: subprocess.Popen, path: str, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as fh:
            if text in fh.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.005)
    with open(path.replace(".out", ".err")) as fh:
        raise AssertionError(f"no {text!r} from {proc.args}: {fh.read()[-2000:]}")


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGINT) -> None:
    if proc is None:
        return
    try:
        if proc.poll() is None:
            proc.send_signal(sig)
        proc.wait(20)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def pull_request(queue_id: int, offset: int, max_nums: int = 32) -> RemotingCommand:
    return RemotingCommand.request(RC.PULL_MESSAGE, {
        "consumerGroup": "crash-check", "topic": TOPIC, "queueId": queue_id,
        "queueOffset": offset, "maxMsgNums": max_nums, "sysFlag": 0x4, "commitOffset": 0,
        "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0})


async def send_under_load(namesrv: str, broker: subprocess.Popen) -> tuple[dict, dict]:
    """Senders send without pause; the broker is SIGKILLed while their requests are in
    flight. Returns the acknowledged sends (UNIQ_KEY -> (body, queue id, queue offset)) and
    figures about the kill."""
    acked: dict[str, tuple[bytes, int, int]] = {}
    errors_before_kill: list[BaseException] = []
    state = {"in_flight": 0, "killed": False, "in_flight_at_kill": 0, "failed_after_kill": 0}
    producer = AsyncProducer("crash-load-pg", namesrv, send_timeout=3.0, retries=0)
    await producer.start()
    started = time.monotonic()

    async def sender(n: int) -> None:
        for seq in range(PER_SENDER):
            if state["killed"] and state["failed_after_kill"]:
                return  # the broker is gone: nothing more can be acknowledged
            body = b"s%d-%d-" % (n, seq) + PAD
            state["in_flight"] += 1
            try:
                result = await producer.send(Message(TOPIC, body))
            except Exception as exc:  # the kill surfaces as several error types
                if state["killed"]:
                    state["failed_after_kill"] += 1
                    return
                errors_before_kill.append(exc)
                return
            finally:
                state["in_flight"] -= 1
            if result.status is SendStatus.SEND_OK:
                acked[result.msg_id] = (body, result.queue.queue_id, result.queue_offset)

    async def killer() -> None:
        while (len(acked) < KILL_AFTER_ACKS and time.monotonic() - started < KILL_AFTER_S
               and not errors_before_kill):
            await asyncio.sleep(0.005)
        state["in_flight_at_kill"] = state["in_flight"]
        state["acked_at_kill"] = len(acked)
        state["killed"] = True
        broker.send_signal(signal.SIGKILL)

    try:
        await asyncio.wait_for(asyncio.gather(killer(), *(sender(n) for n in range(SENDERS))),
                               60)
    finally:
        await producer.shutdown()
    assert not errors_before_kill, errors_before_kill[:3]
    state["seconds"] = time.monotonic() - started
    return acked, state


async def first_answer(client: RemotingClient, addr: str, timeout: float = 20) -> float:
    """Poll the broker with a pull from the first offset until it answers with messages;
    return when that answer arrived."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = await client.invoke(addr, pull_request(0, 0, 1), 2.0)
        except (OSError, RemotingError, TimeoutError):
            await asyncio.sleep(0.01)
            continue
        assert r.code == 0, (r.code, r.remark)  # FOUND
        assert decode_records(r.body)
        return time.monotonic()
    raise AssertionError(f"broker at {addr} did not answer within {timeout} s")


async def read_queue(client: RemotingClient, addr: str, queue_id: int) -> list:
    r = await client.invoke(addr, RemotingCommand.request(
        RC.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": queue_id}))
    offset = int(r.ext_fields["offset"])
    r = await client.invoke(addr, RemotingCommand.request(
        RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": queue_id}))
    end = int(r.ext_fields["offset"])
    records = []
    for _ in range(end // 32 + 2):  # bounded: one pull per 32 messages and one more
        if offset >= end:
            break
        r = await client.invoke(addr, pull_request(queue_id, offset))
        assert r.code == 0, (queue_id, offset, end, r.code, r.remark)
        batch = decode_records(r.body)
        records.extend(batch)
        offset = int(r.ext_fields["nextBeginOffset"])
    assert offset == end, (queue_id, offset, end)
    return records


@pytest.mark.slow
def test_sigkill_under_sync_flush_load_restarts_fast_and_keeps_acknowledged(tmp_path):
    ns_port, broker_port = free_port(), free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    broker_addr = f"127.0.0.1:{broker_port}"
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    # No store file sizes: the CommitLog uses its default 1 GiB files.
    conf.write_text(f"brokerClusterName=CrashCluster\nbrokerName=broker-crash\n"
                    f"namesrvAddr={namesrv}\nlistenPort={broker_port}\n"
                    f"storePathRootDir={store}\nflushDiskType=SYNC_FLUSH\nhaListenPort=0\n")
    ns = broker = None
    try:
        ns, ns_out = spawn(["namesrv", "--port", str(ns_port)], tmp_path, "namesrv")
        wait_line(ns, ns_out, "listening")
        broker, out = spawn(["broker", "-c", str(conf)], tmp_path, "broker-1")
        wait_line(broker, out, "listening")

        async def prepare() -> None:
            admin = AsyncAdmin(namesrv)
            try:
                await admin.create_topic(TOPIC, QUEUES)
            finally:
                await admin.close()

        asyncio.run(asyncio.wait_for(prepare(), 20))
        acked, kill = asyncio.run(send_under_load(namesrv, broker))
        assert broker.wait(10) == -signal.SIGKILL
        assert kill["in_flight_at_kill"] > 0, kill  # the kill landed on requests in flight
        assert len(acked) >= 200, kill  # enough load before the kill to mean something
        assert (store / "abort").exists()  # not a clean shutdown

        commitlog = store / "commitlog" / f"{0:020d}"
        assert os.stat(commitlog).st_size == 1 << 30

        async def restart_and_read() -> tuple[float, float, dict[int, list]]:
            client = RemotingClient()
            try:
                nonlocal broker
                t0 = time.monotonic()
                broker, _ = spawn(["broker", "-c", str(conf)], tmp_path, "broker-2")
                answered = await first_answer(client, broker_addr) - t0
                # A producer that knows only the NameServer can send again.
                producer = AsyncProducer("crash-after-pg", namesrv, send_timeout=3.0)
                await producer.start()
                try:
                    r = await producer.send(Message(TOPIC, b"after-restart"))
                    assert r.status is SendStatus.SEND_OK
                    sent_ok = time.monotonic() - t0
                finally:
                    await producer.shutdown()
                queues = {q: await read_queue(client, broker_addr, q) for q in range(QUEUES)}
                return answered, sent_ok, queues
            finally:
                await client.close()

        answered, sent_ok, queues = asyncio.run(asyncio.wait_for(restart_and_read(), 90))
        with open(tmp_path / "broker-2.err") as fh:
            log = fh.read()
        assert "recovered after a crash" in log
        ready = re.search(r"ready in (\d+) ms", log)
        print(f"\n{len(acked)} acknowledged in {kill['seconds']:.2f} s, "
              f"{kill['in_flight_at_kill']} in flight at the kill; restart: store ready in "
              f"{ready.group(1) if ready else '?'} ms, first pull answered after "
              f"{answered:.3f} s, first send acknowledged after {sent_ok:.3f} s")

        found: dict[str, tuple[bytes, int, int]] = {}
        for records in queues.values():
            # Offsets dense from the first one, each message once.
            assert [m.queue_offset for m in records] == list(range(len(records)))
            for m in records:
                uniq = m.properties.get("UNIQ_KEY")
                assert uniq not in found, f"duplicate {uniq}"
                found[uniq] = (m.body, m.queue_id, m.queue_offset)
        lost = [uniq for uniq in acked if uniq not in found]
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
        for uniq, where in acked.items():
            assert found[uniq] == where, (uniq, found[uniq][1:], where[1:])
        assert os.stat(commitlog).st_size == 1 << 30
        # Serving again: a pull answered and a send acknowledged, counted from the spawn.
        assert answered < RESTART_BOUND_S, f"first answer {answered:.2f} s after the restart"
        assert sent_ok < RESTART_BOUND_S, f"first SEND_OK {sent_ok:.2f} s after the restart"
    finally:
        stop(broker)
        stop(ns)
        # The CommitLog file is a whole GiB: do not leave it among pytest's kept temp dirs.
        shutil.rmtree(store, ignore_errors=True)
