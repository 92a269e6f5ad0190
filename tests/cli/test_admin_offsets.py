"""``rocketq admin offset reset``: a group's offsets moved to a time, as mqadmin's
resetOffsetByTime does it."""

from __future__ import annotations

import pytest

from rocketq import Message, Producer, PullConsumer
from rocketq.cli import main


def rows(out: str) -> dict[int, int]:
    """queue id -> offset of the printed table."""
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            table[int(parts[1])] = int(parts[2])
    return table


def reset(namesrv: str, *args: str) -> int:
    return main(["admin", "--namesrv", namesrv, "offset", "reset", *args])


def test_offset_reset_by_time(servers, capsys):
    ns = servers.namesrv
    broker = servers.brokers[0]
    servers.create_topic("CR", 2)
    with Producer("pg", namesrv=ns) as producer:
        for i in range(6):
            producer.send(Message("CR", b"m%d" % i))
    consumer = PullConsumer("CG_CLI", namesrv=ns, from_where="first", auto_commit=False)
    consumer.subscribe("CR")
    consumer.start()
    try:
        polled = []
        while len(polled) < 6:
            polled.extend(consumer.poll(2))
        consumer.commit()
    finally:
        consumer.shutdown()
    ends = {q: broker.offsets.query("CG_CLI", "CR", q) for q in (0, 1)}
    assert sum(ends.values()) == 6

    assert reset(ns, "CG_CLI", "CR", "--time", "0") == 0
    out = capsys.readouterr().out
    assert "group CG_CLI in CR reset to 0 ms" in out
    assert rows(out) == {0: 0, 1: 0}
    assert {q: broker.offsets.query("CG_CLI", "CR", q) for q in (0, 1)} == {0: 0, 1: 0}

    # Not forced, the queues' ends are later than the committed offsets: nothing moves.
    assert reset(ns, "CG_CLI", "CR", "--time", "now", "--no-force") == 0
    assert rows(capsys.readouterr().out) == {0: 0, 1: 0}
    assert reset(ns, "CG_CLI", "CR", "--time", "now") == 0
    out = capsys.readouterr().out
    assert "the end of each queue" in out and rows(out) == ends
    assert {q: broker.offsets.query("CG_CLI", "CR", q) for q in (0, 1)} == ends
    # An ISO date-time before every message.
    assert reset(ns, "CG_CLI", "CR", "--time", "2001-02-03T04:05:06+00:00") == 0
    assert rows(capsys.readouterr().out) == {0: 0, 1: 0}

    assert reset(ns, "CG_NOBODY", "CR", "--time", "now") == 1
    captured = capsys.readouterr()
    assert "CG_NOBODY" in captured.err and "not exist" in captured.err
    assert reset(ns, "CG_CLI", "NO_SUCH_TOPIC", "--time", "now") == 1
    assert "no route" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        reset(ns, "CG_CLI", "CR", "--time", "yesterday")
    assert exc.value.code == 2
    assert "not a time" in capsys.readouterr().err
