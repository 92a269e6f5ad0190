"""Recovery: clean restarts, crashes (SIGKILL of a real writer), torn tails, lost logic files."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from rocketq.protocol.message import MessageFormatError, MessageRecord, encode_record
from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage
from rocketq.store.checkpoint import Checkpoint
from rocketq.store.index_file import ENTRY

from .crash_writer import crash_config

HERE = os.path.dirname(__file__)


def fill(store, n, topic="T", queues=2):
    return [store.put_message(StoreMessage.create(topic, b"body-%d" % i, i % queues,
                                                  keys=f"k{i}")) for i in range(n)]


def read_all(store, topic, queue_id):
    out, offset = [], store.get_min_offset(topic, queue_id)
    while True:
        g = store.get_messages(topic, queue_id, offset, 32)
        if not g.message_count:
            return out
        out.extend(g.decode())
        offset = g.next_begin_offset
        g.release()


def assert_commitlog_sound(store):
    """Every file holds whole, CRC-checked records up to its end (a full file may close with
    the blank filler), and the last one ends exactly at the CommitLog's max offset."""
    from rocketq.protocol.message import BLANK_MAGIC, SIZE_AND_MAGIC, walk_records

    files = store.commitlog.files.files
    for f in files:
        end = 0
        try:
            for pos, fields, *_ in walk_records(f.view, 0, f.wrote_position, check_crc=True):
                end = pos + fields[0]
        except MessageFormatError:
            size, magic = SIZE_AND_MAGIC.unpack_from(f.view, end)
            assert magic == BLANK_MAGIC and end + size == f.file_size, (
                f"unsound record at {f.from_offset + end}")
            end = f.file_size
        assert end == f.wrote_position, f"records end at {end}, not {f.wrote_position}"
    assert files[-1].from_offset + files[-1].wrote_position == store.commitlog.max_offset


def test_clean_restart_keeps_everything_and_is_fast(config):
    store = MessageStore(config)
    results = fill(store, 500)
    store.close()
    assert not os.path.exists(config.abort_path)
    t0 = time.monotonic()
    store = MessageStore(config)
    elapsed = time.monotonic() - t0
    try:
        assert not store.recovered_abnormally
        assert store.commitlog.max_offset == results[-1].commitlog_offset + results[-1].size
        assert [r.body for r in read_all(store, "T", 1)] == [b"body-%d" % i
                                                             for i in range(1, 500, 2)]
        assert store.query_messages("T", "k77")[0].body == b"body-77"
        r = store.put_message(StoreMessage.create("T", b"next", 0))
        assert r.queue_offset == 250
        assert elapsed < 2.0
    finally:
        store.close()


def test_abort_marker_means_abnormal_recovery(config):
    store = MessageStore(config)
    fill(store, 100)
    store.close()
    open(config.abort_path, "w").close()
    store = MessageStore(config)
    try:
        assert store.recovered_abnormally
        assert len(read_all(store, "T", 0)) == 50
    finally:
        store.close()


def test_lost_consume_queues_and_index_are_rebuilt(config):
    store = MessageStore(config)
    fill(store, 300)
    store.close()
    shutil.rmtree(config.store_path_consume_queue)
    shutil.rmtree(config.store_path_index)
    os.unlink(config.checkpoint_path)
    open(config.abort_path, "w").close()
    store = MessageStore(config)
    try:
        assert [r.queue_offset for r in read_all(store, "T", 0)] == list(range(150))
        assert store.query_messages("T", "k299")[0].body == b"body-299"
        assert store.put_message(StoreMessage.create("T", b"x", 1)).queue_offset == 150
    finally:
        store.close()


def test_consume_queue_past_commitlog_end_is_truncated(config):
    store = MessageStore(config)
    results = fill(store, 40, queues=1)
    store.close()
    # Cut the CommitLog after record 29, as if its tail never reached the disk while the
    # ConsumeQueue's did; the checkpoint then only vouches for records before the cut.
    cut = results[30].commitlog_offset
    cp = Checkpoint(config.checkpoint_path)
    cp.flushed_offset = cp.dispatched_offset = results[10].commitlog_offset
    cp.flush()
    cp.close()
    path = os.path.join(config.storePathCommitLog, "0" * 20)
    with open(path, "r+b") as fh:
        fh.seek(cut)
        fh.write(bytes(config.mappedFileSizeCommitLog - cut))
    open(config.abort_path, "w").close()
    store = MessageStore(config)
    try:
        assert store.commitlog.max_offset == cut
        assert store.get_max_offset("T", 0) == 30
        assert len(read_all(store, "T", 0)) == 30
        assert store.query_messages("T", "k35") == []  # index entries past the cut are ignored
        r = store.put_message(StoreMessage.create("T", b"after", 0, keys="k35"))
        assert (r.queue_offset, r.commitlog_offset) == (30, cut)
        store.wait_dispatched()
        assert [m.body for m in store.query_messages("T", "k35")] == [b"after"]
    finally:
        store.close()


