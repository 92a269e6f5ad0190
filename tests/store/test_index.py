"""IndexFile: key, unique-id and offset-id queries, time ranges, file roll-over."""

from __future__ import annotations

import os
import struct
import time

from rocketq.store import MessageStore, StoreMessage
from rocketq.store.index_file import HEADER
from rocketq.store.index_hash import index_key_hash

from .conftest import small_config


def test_query_by_key_unique_id_and_offset_id(store):
    results = []
    for i in range(50):
        results.append(store.put_message(StoreMessage.create(
            "Orders", b"%d" % i, i % 4, keys=[f"order-{i}", "common"],
            properties={"UNIQ_KEY": f"UID{i:04d}"})))
    store.wait_dispatched()
    found = store.query_messages("Orders", "order-17")
    assert [r.body for r in found] == [b"17"]
    common = store.query_messages("Orders", "common", max_num=64)
    assert sorted(int(r.body) for r in common) == list(range(50))
    assert store.query_messages("Orders", "common", max_num=5)[0].body == b"49"  # newest first
    assert store.query_message_by_unique_key("Orders", "UID0033").body == b"33"
    assert store.query_messages("Other", "order-17") == []
    assert store.look_message_by_id(results[9].msg_id).body == b"9"


def test_unique_key_is_the_property_not_a_lookalike_inside_another_value(store):
    """Raw property strings from the wire: "UNIQ_KEY\\x01" inside another property's value
    is not the message's unique key; a key at the end (no trailing separator) still is."""
    cases = {b"1": b"note\x01UNIQ_KEY\x01FAKE\x02UNIQ_KEY\x01REAL1\x02",
             b"2": b"UNIQ_KEY\x01REAL2\x02a\x01b\x02",
             b"3": b"a\x01b\x02UNIQ_KEY\x01REAL3"}
    for body, props in cases.items():
        store.put_message(StoreMessage("Lookalike", body, properties=props))
    store.wait_dispatched()
    for body in cases:
        assert store.query_message_by_unique_key("Lookalike", f"REAL{body.decode()}"
                                                 ).body == body
    assert store.query_message_by_unique_key("Lookalike", "FAKE") is None


def test_query_time_range(store):
    store.put_message(StoreMessage.create("T", b"old", 0, keys="k"))
    time.sleep(1.1)
    cut = int(time.time() * 1000)
    store.put_message(StoreMessage.create("T", b"new", 0, keys="k"))
    store.wait_dispatched()
    assert [r.body for r in store.query_messages("T", "k", begin=cut)] == [b"new"]
    assert [r.body for r in store.query_messages("T", "k", end=cut - 1)] == [b"old"]
    assert len(store.query_messages("T", "k")) == 2


def test_index_file_layout_and_roll_over(tmp_path):
    config = small_config(tmp_path, maxHashSlotNum=7, maxIndexNum=20)
    store = MessageStore(config)
    try:
        for i in range(30):
            store.put_message(StoreMessage.create("T", b"%d" % i, 0, keys=f"key{i}"))
        store.wait_dispatched()
        files = sorted(os.listdir(config.store_path_index))
        assert len(files) >= 2  # 20 entries per file (entry 0 unused) forces a second file
        path = os.path.join(config.store_path_index, files[0])
        assert os.path.getsize(path) == 40 + 7 * 4 + 20 * 20
        # Every key is still found, across files and through collision chains of 7 slots.
        for i in range(30):
            assert [r.body for r in store.query_messages("T", f"key{i}")] == [b"%d" % i]
    finally:
        store.close()
    with open(path, "rb") as fh:
        begin_ts, end_ts, begin_phy, end_phy, slots_used, count = HEADER.unpack(fh.read(40))
        assert count == 20 and begin_phy == 0 and end_ts >= begin_ts and 0 < slots_used <= 7
        h = index_key_hash("T#key0")
        fh.seek(40 + (h % 7) * 4)
        slot = struct.unpack(">i", fh.read(4))[0]
        assert 1 <= slot < 20


def test_index_key_hash_is_abs_java_hash():
    assert index_key_hash("TopicTest#KEY1") >= 0
    assert index_key_hash("polygenelubricants") == 0  # hashCode is Integer.MIN_VALUE


