"""A short run of the chaos script: random SIGKILL and SIGSTOP of masters, slaves and
controller nodes under load lose no acknowledged message."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "chaos.py"


@pytest.mark.slow
def test_a_short_chaos_run_loses_nothing_acknowledged():
    done = subprocess.run([sys.executable, str(SCRIPT), "--kills", "3", "--seed", "7",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["kills"] == 3
    assert result["acked"] > 100
    assert result["lost"] == 0