def write_torn_tail(config, at: int, body=b"torn" * 20) -> None:
    record = encode_record(MessageRecord(topic="T", body=body, commitlog_offset=at))
    torn = bytearray(record)
    torn[95:] = b"\0" * (len(torn) - 95)  # header and part of the body only
    file_size = config.mappedFileSizeCommitLog
    path = os.path.join(config.storePathCommitLog, f"{at - at % file_size:020d}")
    with open(path, "r+b") as fh:
        fh.seek(at % file_size)
        fh.write(torn)


def test_torn_tail_written_by_hand_is_cut(config):
    store = MessageStore(config)
    results = fill(store, 20)
    end = store.commitlog.max_offset
    store.close()
    write_torn_tail(config, end)
    open(config.abort_path, "w").close()
    store = MessageStore(config)
    try:
        assert store.recovered_abnormally and store.commitlog.max_offset == end
        assert_commitlog_sound(store)
        assert len(read_all(store, "T", 0)) + len(read_all(store, "T", 1)) == len(results)
        r = store.put_message(StoreMessage.create("T", b"new", 0))
        assert r.commitlog_offset == end
    finally:
        store.close()


def run_crash(root: str, durable_wanted: int) -> list[tuple[int, int, int]]:
    """Start the writer, let it report ``durable_wanted`` durable appends, SIGKILL it."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_writer.py"), root],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    durable = []
    deadline = time.monotonic() + 60
    try:
        while len(durable) < durable_wanted and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            durable.append(tuple(map(int, line.split())))
    finally:
        proc.send_signal(signal.SIGKILL)
        rest, err = proc.communicate(timeout=30)
    durable.extend(tuple(map(int, line.split())) for line in rest.splitlines() if line.strip())
    assert len(durable) >= durable_wanted, err[-2000:]
    assert proc.returncode == -signal.SIGKILL
    return durable


def check_durable(store, durable):
    by_queue: dict[int, dict[int, int]] = {}
    for queue_id, seq, offset in durable:
        by_queue.setdefault(queue_id, {})[seq] = offset
    for queue_id, seqs in by_queue.items():
        records = read_all(store, "Crash", queue_id)
        bodies = {}
        for rec in records:
            q, s, _ = rec.body.split(b"-", 2)
            assert int(q[1:]) == queue_id
            bodies[int(s[1:])] = rec
        for seq, offset in seqs.items():
            rec = bodies.get(seq)
            assert rec is not None, f"durable message q{queue_id} s{seq} lost"
            assert rec.commitlog_offset == offset and rec.keys == [f"q{queue_id}s{seq}"]
        # Within a queue, messages keep their order and offsets stay dense.
        assert [r.queue_offset for r in records] == list(range(len(records)))


@pytest.mark.slow
def test_sigkill_during_sync_flush_loses_no_durable_message(tmp_path):
    root = str(tmp_path / "crash")
    durable = run_crash(root, 600)
    assert os.path.exists(os.path.join(root, "abort"))
    store = MessageStore(crash_config(root))
    try:
        assert store.recovered_abnormally
        assert_commitlog_sound(store)
        check_durable(store, durable)
        # Index entries were rebuilt or kept for durable messages.
        q, s, _ = durable[len(durable) // 2]
        assert store.query_messages("Crash", f"q{q}s{s}")
        end = store.commitlog.max_offset
        r = store.put_message(StoreMessage.create("Crash", b"q0-s999999-after", 0))
        assert r.commitlog_offset == end
    finally:
        store.close()


@pytest.mark.slow
def test_sigkill_then_torn_tail_by_hand(tmp_path):
    root = str(tmp_path / "crash")
    durable = run_crash(root, 300)
    config = crash_config(root)
    # Find the end as recovery sees it, then leave a half-written record there.
    store = MessageStore(config)
    end = store.commitlog.max_offset
    store.close()
    write_torn_tail(config, end, body=b"z" * 500)
    open(config.abort_path, "w").close()
    store = MessageStore(config)
    try:
        assert store.recovered_abnormally and store.commitlog.max_offset == end
        assert_commitlog_sound(store)
        check_durable(store, durable)
    finally:
        store.close()


SPLIT_WRITER = r"""
import os, signal, sys, time
from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage
from rocketq.store.index_file import IndexFile

