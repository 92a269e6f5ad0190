"""The options of ``format("rocketq")``: how any of them is read, the read options that users
of Spark's Kafka source reach for, and the lag Kafka's source reports, computed from a
query's progress.

- Which queues a read covers: ``topic`` (or Kafka's spelling ``subscribe``),
  ``subscribePattern`` or ``assign``; exactly one (``QueueSelection``).
- Where each queue starts or ends by time: ``startingOffsetsByTimestamp`` and
  ``endingOffsetsByTimestamp`` (``apply_timestamps``).
- ``offsets_behind``: Kafka's ``*OffsetsBehindLatest`` metrics from a progress. Spark's
  Python data sources cannot fill a source's ``metrics`` in the progress, but they do report
  the latest offsets there, and the lag follows from those and the batch's end offsets.
- How any option's value is read: names case-insensitive (``lowered``), a missing
  required one named (``option_value``), durations (``duration_seconds``) and flags
  (``option_flag``).

Nothing here imports Spark: the readers and writers use it on the driver, and it is tested
without Spark.
"""

from __future__ import annotations

import json
import re
from typing import Any

from . import broker_io
from .access import PLAIN, Access
from .broker_io import QueueKey

#: The options naming what to read, as users write them; a read takes exactly one.
SELECTORS = ("topic", "subscribe", "subscribePattern", "assign")

#: Kafka's names of its source's lag metrics, the keys of each ``offsets_behind`` entry.
LAG_METRICS = ("minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest")

#: A queue as an option names it: ``(broker name, or None for every broker, queue id)``.
QueueRef = tuple[str | None, int]


def lowered(options: Any) -> dict[str, str]:
    """Spark's options are case-insensitive: keep them with lowercase keys."""
    return {str(k).lower(): v for k, v in dict(options).items()}


def option_value(options: dict[str, str], name: str, default: str | None = None) -> str:
    value = options.get(name.lower(), default)
    if value is None:
        raise ValueError(f"the rocketq data source needs the option {name!r}")
    return value


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(name: str, value: str) -> float:
    """Seconds of a duration option: ``500ms``, ``30s``, ``15m``, ``1h``, or milliseconds."""
    text = str(value).strip().lower()
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit) and text[:-len(unit)].strip().replace(".", "", 1).isdigit():
            return float(text[:-len(unit)]) * _UNITS[unit]
    if text.isdigit():
        return int(text) / 1000
    raise ValueError(f"{name} must be a duration such as 500ms, 30s or 15m, not {value!r}")


def option_flag(options: dict[str, str], name: str, default: str = "false") -> bool:
    value = option_value(options, name, default).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, not {value!r}")
    return value == "true"


def queue_ref(option: str, topic: str, item: Any) -> QueueRef:
    """The queue an entry of ``option`` names in ``topic``: ``"broker-a:0"`` (rocketq's queue
    naming), or a bare queue id (``0`` or ``"0"``, Kafka's partition number), which names that
    queue id on every broker of the topic. ValueError for anything else."""
    if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
        return None, item
    if isinstance(item, str):
        broker, sep, queue_id = item.strip().rpartition(":")
        if queue_id.isdigit() and (broker or not sep):
            return broker or None, int(queue_id)
    raise ValueError(f'{option}: {item!r} (in {topic}) is not a queue; write "brokerName:queueId"'
                     " or a queue id")


def _matches(ref: QueueRef, broker: str, queue_id: int) -> bool:
    return ref[1] == queue_id and ref[0] in (None, broker)


class QueueSelection:
    """Which queues a read covers, from exactly one of the options:

    - ``topic`` (or ``subscribe``): topics, comma-separated;
    - ``subscribePattern``: every topic whose whole name matches a Python regular expression
      (``re.fullmatch``, as Kafka's ``Pattern.matcher().matches()``), listed from the
      NameServer each time the queues are asked for, system topics left out;
    - ``assign``: JSON ``{"topic": ["broker-a:0", "broker-a:1"]}`` (or ``[0, 1]``: those
      queue ids on every broker of the topic), only those queues.
    """

    def __init__(self, options: dict[str, str]) -> None:
        given = [name for name in SELECTORS if str(options.get(name.lower(), "")).strip()]
        if len(given) != 1:
            raise ValueError(
                "the rocketq data source reads what exactly one of the options topic (or "
                "Kafka's subscribe), subscribePattern or assign names; "
                + (f"got {', '.join(given)}" if given else "none is given"))
        self.option = given[0]
        value = str(options[self.option.lower()])
        #: The topics to read, when they are named (``topic``, ``subscribe``, ``assign``).
        self.topics: list[str] = []
        self.pattern: re.Pattern[str] | None = None
        #: ``assign``'s queues per topic.
        self.assigned: dict[str, list[QueueRef]] | None = None
        if self.option == "subscribePattern":
            try:
                self.pattern = re.compile(value)
            except re.error as exc:
                raise ValueError(f"subscribePattern is not a regular expression ({exc}): "
                                 f"{value!r}") from None
        elif self.option == "assign":
            self.assigned = _assignment(value)
            self.topics = list(self.assigned)
        else:
            self.topics = [t.strip() for t in value.split(",") if t.strip()]

    def queues(self, namesrv: str, access: Access = PLAIN, strict: bool = False
               ) -> dict[QueueKey, tuple[int, int]]:
        """``(topic, broker, address, queue id) -> (min offset, max offset)`` of the selected
        queues now. With ``strict`` an assigned queue that does not exist raises ValueError (a
        misspelt queue would otherwise read nothing); readers are strict when a read is
        planned or a query starts, not later, when a broker may be away for a while."""
        if self.pattern is not None:
            pattern = self.pattern
            topics = [t for t in broker_io.user_topics(namesrv, access) if pattern.fullmatch(t)]
            return broker_io.queue_offsets(namesrv, topics, access, missing_ok=True)
        found = broker_io.queue_offsets(namesrv, self.topics, access)
        if self.assigned is None:
            return found
        assigned = self.assigned
        chosen = {key: bounds for key, bounds in found.items()
                  if any(_matches(ref, key[1], key[3]) for ref in assigned[key[0]])}
        if strict:
            missing = [f"{topic} {broker or '*'}:{queue_id}"
                       for topic, refs in assigned.items() for broker, queue_id in refs
                       if not any(key[0] == topic and _matches((broker, queue_id), key[1], key[3])
                                  for key in chosen)]
            if missing:
                raise ValueError(f"assign names queues that do not exist: {', '.join(missing)}")
        return chosen


