"""The logs example end to end on the Spark standalone cluster and ``rocketq cluster``: three
services on rocketq's client and one on the C++ client write log lines live, the pipeline
raises alerts exactly once; the alerts are checked against the lines read back here."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from examples.logs import pipeline
from examples.logs.lines import LOG_TOPIC

from ..compat.clients import client_python
from .clusters import read_topic

pytestmark = pytest.mark.slow


def expected_alerts(lines):
    """Windows closed under the watermark whose ERROR lines reached the threshold."""
    parsed = []
    for text in lines:
        stamp, level, service, _rest = text.split(" ", 3)
        ms = int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
        parsed.append((ms, level, service))
    watermark = max(ms for ms, _l, _s in parsed) - 5000
    counts = collections.defaultdict(lambda: [0, 0])
    for ms, level, service in parsed:
        start = ms - ms % 10_000
        if start + 10_000 <= watermark:
            counts[(service, start)][0] += level == "ERROR"
            counts[(service, start)][1] += 1
    return {(service, datetime.fromtimestamp(start / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
             errors, n) for (service, start), (errors, n) in counts.items()
            if errors >= pipeline.ALERT_ERRORS}


def test_logs_example_on_a_spark_cluster(spark_standalone, rocketq_cluster, tmp_path):
    cpp = client_python("rocketmq-0.4.4", "rocketmq==0.4.4")
    proc = subprocess.run(
        [sys.executable, "-m", "examples.logs", "--namesrv", rocketq_cluster.namesrv,
         "--master", spark_standalone.url, "--seconds", "20", "--cpp-python", cpp,
         "--work-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    written = sum(summary["lines"].values())
    assert set(summary["lines"]) == {"checkout", "payments", "search", "inventory"}
    lines = [m.body.decode() for m in read_topic(rocketq_cluster.namesrv, LOG_TOPIC, written)]
    assert len(lines) == written
    # The C++ client's service wrote its lines like the others.
    assert sum(" inventory " in text for text in lines) == summary["lines"]["inventory"] > 0
    expected = expected_alerts(lines)
    assert {s for s, *_ in expected} >= {"payments", "inventory"}  # the noisy services
    got = [json.loads(m.body) for m in read_topic(rocketq_cluster.namesrv,
                                                  pipeline.ALERT_TOPIC, len(expected))]
    alerts = [(a["service"], a["window_start"], a["errors"], a["lines"]) for a in got]
    assert len(alerts) == len(set(alerts))  # none twice
    assert set(alerts) == expected
    # The printer saw them all and timed them.
    assert summary["alerts"] == len(expected) and summary["latency_max_s"] is not None