flush = IndexFile.flush

def die_when_full(self):
    # Rolling over to the next index file flushes the full one first: die in its fdatasync,
    # its header written, with only part of the last record's keys in it.
    if self.is_full:
        self._write_header()
        os.kill(os.getpid(), signal.SIGKILL)
    flush(self)

IndexFile.flush = die_when_full
store = MessageStore(MessageStoreConfig(
    storePathRootDir=sys.argv[1], mappedFileSizeCommitLog=1 << 20,
    mappedFileSizeConsumeQueue=2000, maxHashSlotNum=64, maxIndexNum=9))
store.put_message(StoreMessage.create("Split", b"m0", 0, keys=["a0", "b0", "c0"]))
for n in range(1, 20):  # bounded: the dispatcher kills the process at the 8th entry
    store.put_message(StoreMessage.create("Split", b"m%d" % n, 0, keys=[f"a{n}", f"b{n}"]))
    time.sleep(0.05)
time.sleep(10)
sys.exit(3)
"""


@pytest.mark.slow
def test_a_record_whose_keys_a_crash_split_between_index_files_is_indexed_whole(tmp_path):
    """An index file holds 8 entries: the 4th record's first key fills the first file and
    the process is SIGKILLed as the dispatcher rolls over to the next one. Recovery indexes
    that record again, whole: every key of every recovered message is found."""
    root = str(tmp_path / "store")
    child = subprocess.run([sys.executable, "-c", SPLIT_WRITER, root], capture_output=True,
                           timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    store = MessageStore(MessageStoreConfig(
        storePathRootDir=root, mappedFileSizeCommitLog=1 << 20,
        mappedFileSizeConsumeQueue=2000, maxHashSlotNum=64, maxIndexNum=9))
    try:
        assert store.recovered_abnormally
        records = read_all(store, "Split", 0)
        assert len(records) >= 4
        for record in records:
            for key in record.keys:
                found = store.query_messages("Split", key)
                assert [r.body for r in found] == [record.body], key
        # The entries are those of the records, each once and in CommitLog order.
        entries = [phys for f in store.index.files for phys in
                   (ENTRY.unpack_from(f.file.mm, f._entries_at + n * 20)[1]
                    for n in range(1, f.index_count))]
        assert entries == [r.commitlog_offset for r in records for _ in r.keys]
    finally:
        store.close()


UNITS_WRITER = r"""
import os, signal, sys
from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage
store = MessageStore(MessageStoreConfig(
    storePathRootDir=sys.argv[1], mappedFileSizeCommitLog=1 << 20,
    mappedFileSizeConsumeQueue=2000, flushIntervalConsumeQueue=60_000))
for n in range(60):
    store.put_message(StoreMessage.create("Torn", b"m%02d" % n, 0))
assert store.wait_dispatched(timeout=10)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_units_a_crash_left_unwritten_before_the_last_one_are_written_again(tmp_path):
    """A process killed while it copies a run of units through the mapping may leave any of
    them unwritten or torn, not only the last (a copy need not store its bytes in order).
    Recovery after the crash writes the units of the records it scans again where they
    differ, so no message is lost behind a zero unit."""
    root = str(tmp_path / "store")
    child = subprocess.run([sys.executable, "-c", UNITS_WRITER, root], capture_output=True,
                           timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    path = os.path.join(root, "consumequeue", "Torn", "0", "0" * 20)
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, bytes(20), 40 * 20)  # unit 40 never written
        os.pwrite(fd, bytes(4), 50 * 20)  # unit 50 torn: its offset's first bytes missing
        os.pwrite(fd, bytes(20), 0)  # the queue's first unit never written
    finally:
        os.close(fd)
    store = MessageStore(MessageStoreConfig(
        storePathRootDir=root, mappedFileSizeCommitLog=1 << 20,
        mappedFileSizeConsumeQueue=2000))
    try:
        assert store.recovered_abnormally
        assert store.get_min_offset("Torn", 0) == 0
        records = read_all(store, "Torn", 0)
        assert [r.body for r in records] == [b"m%02d" % n for n in range(60)]
        assert [r.queue_offset for r in records] == list(range(60))
    finally:
        store.close()
