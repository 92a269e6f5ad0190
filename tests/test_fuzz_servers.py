"""A short run of the network fuzzer: malformed, truncated, oversized and hostile requests
at every port of a NameServer, a master, its slave and a controller leave no traceback in
their logs, no well-framed request unanswered and no healthy request failed or lost."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_servers.py"


@pytest.mark.slow
def test_a_short_fuzz_run_leaves_no_traceback_and_no_healthy_failure():
    done = subprocess.run([sys.executable, str(SCRIPT), "--frames", "20000", "--seed", "11",
                           "--seconds", "300", "--json"],
                          capture_output=True, text=True, timeout=900)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["frames_sent"] >= 20_000, result
    assert result["frames_malformed"] > 0 and result["frames_ha"] > 0, result
    assert result["tracebacks"] == 0, result["logs"]
    assert result["error_lines"] == 0, result["logs"]
    assert result["unanswered"] == 0, result["unanswered_by_target"]
    assert result["not_closed"] == 0, result["not_closed_by_kind"]
    assert all(result["servers_alive"].values()), result["servers_alive"]
    assert result["healthy_acked"] > 100, result
    assert result["healthy_failed"] == 0, result["healthy_failures"]
    assert result["healthy_lost"] == 0, result["healthy_lost_by_group"]
    assert done.returncode == 0, done.stderr[-3000:]
