"""Mapped files are sparse and reserve their blocks a step at a time ahead of the writes: a
new file costs a step, not its size; every write lands in reserved blocks; and a disk that
fills up in the middle of a file refuses puts (DiskFullError), never kills the broker with
a SIGBUS."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from rocketq.store import MessageStore, StoreMessage
from rocketq.store.allocation import reserve_step
from rocketq.store.index_file import ENTRY_STEP, IndexFile
from rocketq.store.mapped_file import MappedFile
from rocketq.store.mapped_file_queue import MappedFileQueue

from .conftest import small_config

GIB = 1 << 30


def disk_bytes(path) -> int:
    return os.stat(path).st_blocks * 512


def test_steps_are_bounded_and_proportional():
    assert reserve_step(GIB) == 4 << 20  # a CommitLog file
    assert reserve_step(6_000_000) == 92 << 10  # a ConsumeQueue file of 300,000 units
    assert reserve_step(1 << 20) == 64 << 10
    assert reserve_step(1000) == 1000


def test_a_new_file_costs_a_step_and_appends_stay_in_reserved_blocks(tmp_path):
    f = MappedFile(str(tmp_path / "00000000000000000000"), 0, GIB, create=True)
    try:
        step = f.reserve_step
        assert os.path.getsize(f.path) == GIB  # its logical size: load's size check holds
        assert f.reserved_to == step and disk_bytes(f.path) <= step + 65536
        record = b"r" * 100_000
        while f.wrote_position < 3 * step:
            f.append(record)
            # Reserved a step past the appends, once per step, and never behind them.
            assert f.wrote_position < f.reserved_to <= f.wrote_position + len(record) + step
        assert disk_bytes(f.path) <= f.reserved_to + 65536
        f.flush()
    finally:
        f.close()
    # Loaded again: what is allocated counts as reserved, the rest is reserved when written.
    again = MappedFile(f.path, 0, GIB, create=False)
    try:
        assert 3 * step <= again.reserved_to <= 5 * step
        again.wrote_position = again.reserved_to
        again.append(b"more")
        assert again.reserved_to == again.wrote_position + step
    finally:
        again.close()


def test_write_at_reserves_up_to_where_it_writes(tmp_path):
    f = MappedFile(str(tmp_path / "00000000000000000000"), 0, 64 << 20, create=True)
    try:
        f.write_at(10 << 20, b"far")
        # Reserved from the start (holes before it read as zeros through the mapping, and
        # on tmpfs such a read allocates) and a step past it.
        assert f.reserved_to == (10 << 20) + 3 + f.reserve_step
        assert disk_bytes(f.path) >= 10 << 20
    finally:
        f.close()


def test_make_ahead_reserves_the_blocks_it_promises(tmp_path):
    files = MappedFileQueue(str(tmp_path / "cq"), 6_000_000)
    try:
        step = reserve_step(6_000_000)
        got = files.make_ahead(0, 20)
        assert got == step and files.files == []  # made with a step, kept aside until used
        f = files.create(0)
        assert f.reserved_to == got
        assert files.make_ahead(20, got) == got  # nothing to do
        got = files.make_ahead(20, got + 20)  # a step past what was asked
        assert got == f.reserved_to == 2 * step + 20
        # Crossing into the next file: the first is reserved to its end, the next one made
        # with its first step.
        f.wrote_position = 5_999_980
        got = files.make_ahead(5_999_980, 6_000_040)
        assert f.reserved_to == 6_000_000
        assert got == 6_000_000 + step
        assert disk_bytes(f.path) >= 5_999_000
    finally:
        files.close()


def test_an_index_file_reserves_its_slots_and_a_step_of_entries(tmp_path):
    f = IndexFile(str(tmp_path / "index"), 5_000_000, 20_000_000, create=True)
    try:
        slots_end = 40 + 5_000_000 * 4
        assert f.file.reserved_to == slots_end + ENTRY_STEP
        assert disk_bytes(f.path) <= slots_end + ENTRY_STEP + 65536
        assert f.has_room_in_hand
        for i in range(ENTRY_STEP // 2 // 20 + 10):
            f.put(i * 7919, i * 100, 1_000)
        assert f.file.reserved_to == slots_end + ENTRY_STEP  # no reservation needed yet
        assert not f.has_room_in_hand  # less than half a step left in hand
        f.reserve_in_hand()
        assert f.has_room_in_hand
        assert f.query(7919 * 5, 10, 0, 10_000) == [500]
    finally:
        f.close()


def test_a_store_with_one_message_holds_megabytes(tmp_path):
    # Full-size files (1 GiB CommitLog, 420 MB index files, 6 MB ConsumeQueues).
    store = MessageStore(small_config(tmp_path, mappedFileSizeCommitLog=GIB,
                                      mappedFileSizeConsumeQueue=6_000_000,
                                      maxHashSlotNum=5_000_000, maxIndexNum=20_000_000))
    try:
        store.put_message(StoreMessage.create("T", b"hello", 0, keys="k"))
        assert store.wait_dispatched(timeout=5)
        used = sum(disk_bytes(os.path.join(d, n))
                   for d, _, names in os.walk(tmp_path) for n in names)
        assert used < 64 << 20, used
        assert [m.body for m in store.query_messages("T", "k")] == [b"hello"]
    finally:
        store.close()


# -- a disk that fills up in the middle of a file -----------------------------------------

FILLS_MID_FILE = r"""
import os, sys
sys.path.insert(0, sys.argv[2])
from rocketq.store import DiskFullError, MessageStore, MessageStoreConfig, StoreMessage
from rocketq.store import retention
retention.disk_used_ratio = lambda path: 10.0  # the refusal under test is ENOSPC's
root = sys.argv[1]
os.makedirs(root, exist_ok=True)
assert os.system(f"mount -t tmpfs -o size=6m tmpfs {root}") == 0
cfg = MessageStoreConfig(storePathRootDir=os.path.join(root, "store"),
                         mappedFileSizeCommitLog=64 << 20, mappedFileSizeConsumeQueue=6_000_000,
                         maxHashSlotNum=1024, maxIndexNum=200_000, cleanFileForciblyEnable=False)