def test_bulk_index_writes_the_same_bytes_as_one_at_a_time(tmp_path):
    import random

    import numpy as np

    from rocketq.store.index_file import IndexFile
    from rocketq.store.index_hash import index_key_hashes

    rng = random.Random(7)
    keys = [f"T#{rng.choice(['k', 'key', 'ключ', 'polygenelubricants'])}{rng.randrange(50)}"
            for _ in range(300)] + ["polygenelubricants"]
    hashes = index_key_hashes(keys)
    assert [int(h) for h in hashes] == [index_key_hash(k) for k in keys]
    assert hashes[-1] == 0
    phys = [i * 100 for i in range(len(keys))]
    times = [1_700_000_000_000 + i * 37 for i in range(len(keys))]
    one = IndexFile(str(tmp_path / "one"), 13, 400, create=True)
    bulk = IndexFile(str(tmp_path / "bulk"), 13, 400, create=True)
    for h, p, t in zip(hashes, phys, times, strict=True):
        assert one.put(int(h), p, t)
    # Two bulk calls, so the second chains onto slots the first filled.
    assert bulk.put_many(hashes[:120], np.array(phys[:120]), np.array(times[:120])) == 120
    assert bulk.put_many(hashes[120:], np.array(phys[120:]), np.array(times[120:])) == 181
    one.close()
    bulk.close()
    assert (tmp_path / "one").read_bytes() == (tmp_path / "bulk").read_bytes()


def test_index_service_bulk_and_small_batches_agree(tmp_path):
    from rocketq.store.index import Index

    service = Index(str(tmp_path / "index"), 31, 1000)
    service.load()
    keys = [f"T#k{i % 40}".encode() for i in range(130)]
    service.put_many(keys[:100], list(range(100)), [1_700_000_000_000] * 100)  # bulk path
    service.put_many(keys[100:], list(range(100, 130)), [1_700_000_000_000] * 30)
    service.put_many(keys[:3], [200, 201, 202], [1_700_000_000_000] * 3)  # one by one
    found = service.query("T", "k1", 100, 0, 2_000_000_000_000)
    assert found == [201, 121, 81, 41, 1]
    service.close()


def test_keys_of_one_length_hash_as_one_at_a_time():
    from rocketq.store.index_hash import index_key_hashes

    keys = [f"Orders#{i:032X}".encode() for i in range(500)] + [b"Orders#" + b"\xff" * 32]
    keys[7] = "Orders#ключ".encode().ljust(len(keys[0]), b"x")  # not ASCII: hashed alone
    assert [int(h) for h in index_key_hashes(keys)] == [
        index_key_hash(k.decode("utf-8", "replace")) for k in keys]


def test_reopening_after_a_crash_drops_torn_entries_and_the_last_records_keys(tmp_path):
    from rocketq.store.index_file import ENTRY, IndexFile

    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, 64, 100, create=True)
    f._write_header()  # the header says 1 (no entries): all that follows is past it
    # Records at offsets 0, 100 and 200, two keys each; the crash cut the last record's
    # second key, and a bulk write had put only the hash column of two more entries.
    for phys in (0, 100, 200):
        for key in ("u", "k"):
            if phys == 200 and key == "k":
                continue
            f.put(index_key_hash(f"T#{key}{phys}"), phys, 1_700_000_000_000)
    for n in range(2):
        ENTRY.pack_into(f.file.view, f._entries_at + (f.index_count + n) * 20, 12345, 0, 0, 0)
    f.file.close()
    again = IndexFile(path, 64, 100, create=False)
    # The torn entries and the last record's entry are gone; it is indexed again from 100.
    assert again.index_count == 5 and again.end_phy_offset == 100
    again.close()


def _query_repeatedly(service, total: int, ts: int, started, results: list,
                      errors: list) -> None:
    started.set()
    try:
        for _ in range(20):  # bounded
            results.append(service.query("T", "k", total, 0, ts + 1000))
    except BaseException as exc:
        errors.append(exc)


def test_a_query_racing_retention_gets_entries_or_nothing_never_an_unmapped_file(tmp_path):
    """Retention deletes index files while a thread walks long chains of one key in them: the
    query holds the file it reads, so it finds the entries or, once a file is gone, none,
    and never reads a mapping released under it; the files are closed once it lets go."""
    import threading

    from rocketq.store.index import Index

    per_file = 3000
    ts = 1_700_000_000_000
    for round_ in range(12):  # bounded: 12 deletions raced
        service = Index(str(tmp_path / f"index{round_}"), 16, per_file + 1)
        service.load()
        total = 3 * per_file
        service.put_many([b"T#k"] * total, list(range(total)), [ts] * total)
        assert len(service.files) == 3
        first_two = [f.file for f in service.files[:2]]
        errors: list[BaseException] = []
        results: list[list[int]] = []
        started = threading.Event()

        reader = threading.Thread(target=_query_repeatedly,
                                  args=(service, total, ts, started, results, errors))
        reader.start()
        started.wait(5)
        time.sleep(0.002 * (round_ % 4))
        assert service.delete_before(2 * per_file) == 2
        reader.join(30)
        assert not reader.is_alive()
        assert not errors, repr(errors[0])
        for found in results:
            # Newest first: the last file's entries always, then those of the files the
            # query held (a file deleted before its walk began gives none).
            assert found[:per_file] == list(range(total - 1, 2 * per_file - 1, -1))
            assert found == list(range(total - 1, total - 1 - len(found), -1))
        service.close()
        assert all(f.fd < 0 for f in first_two)  # closed once the query let go
