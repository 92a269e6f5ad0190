"""MappedFile.zero_from: the cut of a torn tail clears every byte written past the cut, looks
only at the parts of the file that hold data, and leaves what comes before the cut alone."""

from __future__ import annotations

import os

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
