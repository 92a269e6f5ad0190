"""What one SYNC_FLUSH round costs on this machine's disk, by the way the CommitLog's bytes
reach the file:

    python benchmarks/fsync_bench.py                    # a table
    python benchmarks/fsync_bench.py --rounds 50 --json # one JSON object

Methods, each on its own 64 MiB file, for rounds of 4 KiB, 64 KiB and 1 MiB appended in
sequence (a round: write the bytes, then make them durable):

``mmap+fdatasync``
    write through a shared mapping, then ``fdatasync`` the file (rocketq's path today);
``mmap+msync``
    write through the mapping, then ``msync(MS_SYNC)`` of the pages written;
``pwrite+fdatasync``
    ``os.pwrite`` into the file, then ``fdatasync`` (RocketMQ's transientStorePoolEnable
    writes through a buffer for this reason).

Two kinds of file: ``fallocated`` (``posix_fallocate``: blocks reserved but unwritten, as
rocketq's mapped files are made) and ``zeroed`` (zeros written and synced first, as
RocketMQ's warmMappedFile does): the first write into an unwritten block makes the next
``fdatasync`` commit the filesystem's metadata too. The methods take turns round by round
(the order rotating), so a noisy moment of this shared machine falls on all of them. Times
are the write and the sync together, in microseconds: median and p99.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import tempfile
import time

#: Each method's file (``--file-mib``); a round never wraps around it.
FILE_SIZE = 64 << 20
METHODS = ("mmap+fdatasync", "mmap+msync", "pwrite+fdatasync")
CHUNKS = (4 << 10, 64 << 10, 1 << 20)


def make_file(path: str, kind: str) -> int:
    """A 64 MiB file of ``kind`` (``fallocated`` or ``zeroed``), synced; its descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    if kind == "fallocated":
        os.posix_fallocate(fd, 0, FILE_SIZE)
    else:
        zeros = bytes(1 << 20)
        for i in range(FILE_SIZE >> 20):
            os.pwrite(fd, zeros, i << 20)
    os.fsync(fd)
    return fd


def measure(directory: str, kind: str, chunk: int, rounds: int) -> dict[str, list[float]]:
    """``rounds`` rounds of ``chunk`` bytes per method; the times in microseconds."""
    files = {}
    for method in METHODS:
        fd = make_file(os.path.join(directory, f"{method}.{kind}"), kind)
        files[method] = [fd, mmap.mmap(fd, FILE_SIZE) if method.startswith("mmap") else None, 0]
    data = os.urandom(chunk)
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    try:
        for r in range(rounds):
            for method in METHODS[r % 3:] + METHODS[:r % 3]:
                fd, mapped, pos = files[method]
                if pos + chunk > FILE_SIZE:
                    break  # bounded: a file is never written twice over
                start = time.perf_counter()
                if mapped is not None:
                    mapped[pos:pos + chunk] = data
                    if method == "mmap+msync":
                        first = pos - pos % mmap.PAGESIZE
                        mapped.flush(first, pos + chunk - first)
                    else:
                        os.fdatasync(fd)
                else:
                    os.pwrite(fd, data, pos)
                    os.fdatasync(fd)
                times[method].append((time.perf_counter() - start) * 1e6)
                files[method][2] = pos + chunk
    finally:
        for fd, mapped, _ in files.values():
            if mapped is not None:
                mapped.close()
            os.close(fd)
    return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def run(rounds: int, directory: str | None) -> dict[str, dict[str, float]]:
    """Every kind, chunk and method: ``{"<kind> <KiB> KiB <method>": {median_us, p99_us,
    rounds}}`` (fewer rounds than asked where a file would be written twice over)."""
    work = tempfile.mkdtemp(prefix="rocketq-fsync-", dir=directory)
    out: dict[str, dict[str, float]] = {}
    try:
        for kind in ("fallocated", "zeroed"):
            for chunk in CHUNKS:
                for method, values in measure(work, kind, chunk, rounds).items():
                    if values:
                        out[f"{kind} {chunk >> 10} KiB {method}"] = {
                            "median_us": round(statistics.median(values), 1),
                            "p99_us": round(percentile(values, 0.99), 1),
                            "rounds": len(values)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="rounds per size and method")
    parser.add_argument("--dir", default=None,
                        help="where the files go (default: the temp directory; use the "
                             "disk the store is on)")
    parser.add_argument("--file-mib", type=int, default=64, help="each method's file, MiB")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    global FILE_SIZE
    FILE_SIZE = max(1, args.file_mib) << 20
    result = run(max(1, args.rounds), args.dir)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'file':<11}{'round':>8}  " + "".join(f"{m:>24}" for m in METHODS))
    for kind in ("fallocated", "zeroed"):
        for chunk in CHUNKS:
            cells = []
            for method in METHODS:
                row = result.get(f"{kind} {chunk >> 10} KiB {method}")
                cells.append(f"{row['median_us']:>10.0f} / {row['p99_us']:<7.0f} us"
                             if row else f"{'-':>24}")
            print(f"{kind:<11}{chunk >> 10:>5} KiB  " + "".join(f"{c:>24}" for c in cells))
    print("median / p99 of a write and its sync, microseconds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
