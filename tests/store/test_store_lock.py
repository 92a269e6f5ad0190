"""The store root's ``lock`` file: one MessageStore at a time on a directory, whether the
other one is in this process or another, and a holder killed with SIGKILL holds nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rocketq.store import MessageStore, StoreMessage
from rocketq.store.errors import StoreError, StoreLockedError
from rocketq.store.lock import StoreLock

from ..conftest import wait_for
from .conftest import small_config

HOLDER = textwrap.dedent("""\
    import sys, time
    from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage
    store = MessageStore(MessageStoreConfig(
        storePathRootDir=sys.argv[1], mappedFileSizeCommitLog=64 * 1024,
        mappedFileSizeConsumeQueue=2000, maxHashSlotNum=1024, maxIndexNum=4096),
        owner="holder of the test")
    store.put_message(StoreMessage.create("Locked", b"from the holder"))
    print("ready", flush=True)
    time.sleep(60)
    """)


def files_state(root) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` but the lock file, with its size and mtime."""
    state = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            if name != "lock":
                st = os.stat(path)
                state[path] = (st.st_size, st.st_mtime_ns)
    return state


def test_a_second_store_on_the_same_root_is_refused_naming_dir_and_pid(tmp_path):
    # Flushes far apart: the first store's own threads leave the files alone meanwhile.
    config = small_config(tmp_path / "store", flushIntervalCommitLog=60_000,
                          flushIntervalConsumeQueue=60_000)
    first = MessageStore(config, owner="first store")
    try:
        first.put_message(StoreMessage.create("T", b"one"))
        time.sleep(0.2)  # dispatched
        before = files_state(config.storePathRootDir)
        with pytest.raises(StoreLockedError) as refused:
            MessageStore(config)
        err = refused.value
        assert isinstance(err, StoreError)
        assert err.pid == os.getpid() and err.owner == "first store"
        assert err.directory == os.path.abspath(config.storePathRootDir)
        assert config.storePathRootDir in str(err) and f"process {os.getpid()}" in str(err)
        # Refused before it read or wrote a file: no checkpoint, abort marker or queue touched.
        assert files_state(config.storePathRootDir) == before
        # The first store goes on as if nothing happened.
        first.put_message(StoreMessage.create("T", b"two"))
        assert wait_for(lambda: [m.body for m in first.get_messages("T", 0, 0, 10).decode()]
                        == [b"one", b"two"], 5)
    finally:
        first.close()


def test_a_closed_store_can_be_opened_again_in_the_same_process(config):
    store = MessageStore(config)
    store.put_message(StoreMessage.create("T", b"kept"))
    # A child started while the store is open does not inherit the lock.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(StoreLockedError):
            MessageStore(config)
        store.close()
        assert open(os.path.join(config.storePathRootDir, "lock")).read() == ""
        again = MessageStore(config)
        try:
            assert not again.recovered_abnormally
            assert [m.body for m in again.get_messages("T", 0, 0, 10).decode()] == [b"kept"]
        finally:
            again.close()
    finally:
        child.kill()
        child.wait(10)


def test_a_store_that_fails_to_start_releases_the_lock(tmp_path):
    config = small_config(tmp_path / "store")
    os.makedirs(config.storePathCommitLog)
    # A CommitLog file that does not start at a multiple of the file size.
    with open(os.path.join(config.storePathCommitLog, "1".zfill(20)), "wb") as fh:
        fh.write(b"x" * config.mappedFileSizeCommitLog)
    with pytest.raises(StoreError) as failed:
        MessageStore(config)
    assert not isinstance(failed.value, StoreLockedError)
    with StoreLock.acquire(config.storePathRootDir, "after the failure") as lock:
        assert lock.held


def test_a_store_held_by_another_process_is_refused_until_that_one_is_killed(tmp_path):
    root = str(tmp_path / "store")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, root], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        assert line.strip() == "ready", holder.stderr.read()[-2000:]
        with pytest.raises(StoreLockedError) as refused:
            MessageStore(small_config(root))
        assert refused.value.pid == holder.pid
        assert f"process {holder.pid} (holder of the test)" in str(refused.value)
        assert root in str(refused.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=30)
    # flock goes with the process: no stale lock to clean up by hand.
    store = MessageStore(small_config(root))
    try:
        assert store.recovered_abnormally  # the holder died without closing
        got = store.get_messages("Locked", 0, 0, 10).decode()
        assert [m.body for m in got] == [b"from the holder"]
    finally:
        store.close()
