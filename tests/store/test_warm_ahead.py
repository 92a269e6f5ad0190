"""Zeros written ahead of the CommitLog's appends (``warmMapedFileEnable``): only past the
write position, a whole chunk at a time, never over a record (appends running meanwhile, on
both write paths), and a full disk met while zeroing stops the zeroing, not the appends."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading

import pytest

from rocketq.store import MessageStore, StoreMessage
from rocketq.store.flush import CommitLogWarmer
from rocketq.store.mapped_file import ZERO_AHEAD_CHUNK
from rocketq.store.mapped_file_queue import MappedFileQueue

from .conftest import small_config
from .test_pwrite_appends import record

CHUNK = ZERO_AHEAD_CHUNK


def warmed_queue(directory, file_size: int, *, pwrite: bool = True) -> MappedFileQueue:
    files = MappedFileQueue(str(directory), file_size)
    files.set_write_mode(pwrite=pwrite, zero_ahead=True)
    return files


def test_zeros_go_a_whole_chunk_at_a_time_past_the_write_position(tmp_path):
    files = warmed_queue(tmp_path / "log", 3 * CHUNK + CHUNK // 2)
    try:
        f = files.last_for_write()
        data = record(1, 5000)
        f.append(data)
        # From the page after the write position to the end of its chunk, then chunk by chunk
        # while within the distance; never a part of a chunk, but the file's last.
        assert f.zero_ahead(2 * CHUNK) == CHUNK - 8192
        assert f.zeroed_to == CHUNK
        assert f.zero_ahead(2 * CHUNK) == CHUNK
        assert f.zero_ahead(2 * CHUNK) == 0  # the next chunk ends past 5000 + 2 chunks
        assert f.zero_ahead(8 * CHUNK) == CHUNK
        assert f.zero_ahead(8 * CHUNK) == CHUNK // 2
        assert f.zeroed_to == f.file_size and f.zero_ahead(8 * CHUNK) == 0
        assert f.view[:5000] == data and os.pread(f.fd, 5000, 0) == data
        assert os.pread(f.fd, CHUNK, 5000) == bytes(CHUNK)
        # Appends go on over the zeros; zeroing never goes back behind them.
        more = record(2, CHUNK)
        f.append(more)
        assert f.view[5000:5000 + CHUNK] == more
        assert f.zero_ahead(8 * CHUNK) == 0
    finally:
        files.close()


def test_a_file_opened_without_zero_ahead_refuses_it(tmp_path):
    files = MappedFileQueue(str(tmp_path / "log"), CHUNK)
    try:
        with pytest.raises(ValueError, match="not opened for zeroing ahead"):
            files.last_for_write().zero_ahead(CHUNK)
    finally:
        files.close()


@pytest.mark.parametrize("pwrite", [True, False], ids=["pwrite", "mapping"])
def test_zeroing_never_clobbers_records_appended_while_it_runs(tmp_path, pwrite):
    """The warmer works right behind the writer (the smallest distance), through three files;
    every record reads back whole and every byte past the last one is zero."""
    files = warmed_queue(tmp_path / "log", 3 * CHUNK, pwrite=pwrite)
    warmer = CommitLogWarmer(files, CHUNK, idle_wait=0.001)
    stop = threading.Event()
    thread = threading.Thread(target=warmer.run, args=(stop,))
    rng = random.Random(7)
    written: list[tuple[int, bytes]] = []
    try:
        files.last_for_write()
        thread.start()
        offset, seq = 0, 0
        while offset < 3 * 3 * CHUNK - 20_000:  # bounded: three files' worth
            f = files.last_for_write()
            size = min(rng.choice((40, 300, 1500, 4096, 9000)), f.free_space)
            r = record(seq, max(size, 8)) if f.free_space >= 8 else None
            if r is None or len(r) > f.free_space:
                f.wrote_position = f.file_size  # sealed, as the CommitLog seals a file
                offset = f.from_offset + f.file_size
                continue
            pos = f.append(r)
            written.append((f.from_offset + pos, r))
            offset = f.from_offset + f.wrote_position
            seq += 1
            if seq % 500 == 0:
                files.flush()
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive() and warmer.error is None
    assert warmer.zeroed > 0
    try:
        for at, r in written:
            f = files.find(at)
            pos = at - f.from_offset
            assert f.view[pos:pos + len(r)] == r, f"record at {at} overwritten"
            assert os.pread(f.fd, len(r), pos) == r
        last = files.last
        tail = last.file_size - last.wrote_position
        assert os.pread(last.fd, tail, last.wrote_position) == bytes(tail)
    finally:
        files.close()


def test_closing_files_while_the_warmer_runs(tmp_path):
    files = warmed_queue(tmp_path / "log", 8 * CHUNK)
    warmer = CommitLogWarmer(files, 8 * CHUNK, idle_wait=0.001)
    stop = threading.Event()
    thread = threading.Thread(target=warmer.run, args=(stop,))
    files.last_for_write().append(record(0, 100))
    thread.start()
    try:
        while not warmer.zeroed:
            stop.wait(0.001)
        files.close()  # waits for the piece being written; later pieces see the file closed
        assert files.last.fd == -1
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive() and warmer.error is None


def test_a_sync_flush_store_warms_its_commitlog_and_reopens_with_every_record(tmp_path):
    config = small_config(tmp_path / "store", flushDiskType="SYNC_FLUSH",
                          mappedFileSizeCommitLog=CHUNK // 4)
    with MessageStore(config) as store:
        assert "rocketq-store-commitlog-warmer" in {t.name for t in store._threads}
        results = [store.put_message(StoreMessage.create("T", b"%06d" % i * 40, 0))
                   for i in range(2000)]  # about 5 files
        threads = list(store._threads)
    assert not any(t.is_alive() for t in threads)
    with MessageStore(config) as store:
        for i, r in enumerate(results):
            assert store.look_message_by_offset(r.commitlog_offset).body == b"%06d" % i * 40
        after = store.put_message(StoreMessage.create("T", b"after", 0))
        assert store.look_message_by_offset(after.commitlog_offset).body == b"after"


FULL_WHILE_ZEROING = """
import os, struct, sys
sys.path.insert(0, sys.argv[2])
from rocketq.store import DiskFullError
from rocketq.store.flush import CommitLogWarmer
from rocketq.store.mapped_file_queue import MappedFileQueue
from tests.store.test_pwrite_appends import record

