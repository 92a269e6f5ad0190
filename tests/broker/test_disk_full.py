"""A full disk under a real broker: a small tmpfs (mounted by the test, as root) holds the
CommitLog, the ConsumeQueue and index directories, only the index, or the config directory;
a real producer fills it.

What must hold: sends are refused (SERVICE_NOT_AVAILABLE, a remark saying the disk is full
and which directory); with cleanFileForciblyEnable=false nothing acknowledged is deleted; a
consumer reads every acknowledged message while sends are refused; sends resume once space is
freed; a config file that cannot be written is logged once, kept in memory and saved later;
with cleanFileForciblyEnable=true over diskSpaceCleanForciblyRatio the oldest files go, each
logged once with the groups that lose messages, and counted."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time

import orjson
import pytest

from rocketq import BrokerError, Message, Producer, PullConsumer
from rocketq.protocol import ResponseCode

from ..conftest import wait_for
from ..servers import ServerThread

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def small_disk(path, size: str):
    """A tmpfs of ``size`` mounted at ``path`` for the block; unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    if not shutil.which("mount"):
        pytest.skip("no mount(8) here")
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def used_percent(path) -> float:
    usage = shutil.disk_usage(path)
    return 100.0 * (usage.total - usage.free) / usage.total


def fill_to(disk, percent: float, name: str = "ballast") -> str:
    """Write a ballast file that brings ``disk`` to ``percent`` used."""
    usage = shutil.disk_usage(disk)
    size = int(usage.total * percent / 100) - (usage.total - usage.free)
    path = os.path.join(disk, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if size > 0:
            os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    return path


def fill_up(disk, name: str = "ballast") -> str:
    """Write a ballast file until ``disk`` has no room left at all."""
    path = os.path.join(disk, name)
    with open(path, "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 4096)
    return path


def send_until_refused(producer, topic: str, body_size: int, per_send: int,
                       limit: int = 200_000):
    """Send numbered messages (alone, or in batches of ``per_send``) until the broker
    refuses one; return the bodies acknowledged and the refusal."""
    acked: list[bytes] = []
    n = 0
    while n < limit:
        bodies = [b"%08d" % (n + i) + b"x" * (body_size - 8) for i in range(per_send)]
        try:
            if per_send == 1:
                producer.send(Message(topic, bodies[0]))
            else:
                producer.send_batch([Message(topic, b) for b in bodies])
        except BrokerError as exc:
            return acked, exc
        acked += bodies
        n += per_send
    raise AssertionError(f"{n} messages sent and none refused")


def consume_all(namesrv: str, group: str, topic: str, expected: int,
                timeout: float = 30.0) -> list[bytes]:
    """Every message of ``topic`` a new group reads from the first, with offsets committed."""
    got: list[bytes] = []
    with PullConsumer(group, namesrv=namesrv, from_where="first") as consumer:
        consumer.subscribe(topic)
        consumer.start()
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            got += [m.body for m in consumer.poll(0.5)]
        consumer.commit()
    return got


def refused(producer, topic: str) -> BrokerError | None:
    try:
        producer.send(Message(topic, b"probe"))
    except BrokerError as exc:
        return exc
    return None


def other_hour() -> str:
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


# The directories on the small disk, and how the broker is set up around it:
# name -> (tmpfs size, where it is mounted, broker settings, body size, messages per send).
LAYOUTS = {
    # The C++ client's case in the report: 4 KB messages, one by one, 1 MiB CommitLog files.
    "commitlog": ("16m", "disk", lambda root, disk: {
        "storePathRootDir": str(root), "storePathCommitLog": str(disk / "commitlog")},
        4096, 1),
    # ConsumeQueue and index (and the config directory) on the small disk: storePathRootDir.
    "consumequeue": ("2m", "disk", lambda root, disk: {
        "storePathRootDir": str(disk), "storePathCommitLog": str(root / "commitlog")},
        100, 64),
    # Only the index directory: a disk mounted at <storePathRootDir>/index.
    "index": ("1m", "store/index", lambda root, disk: {"storePathRootDir": str(root)},
              100, 64),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_full_disk_refuses_sends_keeps_messages_and_serves_reads(tmp_path, layout):
    size, mount_at, settings, body_size, per_send = LAYOUTS[layout]
    disk = tmp_path / mount_at
    root = tmp_path / "store"
    with small_disk(disk, size):
        st = ServerThread(tmp_path)
        try:
            st.start_namesrv()
            broker = st.start_broker(
                **settings(root, disk), mappedFileSizeCommitLog=1 << 20,
                mappedFileSizeConsumeQueue=20 * 256, maxHashSlotNum=64, maxIndexNum=256,
                cleanFileForciblyEnable="false", deleteWhen=other_hour(),
                cleanResourceInterval=500, flushConsumerOffsetInterval=200)
            store = broker.store
            st.create_topic("Full", 2)
            ballast = fill_to(disk, 85 if layout != "commitlog" else 60)
            with Producer("pg", namesrv=st.namesrv) as producer:
                acked, refusal = send_until_refused(producer, "Full", body_size, per_send)
                assert acked, "the disk was full before any send"
                assert refusal.code == ResponseCode.SERVICE_NOT_AVAILABLE
                assert "disk is full" in str(refusal) and str(disk) in str(refusal), refusal
                # The housekeeper has looked at the disk since: the store refuses by itself.
                assert wait_for(lambda: store.refusal is not None, 3)
                assert str(disk) in store.refusal
                refusal = refused(producer, "Full")
                assert refusal is not None and "disk is full" in str(refusal)
                assert str(disk) in str(refusal)
                # cleanFileForciblyEnable=false: nothing acknowledged is deleted, even now.
                time.sleep(1.2)
                store.clean_expired_files()
                assert store.commitlog.min_offset == 0
                assert store.counters.commitlog_files_deleted == 0
                # A consumer reads every acknowledged message while sends are refused.
                got = consume_all(st.namesrv, "reader", "Full", len(acked))
                assert sorted(got) == sorted(acked)
                assert refused(producer, "Full") is not None
                assert store.counters.puts_refused_disk_full > 0
                # Room again: sends resume within a disk check or two.
                os.unlink(ballast)
                assert wait_for(lambda: refused(producer, "Full") is None, 10, 0.2)
                assert store.refusal is None
        finally:
            st.stop()


def test_config_directory_that_cannot_be_written(tmp_path, caplog):
    root = tmp_path / "store"
    config_dir = root / "config"
    with small_disk(config_dir, "256k"):
        st = ServerThread(tmp_path)
        try:
            st.start_namesrv()
            broker = st.start_broker(storePathRootDir=str(root),
                                     flushConsumerOffsetInterval=200)
            st.create_topic("Cfg", 1)
            offsets_file = config_dir / "consumerOffset.json"
            with Producer("pg", namesrv=st.namesrv) as producer:
                for i in range(5):
                    producer.send(Message("Cfg", b"a%d" % i))
                assert len(consume_all(st.namesrv, "cg", "Cfg", 5)) == 5
                assert wait_for(lambda: offsets_file.exists() and orjson.loads(
                    offsets_file.read_bytes())["offsetTable"].get("Cfg@cg") == {"0": 5}, 5)
                before = offsets_file.read_bytes()
                caplog.set_level(logging.INFO, logger="rocketq.broker")
                ballast = fill_up(config_dir)
                # The broker carries on: sends and consumption work, offsets move in memory.
                for i in range(5):
                    producer.send(Message("Cfg", b"b%d" % i))
                assert len(consume_all(st.namesrv, "cg", "Cfg", 5)) == 5
                assert broker.offsets.query("cg", "Cfg", 0) == 10
                time.sleep(1.0)  # several rounds of saving, each failing
                errors = [r.getMessage() for r in caplog.records
                          if "cannot save the consumer offsets" in r.getMessage()]
                assert len(errors) == 1, errors  # logged once, not at every round
                assert str(config_dir) in errors[0] and "No space left" in errors[0]
                # The file on disk is the old one, whole; no partial temporary file is left
                # (one exists for a moment while each retry fails).
                assert offsets_file.read_bytes() == before
                assert wait_for(lambda: not (config_dir / "consumerOffset.json.tmp").exists(),
                                2, 0.01)
                # Room again: saved at the next round.
                os.unlink(ballast)
                assert wait_for(lambda: orjson.loads(offsets_file.read_bytes())[
                    "offsetTable"].get("Cfg@cg") == {"0": 10}, 5)
                assert any("saved in" in r.getMessage() and "again" in r.getMessage()
                           for r in caplog.records)
        finally:
            st.stop()


def test_clean_file_forcibly_deletes_the_oldest_and_names_who_loses(tmp_path, caplog):
    disk = tmp_path / "disk"
    with small_disk(disk, "16m"):
        st = ServerThread(tmp_path)
        try:
            st.start_namesrv()
            broker = st.start_broker(
                storePathRootDir=str(tmp_path / "store"),
                storePathCommitLog=str(disk / "commitlog"), mappedFileSizeCommitLog=1 << 20,
                cleanFileForciblyEnable="true", deleteWhen=other_hour(),
                cleanResourceInterval=200)
            store = broker.store
            st.create_topic("Forced", 2)
            caplog.set_level(logging.INFO, logger="rocketq.store")
            with Producer("pg", namesrv=st.namesrv) as producer:
                for i in range(4):
                    producer.send(Message("Forced", b"early %d" % i))
                # A group that read these four and then stopped: it loses what follows.
                assert len(consume_all(st.namesrv, "lagging-group", "Forced", 4)) == 4
                fill_to(disk, 60)
                body = b"x" * 4096
                deadline = time.monotonic() + 30
                while (store.counters.commitlog_files_deleted == 0
                       and time.monotonic() < deadline):
                    try:
                        producer.send(Message("Forced", body))
                    except BrokerError as exc:  # over 90 % before the cleaner ran
                        assert exc.code == ResponseCode.SERVICE_NOT_AVAILABLE
                        time.sleep(0.1)
            counters = store.counters
            assert counters.commitlog_files_deleted >= 1
            assert store.commitlog.min_offset > 0
            assert used_percent(disk) <= 90
            warnings = [r.getMessage() for r in caplog.records
                        if "before every consumer group read it" in r.getMessage()]
            assert len(warnings) == counters.commitlog_files_deleted_unconsumed >= 1
            names = [w.split()[3] for w in warnings]
            assert len(set(names)) == len(names)  # once per file
            for text in warnings:
                assert "lagging-group" in text and "cleanFileForciblyEnable=true" in text
                assert str(disk / "commitlog") in text
            assert counters.messages_deleted_unconsumed >= 200  # 1 MiB of 4 KB messages
        finally:
            st.stop()