def _assignment(spec: str) -> dict[str, list[QueueRef]]:
    """The queues of the ``assign`` option's JSON, per topic."""
    try:
        table = json.loads(spec)
    except ValueError as exc:
        raise ValueError(f"assign is not valid JSON ({exc}): {spec!r}") from None
    if (not isinstance(table, dict) or not table
            or not all(isinstance(v, list) and v for v in table.values())):
        raise ValueError('assign must map each topic to a list of its queues, such as '
                         f'{{"Orders": ["broker-a:0", "broker-a:1"]}} or {{"Orders": [0, 1]}}, '
                         f"not {spec!r}")
    return {topic: [queue_ref("assign", topic, item) for item in items]
            for topic, items in table.items()}


def timestamps(option: str, spec: str | None) -> dict[str, dict[QueueRef, int]] | None:
    """The checked table of a ``*OffsetsByTimestamp`` option, ``{"topic": {"broker:queueId":
    ms since the epoch}}`` (a bare queue id names that queue on every broker), as
    ``topic -> queue -> ms``; None when the option is not given."""
    if spec is None or not str(spec).strip():
        return None
    try:
        table = json.loads(spec)
    except ValueError as exc:
        raise ValueError(f"{option} is not valid JSON ({exc}): {spec!r}") from None
    if not isinstance(table, dict) or not all(
            isinstance(queues, dict) and all(isinstance(ms, int) and not isinstance(ms, bool)
                                             for ms in queues.values())
            for queues in table.values()):
        raise ValueError(f'{option} must map each topic to {{"broker:queueId": ms since the '
                         f'epoch}}, such as {{"Orders": {{"broker-a:0": 1700000000000}}}}, '
                         f"not {spec!r}")
    return {topic: {queue_ref(option, topic, name): ms for name, ms in queues.items()}
            for topic, queues in table.items()}


def apply_timestamps(option: str, spec: str | None, queues: dict[QueueKey, tuple[int, int]],
                     offsets: dict[QueueKey, int], access: Access = PLAIN
                     ) -> dict[QueueKey, int]:
    """``offsets`` with each queue that the ``*OffsetsByTimestamp`` option ``option`` (value
    ``spec``) names moved to the first message stored at or after its time, as its broker
    answers SEARCH_OFFSET_BY_TIMESTAMP, or to its max offset when there is none (Kafka's
    ``startingOffsetsByTimestampStrategy=latest``). Queues it does not name keep their offset
    (where ``startingOffsets`` / ``endingOffsets`` put them), where Kafka would fail."""
    table = timestamps(option, spec)
    if not table:
        return offsets
    times = {}
    for key in queues:
        topic, broker, _addr, queue_id = key
        for ref, ms in table.get(topic, {}).items():
            if _matches(ref, broker, queue_id):
                times[key] = ms
    out = dict(offsets)
    for key, offset in broker_io.offsets_at_times(times, access).items():
        low, high = queues[key]
        out[key] = min(max(offset, low), high)
    return out


def _flat_offsets(value: Any) -> dict[str, int] | None:
    """A source's offsets in a progress (JSON text or a dict) as ``key -> offset``, or None
    when they are not a flat map of numbers (another kind of source, or none reported)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    try:
        return {str(k): int(v) for k, v in value.items()}
    except (TypeError, ValueError):
        return None


def offsets_behind(progress: dict[str, Any]) -> dict[int, dict[str, float]]:
    """Kafka's lag metrics of each rocketq source of a streaming query's progress (as
    ``query.lastProgress`` or an element of ``query.recentProgress`` gives it).

    Kafka's source puts ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
    ``avgOffsetsBehindLatest`` in its progress ``metrics``; Spark's Python data sources cannot
    (the JVM side of a Python stream reports no metrics). A rocketq source reports the
    queues' max offsets as its ``latestOffset``, so the same numbers follow from it and the
    batch's ``endOffset``: per queue, latest minus end (a queue the end does not name counts
    from 0, as Kafka counts). Returns ``{i: {metric: value}}`` where ``i`` is the source's
    index in ``progress["sources"]`` (where Kafka's would be ``sources[i]["metrics"]``; a
    Python source's description names a JVM object, not the source); min and max are ints,
    avg a float. Sources with no offsets of this kind, or no latest offsets, are left out."""
    out: dict[int, dict[str, float]] = {}
    for i, source in enumerate(progress.get("sources") or []):
        latest = _flat_offsets(source.get("latestOffset"))
        end = _flat_offsets(source.get("endOffset"))
        if not latest or end is None:
            continue
        behind = [high - end.get(key, 0) for key, high in latest.items()]
        out[i] = dict(zip(LAG_METRICS, (min(behind), max(behind), sum(behind) / len(behind)),
                          strict=True))
    return out
