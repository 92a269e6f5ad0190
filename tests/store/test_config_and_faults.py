"""broker.conf compatibility, and a full disk (ENOSPC) that loses nothing."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from rocketq.store import DiskFullError, MessageStore, MessageStoreConfig, StoreMessage

from .conftest import small_config


def test_broker_conf_keys_mean_the_same(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(textwrap.dedent(f"""\
        # a RocketMQ broker.conf
        brokerClusterName = DefaultCluster
        brokerName=broker-a
        storePathRootDir={tmp_path}/data
        mappedFileSizeCommitLog=1048576
        flushDiskType=SYNC_FLUSH
        fileReservedTime=48
        deleteWhen=04;16
        diskMaxUsedSpaceRatio=88
        messageIndexEnable=false
        """))
    cfg = MessageStoreConfig.from_properties(conf)
    assert cfg.storePathRootDir == f"{tmp_path}/data"
    assert cfg.storePathCommitLog == f"{tmp_path}/data/commitlog"
    assert cfg.mappedFileSizeCommitLog == 1048576 and cfg.sync_flush
    assert cfg.fileReservedTime == 48 and cfg.deleteWhen == "04;16"
    assert cfg.diskMaxUsedSpaceRatio == 88 and cfg.messageIndexEnable is False
    assert cfg.unknown == {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a"}


def test_bad_config_values_say_which_key(tmp_path):
    with pytest.raises(ValueError, match="flushDiskType"):
        MessageStoreConfig(storePathRootDir=str(tmp_path), flushDiskType="SOMETIMES")
    with pytest.raises(ValueError, match="mappedFileSizeCommitLog"):
        MessageStoreConfig.from_dict({"storePathRootDir": str(tmp_path),
                                      "mappedFileSizeCommitLog": "abc"})


def test_enospc_on_new_file_is_a_clear_error(tmp_path, monkeypatch):
    store = MessageStore(small_config(tmp_path))
    try:
        first = store.put_message(StoreMessage.create("T", b"x" * 1000, 0))

        def no_space(fd, offset, length):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "posix_fallocate", no_space)
        with pytest.raises(DiskFullError, match="no space"):
            for _ in range(200):  # until the first file is full and a second is needed
                store.put_message(StoreMessage.create("T", b"y" * 1000, 0))
        monkeypatch.undo()
        r = store.put_message(StoreMessage.create("T", b"after", 0))
        store.wait_dispatched()
        assert store.look_message_by_offset(first.commitlog_offset).body == b"x" * 1000
        assert store.look_message_by_offset(r.commitlog_offset).body == b"after"
        assert store.get_max_offset("T", 0) == r.queue_offset + 1
    finally:
        store.close()


REAL_DISK_FULL = """
import os, sys
from rocketq.store import DiskFullError, MessageStore, MessageStoreConfig, StoreMessage
root = sys.argv[1]
os.makedirs(root, exist_ok=True)
assert os.system(f"mount -t tmpfs -o size=640k tmpfs {root}") == 0
cfg = MessageStoreConfig(storePathRootDir=root, mappedFileSizeCommitLog=128 * 1024,
                         maxMessageSize=8192, mappedFileSizeConsumeQueue=2000,
                         maxHashSlotNum=64, maxIndexNum=256, cleanFileForciblyEnable=False)
store = MessageStore(cfg)
stored = []
try:
    for i in range(10_000):
        stored.append(store.put_message(StoreMessage.create("T", b"%06d" % i * 100, 0)))
except DiskFullError as exc:
    print("full:", exc)
store.wait_dispatched()
for i, r in enumerate(stored):
    assert store.look_message_by_offset(r.commitlog_offset).body == b"%06d" % i * 100
g = store.get_messages("T", 0, len(stored) - 1, 1)
assert g.decode()[0].body == b"%06d" % (len(stored) - 1) * 100
g.release()
# Make room: retention removes the oldest file, then appends work again.
store.config.cleanFileForciblyEnable = True
store.config.diskSpaceCleanForciblyRatio = 0
assert store.clean_expired_files(manual=True) >= 1
# Files fill the disk to its last block now (sparse, reserved a step at a time): puts are
# taken again once it is back under the default diskSpaceCleanForciblyRatio.
store.config.diskSpaceCleanForciblyRatio = 85
assert store.check_disk() is None
r = store.put_message(StoreMessage.create("T", b"room again", 0))
assert store.look_message_by_offset(r.commitlog_offset).body == b"room again"
store.close()
print("ok", len(stored))
"""


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare(1) for a private mount")
def test_real_full_disk_on_a_small_tmpfs(tmp_path):
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create a private mount namespace here")
    proc = subprocess.run(["unshare", "-rm", sys.executable, "-c", REAL_DISK_FULL,
                           str(tmp_path / "small")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Refused by the first mapped file that found no room, or by the flag the housekeeper
    # sets over diskSpaceWarningLevelRatio, whichever came first.
    assert "full:" in proc.stdout
    assert "no space" in proc.stdout or "disk is full" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].startswith("ok ")
