"""A short run of ``benchmarks/chaos.py --partitions``: network faults and kills drawn at
random, judged by the history checker."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from .net import unavailable

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "chaos.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

WHY = unavailable()
if WHY:
    pytest.skip(WHY, allow_module_level=True)


def test_a_short_partition_chaos_run_is_valid():
    done = subprocess.run([sys.executable, str(SCRIPT), "--partitions", "--faults", "4",
                           "--seed", "3", "--json"], capture_output=True, text=True,
                          timeout=380)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["faults"] == 4
    assert sum(row["count"] for row in result["per_kind"].values()) == 4
    assert result["acked"] > 100
    assert (result["lost"], result["duplicated"], result["two_writer_windows"]) == (0, 0, 0)
    assert result["first_ack_max_s"] is not None
    assert result["epoch_files_agree"]