store = MessageStore(cfg)
first = store.put_message(StoreMessage.create("T", b"first", 0, keys="k0"))
assert store.wait_dispatched(timeout=5)
# Fill what is left of the disk: the files made so far have holes, the disk has no room.
filler = os.path.join(root, "filler")
with open(filler, "wb", buffering=0) as fh:
    try:
        while True:
            fh.write(b"x" * 4096)
    except OSError:
        pass
log = store.commitlog.files
acked = [first]
refused = None
body = b"m" * 1000
for i in range(1, 100_000):
    try:
        acked.append(store.put_message(StoreMessage.create("T", body, 0, keys=f"k{i}")))
    except DiskFullError as exc:
        refused = exc
        break
assert refused is not None, "the disk never filled"
print("refused:", refused)
assert "disk is full" in str(refused), refused
# In the middle of the first CommitLog file, not at a new one.
assert len(log.files) == 1 and log.last.wrote_position < log.file_size // 2, log.files
assert store.wait_dispatched(timeout=10)
# Everything acknowledged is whole, readable by offset, by queue and by key.
for i, r in enumerate(acked):
    assert store.look_message_by_offset(r.commitlog_offset).body == (body if i else b"first")
with store.get_messages("T", 0, 0, 32) as found:
    assert found.decode()[0].body == b"first"
for i in (0, len(acked) // 2, len(acked) - 1):
    assert [r.queue_offset for r in acked][i] == i
    assert len(store.query_messages("T", f"k{i}")) == 1, i
# Refused again, whole, while the disk is full: no queue offset taken.
end = log.max_offset
try:
    store.put_message(StoreMessage.create("T", body, 0))
except DiskFullError:
    pass
else:
    raise AssertionError("a put found room on a full disk")
assert log.max_offset == end
# Room again: puts go on where they stopped.
os.unlink(filler)
store.check_disk()
after = store.put_message(StoreMessage.create("T", b"after", 0, keys="after"))
assert after.queue_offset == len(acked)
assert store.wait_dispatched(timeout=5)
assert [m.body for m in store.query_messages("T", "after")] == [b"after"]
store.close()
print("ok", len(acked))
"""


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare(1) for a private mount")
def test_a_disk_that_fills_mid_file_refuses_puts_and_never_sigbus(tmp_path):
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create a private mount namespace here")
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(["unshare", "-rm", sys.executable, "-c", FILLS_MID_FILE,
                           str(tmp_path / "small"), checkout],
                          capture_output=True, text=True, timeout=120)
    # unshare runs the child in its place: a SIGBUS shows as that signal's exit status.
    assert proc.returncode not in (-signal.SIGBUS, 128 + signal.SIGBUS), \
        "killed by SIGBUS: " + proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("ok ")
