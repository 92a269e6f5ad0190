"""The history checker catches what it is for: planted losses, double deliveries and two
writers, each named with its message and time; and it passes a clean history."""

from __future__ import annotations

import json

from .history import Op, Recorder, check, load

T0 = 1_700_000_000.0
MASTER, SLAVE = "10.213.1.2:10911", "10.213.1.3:10911"


def send(i: int, start: float, end: float, outcome: str = "ok", writer: str = MASTER,
         queue: int | None = None, offset: int | None = None, epoch: int | None = None) -> Op:
    return Op("producer", "send", f"M{i}", T0 + start, T0 + end, outcome, body=str(i),
              topic="T", broker="broker-a", writer=writer if outcome == "ok" else "",
              queue=i % 4 if queue is None else queue, offset=i // 4 if offset is None
              else offset, epoch=epoch)


def read(i: int, at: float, group: str = "g", process: str = "consumer") -> Op:
    return Op(process, "read", f"M{i}", T0 + at, T0 + at, broker="broker-a", group=group,
              queue=i % 4, offset=i // 4)


def clean() -> list[Op]:
    """40 sends one after another, two of them not acknowledged (one of which was stored
    anyway and is read), every stored one read once by each of two groups."""
    ops = []
    for i in range(40):
        outcome = {7: "unknown", 8: "failed"}.get(i, "ok")
        ops.append(send(i, i * 0.1, i * 0.1 + 0.05, outcome))
    for i in range(40):
        if i != 8:
            ops.append(read(i, 5 + i * 0.01))
            ops.append(read(i, 6 + i * 0.01, group="h"))
    return ops


def test_clean_history_passes():
    verdict = check(clean())
    assert verdict.ok, verdict
    assert verdict.stats == {"sends": 40, "acknowledged": 38, "unknown": 1, "failed": 1,
                             "reads": 78, "groups": 2}
    assert str(verdict).startswith("valid")


def test_a_planted_loss_is_named_with_its_message_and_time():
    ops = [o for o in clean() if not (o.kind == "read" and o.msg_id == "M12" and o.group == "h")]
    verdict = check(ops)
    assert [(v.kind, v.msg_id) for v in verdict.violations] == [("lost", "M12")]
    v = verdict.violations[0]
    assert abs(v.time - 1.25) < 1e-6  # acknowledged 1.25 s into the history
    assert "consumer group 'h'" in v.detail and MASTER in v.detail
    assert "lost at +1.250 s: message M12" in str(verdict)


def test_unacknowledged_sends_may_be_missing():
    ops = [o for o in clean() if o.msg_id != "M7" or o.kind == "send"]
    assert check(ops).ok


def test_only_the_named_groups_are_held_to_every_message():
    ops = clean() + [read(3, 9, group="late-joiner")]
    assert len(check(ops).of("lost")) == 37
    assert check(ops, groups=["g", "h"]).ok


def test_a_planted_double_delivery_is_caught():
    ops = clean() + [read(20, 7.5, process="consumer-2")]
    verdict = check(ops)
    assert [(v.kind, v.msg_id) for v in verdict.violations] == [("duplicate", "M20")]
    assert "read twice by consumer group 'g'" in verdict.violations[0].detail
    assert "consumer-2" in verdict.violations[0].detail
    # The same message read once by each of two groups is no duplicate.
    assert check(clean()).ok


def test_a_read_of_a_message_never_sent_is_a_phantom():
    verdict = check(clean() + [read(99, 7)])
    assert [(v.kind, v.msg_id) for v in verdict.violations] == [("phantom", "M99")]


def test_a_planted_two_writer_window_is_caught():
    # The old master keeps acknowledging writes after the slave took over and acknowledged
    # some of its own: M50 from the new writer lies between M49 and M51 of the old one.
    ops = clean() + [send(49, 4.10, 4.15), send(50, 4.20, 4.25, writer=SLAVE, queue=9,
                                                offset=0),
                     send(51, 4.30, 4.35, queue=8, offset=0)]
    ops += [read(i, 8 + i * 0.01, group=g) for i in (49, 50, 51) for g in ("g", "h")]
    verdict = check(ops)
    assert [(v.kind, v.msg_id) for v in verdict.violations] == [("two-writers", "M50")]
    assert SLAVE in verdict.violations[0].detail and MASTER in verdict.violations[0].detail
    assert abs(verdict.violations[0].time - 4.25) < 1e-6


def test_overlapping_sends_of_two_writers_are_no_violation():
    # A clean handover: the last send of the old master and the first of the new one were in
    # flight together, so neither certainly came after the other.
    ops = [send(0, 0.0, 0.1), send(1, 0.2, 0.6), send(2, 0.3, 0.5, writer=SLAVE, queue=5),
           send(3, 0.7, 0.8, writer=SLAVE, queue=5)]
    assert not check(ops).of("two-writers")


def test_a_writer_back_under_a_newer_epoch_is_allowed():
    # A, then B (epoch 2), then A again: a violation unless A came back under epoch 3.
    ops = [send(0, 0.0, 0.1, epoch=1), send(1, 0.2, 0.3, writer=SLAVE, queue=5, epoch=2),
           send(2, 0.4, 0.5, queue=6, epoch=3)]
    assert check(ops).ok
    ops[2] = send(2, 0.4, 0.5, queue=6, epoch=2)
    assert [v.kind for v in check(ops).violations] == ["two-writers"]
    assert "epoch 2 not above 2" in check(ops).violations[0].detail
    ops[2] = send(2, 0.4, 0.5, queue=6)
    assert [v.kind for v in check(ops).violations] == ["two-writers"]


def test_two_messages_acknowledged_at_one_offset_clash():
    ops = [send(0, 0.0, 0.1, queue=0, offset=0),
           send(1, 0.05, 0.2, writer=SLAVE, queue=0, offset=0)]
    verdict = check(ops)
    assert [(v.kind, v.msg_id) for v in verdict.violations] == [("offset-clash", "M1")]
    assert "M0" in verdict.violations[0].detail


def test_a_write_behind_an_acknowledged_one_is_stale():
    ops = [send(0, 0.0, 0.1, queue=0, offset=5), send(1, 0.2, 0.3, queue=0, offset=4)]
    verdict = check(ops)
    assert [(v.kind, v.msg_id) for v in verdict.violations] == [("stale-write", "M1")]
    # Sends in flight together may take their offsets in either order.
    assert check([send(0, 0.0, 0.3, queue=0, offset=5),
                  send(1, 0.1, 0.2, queue=0, offset=4)]).ok


def test_recorder_and_load_round_trip(tmp_path):
    path = str(tmp_path / "p.jsonl")
    with Recorder(path, "producer") as rec:
        rec.record("send", "M1", T0, T0 + 1, outcome="ok", broker="broker-a", writer=MASTER,
                   queue=1, offset=0)
        rec.record("send", "M2", T0 + 1, outcome="unknown", error="ClientTimeoutError")
    with open(path, "a") as fh:
        fh.write('{"process": "producer", "kind": "se')  # a line cut short by a kill
    ops = load([path])
    assert [(o.msg_id, o.outcome) for o in ops] == [("M1", "ok"), ("M2", "unknown")]
    assert ops[1].end >= T0 + 1
    assert json.loads(open(path).readline())["writer"] == MASTER
