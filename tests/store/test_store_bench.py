"""The store benchmark measures every figure with the compiled modules and with their pure
twins, alternating (a short real run: tiny counts, two rounds)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "store_bench.py"
KEYS = ("disk_write_mb_s", "async_append_msgs_s", "async_append_mb_s",
        "async_append_ratio_to_disk", "async_append_with_dispatch_msgs_s",
        "async_append_single_msgs_s", "sync_append_1_msgs_s", "sync_append_64_msgs_s",
        "sync_group_commit_speedup", "read_msgs_s")
TINY = ["--count", "2000", "--sync-seconds", "0.2", "--disk-mb", "4"]


def run(tmp_path: pathlib.Path, *extra: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--dir", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_json_has_every_figure_compiled_and_pure_with_their_spread(tmp_path):
    result = json.loads(run(tmp_path, "--rounds", "2", "--json"))
    for key in KEYS:
        for name in (key, f"{key}_pure"):
            assert result[name] > 0, name
            low, high = result["spread"][name]
            assert 0 < low <= result[name] <= high, (name, low, result[name], high)
    assert result["rounds"] == 2
    assert isinstance(result["compiled"], bool)
    modules = result["compiled_modules"]
    assert "rocketq.protocol.codec" in modules
    assert result["compiled"] == all(modules.values())
    if importlib.util.find_spec("rocketq.protocol._ccodec") is None:
        assert result["compiled"] is False  # nothing compiled to run
    assert list(tmp_path.iterdir()) == []  # the stores are gone


def test_table_shows_both_columns(tmp_path):
    table = run(tmp_path)
    assert "128-byte message bodies" in table
    assert "pure Python" in table and "compiled" in table
    assert "ASYNC_FLUSH append, batches of 64" in table
