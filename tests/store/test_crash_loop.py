"""A short run of ``benchmarks/crash_loop.py``: a SYNC_FLUSH writer killed with SIGKILL round
after round around file rollovers (compiled and pure-Python codec alternating), every
ConsumeQueue unit checked against its record and every durable append found after each
recovery."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "crash_loop.py"


@pytest.mark.slow
def test_sigkill_rounds_around_rollovers_leave_every_unit_on_its_record():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "24", "--seconds", "90",
                           "--seed", "27", "--json"], capture_output=True, text=True,
                          timeout=240)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["failed_rounds"] == 0, (result["problems"], proc.stderr[-3000:])
    assert proc.returncode == 0
    assert result["rounds"] >= 10 and result["durable"] > 500
    assert result["commitlog_files_last"] > 3  # the rounds crossed rollovers
