"""The clickstream example end to end: generator -> Spark pipeline -> result topic, Parquet
and the printer, on a small data set whose aggregates are computed here independently."""

from __future__ import annotations

import collections

import pytest

from examples.clickstream import generator, pipeline, printer

pytestmark = pytest.mark.slow

START_MS = 1_700_000_000_000  # a multiple of the 10 s window
STEP_MS = 100


def expected_windows(events):
    """What the pipeline must emit: windows that closed under the 5 s watermark."""
    watermark = max(e["ts"] for e in events) - 5000
    out = collections.defaultdict(lambda: [0, 0, 0])
    for e in events:
        start = e["ts"] - e["ts"] % 10_000
        if start + 10_000 <= watermark:
            acc = out[(start, e["page"])]
            acc[0] += 1
            acc[1] += e["action"] == "purchase"
            acc[2] += e["amount_cents"]
    return {(start, page, *acc) for (start, page), acc in out.items()}


def test_clickstream_pipeline_end_to_end(spark, servers, tmp_path, capsys):
    servers.create_topic("Clicks", 2)
    servers.create_topic(pipeline.RESULT_TOPIC, 2)
    events = generator.publish(servers.namesrv, 300, START_MS, STEP_MS)
    expected = expected_windows(events)
    assert len({w[0] for w in expected}) == 2  # 30 s of events: two windows close
    parquet = tmp_path / "stats.parquet"
    query = pipeline.start(spark, servers.namesrv, str(tmp_path / "checkpoint"), str(parquet),
                           available_now=True)
    query.awaitTermination(180)
    assert query.exception() is None
    # The results went through the exactly-once sink: each batch has a decision.
    assert servers.brokers[0].sinks.decisions.get("clickstream-stats")
    written = {(int(r.window_start.timestamp() * 1000), r.page, r.events, r.purchases,
                r.revenue_cents)
               for r in spark.read.parquet(str(parquet)).collect()}
    assert written == expected
    shown = printer.consume(servers.namesrv, seconds=30, count=len(expected))
    assert sorted((s["page"], s["events"], s["purchases"], s["revenue_cents"]) for s in shown) \
        == sorted(w[1:] for w in expected)
    out = capsys.readouterr().out
    assert printer.HEADER in out and "/checkout" in out
