"""``rocketq bench``: its arguments, and its JSON on tiny runs against real brokers."""

from __future__ import annotations

import json

import pytest

from rocketq.cli import main


@pytest.mark.parametrize("argv", [
    ["bench", "produce", "--namesrv", "127.0.0.1:1", "--start-broker"],
    ["bench", "produce", "--namesrv", "127.0.0.1:1", "--size", "0"],
    ["bench", "produce", "--namesrv", "127.0.0.1:1", "--mode", "fast"],
    ["bench", "consume", "--namesrv", "127.0.0.1:1", "--mode", "sync"],  # no such option
    ["bench", "e2e", "--namesrv", "127.0.0.1:1", "--duration", "-1"],
    ["bench", "stress", "--namesrv", "127.0.0.1:1"],
])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def _json(capsys) -> dict:
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # one JSON object, nothing else on stdout
    return json.loads(out[0])


def test_produce_then_consume_report_what_happened(servers, capsys):
    ns = servers.namesrv
    assert main(["bench", "produce", "--namesrv", ns, "--topic", "B1", "--queues", "2",
                 "--count", "50", "--mode", "batch", "--batch", "8", "--window", "2",
                 "--size", "64", "--json", "--no-progress"]) == 0
    produced = _json(capsys)
    assert produced["command"] == "produce" and produced["mode"] == "batch"
    p = produced["produce"]
    assert p["messages"] == 50 and p["errors"] == 0 and p["msgs_s"] > 0
    assert p["mb_s"] == pytest.approx(p["msgs_s"] * 64 / 1e6, rel=0.01, abs=5e-4)  # 3 decimals
    lat = p["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    store = servers.brokers[0].store
    assert sum(store.get_max_offset("B1", q) for q in range(2)) == 50  # really sent
    assert main(["bench", "consume", "--namesrv", ns, "--topic", "B1", "--count", "50",
                 "--json", "--no-progress"]) == 0
    consumed = _json(capsys)["consume"]
    assert consumed["messages"] == 50 and "latency_ms" not in consumed


def test_e2e_table_and_progress(servers, capsys):
    assert main(["bench", "e2e", "--namesrv", servers.namesrv, "--topic", "B2", "--queues",
                 "2", "--count", "30", "--mode", "async", "--window", "4"]) == 0
    captured = capsys.readouterr()
    table = captured.out
    assert "rocketq bench e2e: topic B2, 128 B, mode async" in table
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[1:]}
    assert rows["messages"] == ["30", "30"]  # produced, consumed
    assert rows["errors"] == ["0", "0"]


def test_start_broker_with_sync_flush(capsys):
    assert main(["bench", "e2e", "--start-broker", "--flush", "sync", "--count", "20",
                 "--mode", "sync", "--json", "--no-progress"]) == 0
    result = _json(capsys)
    assert result["broker"] == "rocketq standalone, sync flush"
    assert result["produce"]["messages"] == 20 and result["consume"]["messages"] == 20
    assert result["consume"]["latency_ms"]["p50"] >= 0


def test_duration_bounds_a_run_and_progress_goes_to_stderr(servers, capsys):
    assert main(["bench", "produce", "--namesrv", servers.namesrv, "--topic", "B3",
                 "--queues", "1", "--duration", "1.5", "--mode", "oneway", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)["produce"]
    assert result["messages"] > 0 and 1.0 <= result["seconds"] < 5
    assert "latency_ms" not in result  # oneway sends get no answer to time
    assert "msgs/s" in captured.err  # the per-second line