root = sys.argv[1]
os.makedirs(root, exist_ok=True)
assert os.system(f"mount -t tmpfs -o size=1m tmpfs {root}") == 0
directory = os.path.join(root, "commitlog")
os.makedirs(directory)
size = 4 << 20
path = os.path.join(directory, "00000000000000000000")
with open(path, "wb") as fh:  # a file with holes (copied without its reservation)
    fh.truncate(size)
files = MappedFileQueue(directory, size)
files.set_write_mode(pwrite=True, zero_ahead=True)
files.load()
f = files.last
f.wrote_position = f.flushed_position = 0
records = [record(i, 300 + i) for i in range(50)]
for r in records:
    f.append(r)
files.flush()
end = f.wrote_position
warmer = CommitLogWarmer(files, size)
while warmer.warm_once():
    pass
assert isinstance(warmer.error, DiskFullError), warmer.error
assert "disk is full" in str(warmer.error) and path in str(warmer.error), warmer.error
assert warmer.warm_once() == 0  # that file is not zeroed further
data = b"".join(records)
assert f.view[:end] == data and os.pread(f.fd, end, 0) == data
# An append that runs out of room fails whole: its size field is never written.
big = record(99, f.zeroed_to - end + (64 << 10))
try:
    f.append(big)
except DiskFullError as exc:
    assert "disk is full" in str(exc), exc
else:
    raise AssertionError("the append found room on a full disk")
assert f.wrote_position == end and f.view[end:end + 4] == bytes(4)
f.append(records[0])
files.flush()
files.close()
files = MappedFileQueue(directory, size)
files.load()
assert files.files[0].view[:end + len(records[0])] == data + records[0]
files.close()
print("ok")
"""


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare(1) for a private mount")
def test_a_full_disk_while_zeroing_is_reported_and_loses_nothing(tmp_path):
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create a private mount namespace here")
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(["unshare", "-rm", sys.executable, "-c", FULL_WHILE_ZEROING,
                           str(tmp_path / "small"), checkout],
                          capture_output=True, text=True, timeout=120, cwd=checkout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ok"
