"""The history of a partition test, and the checker that judges it afterwards (Jepsen style).

Every client records each operation it makes as one JSON line, written and flushed as soon as
its outcome is known (a client killed midway leaves every finished operation behind):

* a **send**: when it began (``start``) and when its outcome was known (``end``); the
  outcome: ``ok`` (SEND_OK: acknowledged), ``failed`` (certainly not stored: refused before
  anything reached a broker) or ``unknown`` (a timeout, a broken connection, FLUSH_SLAVE_TIMEOUT
  or SLAVE_NOT_AVAILABLE: it may be stored or not); for an acknowledged send, where the
  result says it went: the broker group (``broker``, the brokerName), the queue and queue
  offset, and the ``writer``, the address of the broker that stored it (the store host in
  its offset message id);
* a **read**: a message a consumer group (``group``) was handed, with where it came from.

``check(ops)`` then returns a :class:`Verdict`; each :class:`Violation` names the message,
the time (seconds from the history's first operation) and what is wrong:

``lost``
    an acknowledged send that a consumer group never read (every group that read anything is
    held to every acknowledged message, unless ``groups`` names the ones to hold).
``duplicate``
    a message read more than once by one consumer group.
``phantom``
    a message read that no client ever sent.
``offset-clash``
    two different acknowledged messages at the same queue offset of the same queue: two
    brokers of the group appended to diverging logs, and both acknowledged.
``stale-write``
    an acknowledged send ``t`` begun after another one ``s`` of the same queue was
    acknowledged, yet stored at an offset not after ``s``'s: its writer appended to a log that
    did not hold ``s`` (a master that had been replaced, still taking writes).
``two-writers``
    brokers A and B of one group, and acknowledged sends s and u stored by A and t stored by
    B, with s acknowledged before t began and t acknowledged before u began: A took writes
    before and after the whole of B's write, so both accepted writes at one moment. Fencing
    only allows A to write again under a newer epoch: when sends record the ``epoch`` they
    were stored under, u is held against t only if its epoch is not above t's.

The writer and the time bounds come from the send result and the client's own clock (one
clock: every namespace of a test runs on the same machine), so the checks assume nothing
about how the brokers work inside.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import IO

OUTCOMES = ("ok", "failed", "unknown")


@dataclass
class Op:
    """One operation of the history (see the module's docstring)."""

    process: str
    kind: str  # "send" or "read"
    msg_id: str
    start: float
    end: float
    outcome: str = "ok"
    body: str = ""
    topic: str = ""
    broker: str = ""  # the broker group (brokerName)
    writer: str = ""  # sends: the address of the broker that stored it
    group: str = ""  # reads: the consumer group
    queue: int = -1
    offset: int = -1
    epoch: int | None = None
    error: str = ""
    #: sends: the CommitLog offset the writer stored it at (from its offset message id).
    position: int = -1

    def __post_init__(self) -> None:
        if self.kind not in ("send", "read"):
            raise ValueError(f"an op is a send or a read, not {self.kind!r}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"an outcome is one of {OUTCOMES}, not {self.outcome!r}")

    def where(self) -> str:
        at = f"{self.broker} queue {self.queue} offset {self.offset}"
        return f"{at} (written by {self.writer})" if self.writer else at


class Recorder:
    """Appends a process's operations to a JSON-lines file, one flushed line each (safe
    across threads)."""

    def __init__(self, path: str, process: str) -> None:
        self.process = process
        self._fh: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 (closed in close())
        self._lock = threading.Lock()

    def record(self, kind: str, msg_id: str, start: float, end: float | None = None,
               **fields: object) -> Op:
        op = Op(self.process, kind, msg_id, start, time.time() if end is None else end,
                **fields)  # type: ignore[arg-type]
        line = json.dumps(asdict(op), separators=(",", ":"))
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
        return op

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(paths: Iterable[str]) -> list[Op]:
    """The operations of JSON-lines files (a last line cut short by a kill is skipped)."""
    ops = []
    for path in paths:
        with open(path) as fh:
            for line in fh:
                try:
                    ops.append(Op(**json.loads(line)))
                except (ValueError, TypeError):
                    continue
    return ops


def annotate_epochs(ops: Iterable[Op], epochs: list[tuple[int, int]]) -> int:
    """Set each acknowledged send's ``epoch`` from a replica's epoch file after the test:
    ``epochs`` are its ``(epoch, start offset)`` entries, and a message stored at CommitLog
    offset ``p`` was written under the last epoch that starts at or before ``p`` (the logs of
    a group agree on everything a replica still holds). Returns how many were set."""
    starts = [start for _, start in epochs]
    done = 0
    for op in ops:
        if op.kind == "send" and op.outcome == "ok" and op.position >= 0:
            i = bisect.bisect_right(starts, op.position) - 1
            if i >= 0:
                op.epoch = epochs[i][0]
                done += 1
    return done


@dataclass
class Violation:
    kind: str
    msg_id: str
    time: float  # seconds from the history's first operation
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} at +{self.time:.3f} s: message {self.msg_id}: {self.detail}"


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def of(self, kind: str) -> list[Violation]:
        return [v for v in self.violations if v.kind == kind]

    def __str__(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.stats.items())
        if self.ok:
            return f"valid ({counts})"
        shown = "\n  ".join(str(v) for v in self.violations[:20])
        more = len(self.violations) - 20
        return (f"{len(self.violations)} violations ({counts}):\n  {shown}"
                + (f"\n  ... and {more} more" if more > 0 else ""))


def check(ops: Iterable[Op], groups: Iterable[str] | None = None) -> Verdict:
    """Judge a history; see the module's docstring for what each violation means."""
    ops = sorted(ops, key=lambda o: (o.end, o.start))
    t0 = min((o.start for o in ops), default=0.0)
    sends = [o for o in ops if o.kind == "send"]
    acked = [o for o in sends if o.outcome == "ok"]
    reads = [o for o in ops if o.kind == "read"]
    read_groups = sorted({r.group for r in reads})
    held = sorted(groups) if groups is not None else read_groups
    out: list[Violation] = []

    def add(kind: str, op: Op, detail: str) -> None:
        out.append(Violation(kind, op.msg_id, op.end - t0, detail))

    def at(op: Op) -> str:
        return f"+{op.end - t0:.3f} s"

    # Lost: acknowledged, never read by a group held to it.
    read_by: dict[str, set[str]] = defaultdict(set)
    for r in reads:
        read_by[r.group].add(r.msg_id)
    for group in held:
        for s in acked:
            if s.msg_id not in read_by[group]:
                add("lost", s, f"acknowledged by {s.where()} at {at(s)} ({s.process}), "
                               f"never read by consumer group {group!r}")

    # Duplicates within a group, and reads of messages never sent.
    first: dict[tuple[str, str], Op] = {}
    sent = {s.msg_id for s in sends}
    for r in reads:
        key = (r.group, r.msg_id)
        if key in first:
            p = first[key]
            add("duplicate", r, f"read twice by consumer group {r.group!r}: at {at(p)} from "
                                f"{p.where()} ({p.process}), at {at(r)} from {r.where()} "
                                f"({r.process})")
        else:
            first[key] = r
        if r.msg_id not in sent:
            add("phantom", r, f"read by {r.group!r} at {at(r)} from {r.where()}, never sent")

    by_queue: dict[tuple[str, int], list[Op]] = defaultdict(list)
    for s in acked:
        if s.broker and s.queue >= 0 and s.offset >= 0:
            by_queue[(s.broker, s.queue)].append(s)
    for queue_ops in by_queue.values():
        out.extend(_queue_violations(queue_ops, t0))
    by_broker: dict[str, list[Op]] = defaultdict(list)
    for s in acked:
        if s.broker and s.writer:
            by_broker[s.broker].append(s)
    for group_ops in by_broker.values():
        out.extend(_two_writers(group_ops, t0))

    out.sort(key=lambda v: (v.time, v.kind))
    stats = {"sends": len(sends), "acknowledged": len(acked),
             "unknown": sum(s.outcome == "unknown" for s in sends),
             "failed": sum(s.outcome == "failed" for s in sends), "reads": len(reads),
             "groups": len(read_groups)}
    return Verdict(out, stats)


def _queue_violations(ops: list[Op], t0: float) -> list[Violation]:
    """Offset clashes and stale writes among the acknowledged sends of one queue."""
    out = []
    broker, queue = ops[0].broker, ops[0].queue
    at_offset: dict[int, Op] = {}
    for s in sorted(ops, key=lambda o: o.end):
        other = at_offset.setdefault(s.offset, s)
        if other.msg_id != s.msg_id:
            out.append(Violation(
                "offset-clash", s.msg_id, s.end - t0,
                f"acknowledged at {broker} queue {queue} offset {s.offset} by {s.writer}, "
                f"where {other.msg_id} was acknowledged at +{other.end - t0:.3f} s by "
                f"{other.writer}"))
    # Stale writes: for each send t, the highest offset acknowledged before t began.
    by_end = sorted(ops, key=lambda o: o.end)
    ends = [o.end for o in by_end]
    best: list[Op] = []  # best[i]: the highest offset among by_end[:i + 1]
    for o in by_end:
        best.append(o if not best or o.offset > best[-1].offset else best[-1])
    for t in ops:
        i = bisect.bisect_left(ends, t.start) - 1
        if i >= 0 and best[i].offset >= t.offset and best[i].msg_id != t.msg_id:
            s = best[i]
            out.append(Violation(
                "stale-write", t.msg_id, t.end - t0,
                f"begun at +{t.start - t0:.3f} s, after {s.msg_id} was acknowledged at "
                f"offset {s.offset} of {broker} queue {queue} (+{s.end - t0:.3f} s, by "
                f"{s.writer}), yet acknowledged at offset {t.offset} by {t.writer}"))
    return out


def _two_writers(ops: list[Op], t0: float) -> list[Violation]:
    """A broker of the group took writes before and after the whole of another one's write."""
    out = []
    writers: dict[str, list[Op]] = defaultdict(list)
    for s in ops:
        writers[s.writer].append(s)
    for a, a_ops in writers.items():
        earliest = min(a_ops, key=lambda o: o.end)  # s: A's first acknowledgement
        # u: the last send A began, under each epoch (None: no epochs recorded).
        latest: dict[int | None, Op] = {}
        for o in a_ops:
            if o.epoch not in latest or o.start > latest[o.epoch].start:
                latest[o.epoch] = o
        for b, b_ops in writers.items():
            if b == a:
                continue
            for t in sorted(b_ops, key=lambda o: o.start):
                if t.start <= earliest.end:
                    continue
                fenced = [u for e, u in latest.items()
                          if e is None or t.epoch is None or e <= t.epoch]
                u = max(fenced, key=lambda o: o.start, default=None)
                if u is not None and t.end < u.start:
                    out.append(Violation(
                        "two-writers", t.msg_id, t.end - t0,
                        f"{b} acknowledged it between +{t.start - t0:.3f} s and "
                        f"+{t.end - t0:.3f} s, while {a} of the same group {t.broker!r} "
                        f"acknowledged {earliest.msg_id} before (+{earliest.end - t0:.3f} s) "
                        f"and {u.msg_id} after (begun +{u.start - t0:.3f} s)"
                        + (f", epoch {u.epoch} not above {t.epoch}"
                           if u.epoch is not None and t.epoch is not None else "")))
                    break  # one violation names the pair of writers
    return out
