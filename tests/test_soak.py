"""A two-minute soak: normal, delayed and transactional messages, a push group rebalancing
and a pull group, one broker restart; nothing acknowledged is lost, and the broker's open
files do not run away (the 5 % bound is for 30-minute runs)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"


@pytest.mark.slow
def test_a_two_minute_soak_loses_nothing():
    done = subprocess.run([sys.executable, str(SCRIPT), "--minutes", "2", "--json"],
                          capture_output=True, text=True, timeout=900)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["minutes"]) == 2, result["minutes"]
    for minute in result["minutes"]:
        assert minute["rss_mb"] > 0 and minute["fds"] > 0 and minute["threads"] > 0, minute
    assert result["restarts"] == 1, result
    assert result["rebalances"] >= 2, result
    assert min(result["acked_by_kind"].values()) > 0, result["acked_by_kind"]
    assert result["consumed"] >= result["acked"], result
    assert result["lost"] == 0, result["lost_by_group"]
    assert result["tracebacks"] == 0, result
    assert result["client_error"] is None, result["client_error"]
    assert result["fds_growth_pct"] < 50, result["minutes"]
    assert done.returncode == 0, done.stderr[-3000:]
