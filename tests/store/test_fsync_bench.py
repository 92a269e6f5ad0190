"""The fsync benchmark measures every method on both kinds of file (a short run on small
files)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "fsync_bench.py"


def test_a_short_run_times_every_method(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "3", "--file-mib", "2",
                           "--dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    for kind in ("fallocated", "zeroed"):
        for method in ("mmap+fdatasync", "mmap+msync", "pwrite+fdatasync"):
            row = result[f"{kind} 4 KiB {method}"]
            assert row["rounds"] == 3 and 0 < row["median_us"] <= row["p99_us"]
    assert "zeroed 1024 KiB pwrite+fdatasync" in result  # 2 MiB holds two 1 MiB rounds
    assert list(tmp_path.iterdir()) == []  # the files are gone
