"""The disk's use on a real filesystem with blocks reserved for root (as root: a loop file
formatted ext4 with ``-m 50``, mounted by the test).

What must hold: the store measures the disk as ``df`` and RocketMQ 5 do (the reserve is
neither used nor usable): its figure is ``df``'s Use%, the runtime info's ratios and
``rocketmq_storage_size`` agree with ``df``; and a real broker on that disk takes sends at a
real 60 % and 80 % (under the default diskSpaceWarningLevelRatio=90), and refuses them once
the disk is really over 90 %. Counting the reserve as used put the same disk at 80 % and
over 90 %."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import pytest

from rocketq import BrokerError, Message, Producer
from rocketq.metrics.broker import BrokerCollector
from rocketq.protocol import ResponseCode
from rocketq.store.retention import disk_space, disk_used_ratio

from ..conftest import wait_for
from ..servers import ServerThread


@contextlib.contextmanager
def reserved_disk(tmp_path, size_mib: int = 128, reserved_percent: int = 50):
    """An ext4 filesystem of ``size_mib`` with ``reserved_percent`` of its blocks reserved
    for root, on a loop file, mounted for the block; unmounted and removed after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a loop file needs root")
    for tool in ("mkfs.ext4", "mount", "umount", "losetup", "df"):
        if not shutil.which(tool):
            pytest.skip(f"no {tool} here (make test-deps installs it)")
    image, mount_at = tmp_path / "disk.img", tmp_path / "disk"
    mount_at.mkdir()
    try:
        with open(image, "wb") as fh:
            fh.truncate(size_mib << 20)
        done = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", str(reserved_percent),
                               str(image)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"mkfs.ext4 failed here: {done.stderr.strip()}")
        done = subprocess.run(["mount", "-o", "loop", str(image), str(mount_at)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a loop file here: {done.stderr.strip()}")
        try:
            yield mount_at
        finally:
            if subprocess.run(["umount", str(mount_at)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(mount_at)], capture_output=True)
            # mount -o loop detaches the loop device at umount; make sure of it.
            listed = subprocess.run(["losetup", "-j", str(image)], capture_output=True,
                                    text=True).stdout
            for line in listed.splitlines():
                subprocess.run(["losetup", "-d", line.split(":", 1)[0]], capture_output=True)
    finally:
        with contextlib.suppress(OSError):
            image.unlink()


def df(path) -> tuple[int, int, int]:
    """``df``'s Use% (a whole percent), Used and Avail (bytes) of the disk holding ``path``."""
    out = subprocess.run(["df", "-B1", "--output=pcent,used,avail", str(path)],
                         capture_output=True, text=True, check=True).stdout
    pcent, used, avail = out.splitlines()[1].split()
    return int(pcent.rstrip("%")), int(used), int(avail)


def old_ratio(path) -> float:
    """The former measure, for the record: ``(total - available) / total``."""
    usage = shutil.disk_usage(path)
    return 100.0 * (usage.total - usage.free) / usage.total


def fill_to(disk, percent: float, name: str = "ballast") -> None:
    """Grow a ballast file of real blocks until ``df`` says ``disk`` is about ``percent``
    used."""
    _, used, avail = df(disk)
    path = os.path.join(disk, name)
    size = os.path.getsize(path) if os.path.exists(path) else 0
    grow = int((used + avail) * percent / 100) - used
    if grow <= 0:
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, size, grow)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_the_disk_is_measured_as_df_measures_it(tmp_path):
    with reserved_disk(tmp_path) as disk:
        for percent in (10, 41, 60, 73, 89):
            fill_to(disk, percent)
            pcent, used, _ = df(disk)
            assert abs(pcent - percent) <= 2, (pcent, percent)
            ratio = disk_used_ratio(str(disk))
            assert ratio == pcent, (ratio, pcent, old_ratio(disk))
            assert disk_space(str(disk)).used == used
            # A directory not made yet is measured on its parent's disk.
            assert disk_used_ratio(str(disk / "store" / "commitlog")) == pcent


def test_a_broker_takes_sends_at_a_real_60_percent_and_refuses_over_90(tmp_path):
    with reserved_disk(tmp_path) as disk:
        st = ServerThread(tmp_path)
        try:
            st.start_namesrv()
            broker = st.start_broker(
                storePathRootDir=str(disk / "store"), mappedFileSizeCommitLog=1 << 20,
                mappedFileSizeConsumeQueue=20 * 256, maxHashSlotNum=64, maxIndexNum=256,
                cleanFileForciblyEnable="false", cleanResourceInterval=200)
            store = broker.store
            st.create_topic("Reserved", 1)
            with Producer("pg", namesrv=st.namesrv) as producer:
                producer.send(Message("Reserved", b"first"))
                seen = []
                for percent in (60, 80):
                    before = dict(store.disk.ratios)
                    fill_to(disk, percent)
                    pcent, used, _ = df(disk)
                    # The housekeeper has looked at the disk since the ballast grew.
                    assert wait_for(lambda b=before: store.disk.ratios != b, 5, 0.05)
                    for i in range(20):
                        producer.send(Message("Reserved", b"at %d%% #%d" % (pcent, i)))
                    assert store.refusal is None
                    storage = next(m for m in BrokerCollector(broker, None)._storage()
                                   if m.name == "rocketmq_storage_size")
                    seen.append((pcent, used, dict(store.disk.ratios), broker.runtime_info(),
                                 storage.samples[0].value))
                for pcent, used, ratios, info, storage in seen:
                    assert set(ratios.values()) == {pcent}, (ratios, pcent)
                    assert round(float(info["commitLogDiskRatio"]) * 100) == pcent
                    assert round(float(info["consumeQueueDiskRatio"]) * 100) == pcent
                    # The CommitLog's own blocks may grow between the two looks.
                    assert abs(storage - used) <= 2 << 20, (storage, used)
                fill_to(disk, 95)
                pcent, _, _ = df(disk)
                assert pcent > 90
                assert wait_for(lambda: store.refusal is not None, 5, 0.05)
                with pytest.raises(BrokerError) as refused:
                    producer.send(Message("Reserved", b"over"))
                assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
                assert f"{pcent}% used, over diskSpaceWarningLevelRatio=90" in str(
                    refused.value)
        finally:
            st.stop()
