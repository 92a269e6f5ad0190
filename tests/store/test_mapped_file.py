"""MappedFile: creation under a temporary name and what loading clears; ``zero_from``, the
cut of a torn tail, clears every byte written past the cut, looks only at the parts of the
file that hold data, and leaves what comes before the cut alone."""

from __future__ import annotations

import os

import pytest

from rocketq.store.mapped_file import MappedFile

SIZE = 64 << 20


def test_zero_from_clears_what_was_written_past_the_cut(tmp_path):
    f = MappedFile(str(tmp_path / "00000000000000000000"), 0, SIZE, create=True)
    try:
        f.append(b"kept" * 1000)
        # Garbage past the cut: next to it, inside a later chunk, and at the very end.
        f.write_at(4000, b"torn")
        f.write_at(5 << 20, b"x" * 70_000)
        f.write_at(SIZE - 3, b"end")
        f.zero_from(4000)
        assert f.view[:4000] == b"kept" * 1000
        fd = os.open(f.path, os.O_RDONLY)
        try:
            for pos in (4000, 5 << 20, SIZE - (1 << 20)):
                assert os.pread(fd, 1 << 20, pos) == bytes(min(1 << 20, SIZE - pos))
        finally:
            os.close(fd)
        # A cut inside a chunk keeps the chunk's head.
        f.write_at(10 << 20, b"a" * 100)
        f.zero_from((10 << 20) + 50)
        assert bytes(f.view[10 << 20:(10 << 20) + 100]) == b"a" * 50 + bytes(50)
    finally:
        f.close()


def test_a_creation_cut_short_is_cleared_at_load(tmp_path):
    from rocketq.store.mapped_file import TMP_SUFFIX
    from rocketq.store.mapped_file_queue import MappedFileQueue, offset_to_name

    directory = tmp_path / "q"
    files = MappedFileQueue(str(directory), 1000)
    files.create(0).append(b"x" * 10)
    files.close()
    # A kill while making the next file: before files were made under a temporary name, a
    # short file of zeros under the real name; now a temporary file.
    (directory / offset_to_name(1000)).write_bytes(b"")
    (directory / (offset_to_name(2000) + TMP_SUFFIX)).write_bytes(b"\0" * 10)

    files = MappedFileQueue(str(directory), 1000)
    files.load()
    try:
        assert [f.from_offset for f in files.files] == [0]
        assert sorted(p.name for p in directory.iterdir()) == [offset_to_name(0)]
        assert files.create(1000).from_offset == 1000
    finally:
        files.close()


def test_a_short_file_with_data_is_still_refused(tmp_path):
    from rocketq.store.errors import StoreCorruptError
    from rocketq.store.mapped_file_queue import MappedFileQueue, offset_to_name

    directory = tmp_path / "q"
    directory.mkdir()
    (directory / offset_to_name(0)).write_bytes(b"data" * 10)

    with pytest.raises(StoreCorruptError, match="40 bytes, expected 1000"):
        MappedFileQueue(str(directory), 1000).load()


def test_files_are_made_under_a_temporary_name(tmp_path, monkeypatch):
    from rocketq.store import mapped_file, mapped_file_queue

    seen = []
    real = os.posix_fallocate

    def watch(fd, offset, size):
        seen.append(sorted(os.listdir(tmp_path / "q")))
        return real(fd, offset, size)

    monkeypatch.setattr(mapped_file.os, "posix_fallocate", watch)
    files = mapped_file_queue.MappedFileQueue(str(tmp_path / "q"), 1000)
    files.create(0)
    files.close()
    assert seen == [[mapped_file_queue.offset_to_name(0) + mapped_file.TMP_SUFFIX]]
    assert os.listdir(tmp_path / "q") == [mapped_file_queue.offset_to_name(0)]


def test_a_held_file_is_unmapped_when_its_reader_lets_go_or_after_the_forced_interval(
        tmp_path, monkeypatch):
    from rocketq.store import reference

    f = MappedFile(str(tmp_path / ("0" * 20)), 0, 4096, create=True)
    f.append(b"record")
    assert f.hold()
    assert f.close() is False  # held: still mapped, and no new hold is given
    assert not f.hold() and f.slice(0, 6) is None
    assert bytes(f.view[0:6]) == b"record"  # the holder reads on
    f.release()
    assert f.close() is True and f.fd == -1
    g = MappedFile(str(tmp_path / ("0" * 19 + "1")), 1, 4096, create=True)
    assert g.hold()  # a hold never given back
    assert g.close() is False
    monkeypatch.setattr(reference, "DESTROY_INTERVAL_FORCIBLY", 0.0)
    assert g.close() is True and g.fd == -1
