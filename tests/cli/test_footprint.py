"""What a standalone with RocketMQ's default file sizes (a 1 GiB CommitLog file, 420 MB index
files, 6 MB ConsumeQueue files) holds on disk: its files are sparse, their blocks reserved a
step ahead of the writes, so a hello world costs megabytes, not gigabytes."""

from __future__ import annotations

import os
import time

import pytest

from rocketq import Message, Producer
from rocketq.client.sync_admin import Admin

from .test_cli import free_port, start, stop

pytestmark = pytest.mark.slow

MB = 1 << 20


def disk_usage(directory) -> int:
    """Bytes of disk the files under ``directory`` hold (``du``: blocks, not sizes)."""
    total = 0
    for parent, _, names in os.walk(directory):
        for name in names:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def standalone(tmp_path):
    data = tmp_path / "data"

    def argv() -> list[str]:
        return ["standalone", "--data-dir", str(data), "--namesrv-port", str(free_port()),
                "--broker-port", str(free_port()), "--grpc-port", "0"]

    proc = start(argv, "connect clients")
    namesrv = f"127.0.0.1:{proc.args[proc.args.index('--namesrv-port') + 1]}"
    return proc, namesrv, data


def settled_usage(data, at_least: int) -> int:
    """The data directory's usage once the dispatch wrote what the sends left (bounded)."""
    deadline = time.monotonic() + 5
    used = disk_usage(data)
    while used < at_least and time.monotonic() < deadline:
        time.sleep(0.1)
        used = disk_usage(data)
    time.sleep(0.5)
    return disk_usage(data)


def test_a_hello_world_takes_under_64_mb(tmp_path):
    proc, namesrv, data = standalone(tmp_path)
    try:
        with Admin(namesrv) as admin:
            admin.create_topic("Hello", 4)
        with Producer("footprint", namesrv=namesrv) as producer:
            producer.send(Message("Hello", b"hello world", keys=["k"]))
        used = settled_usage(data, 1 * MB)
        assert used < 64 * MB, f"{used / MB:.1f} MB after one message"
        # RocketMQ's default sizes: a CommitLog file of 1 GiB, sparse.
        [commitlog] = [p for p in data.rglob("*") if p.parent.name == "commitlog"]
        assert commitlog.stat().st_size == 1 << 30
    finally:
        assert stop(proc) == 0


def test_100_topics_of_8_queues_with_a_message_each_take_under_300_mb(tmp_path):
    proc, namesrv, data = standalone(tmp_path)
    try:
        with Admin(namesrv) as admin:
            for t in range(100):
                admin.create_topic(f"T{t}", 8)
        with Producer("footprint", namesrv=namesrv) as producer:
            for t in range(100):
                for q in range(8):
                    result = producer.send(Message(f"T{t}", b"x"),
                                           selector=lambda queues, _m, arg: queues[arg], arg=q)
                    assert result.queue.queue_id == q
        used = settled_usage(data, 20 * MB)
        consume_queues = [p for p in data.rglob("*") if p.is_file()
                          and p.parent.parent.name.startswith("T") and p.name.isdigit()]
        assert len(consume_queues) == 800  # one ConsumeQueue file per queue
        assert used < 300 * MB, f"{used / MB:.1f} MB after 800 queues of one message"
    finally:
        assert stop(proc) == 0
