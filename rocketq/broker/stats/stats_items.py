"""The broker's counters over the last minute, hour and day, by stats name and key (RocketMQ's
StatsItem and StatsItemSet, and the read side of BrokerStatsManager).

mqadmin asks for them with VIEW_BROKER_STATS_DATA (315): ``statsAll`` prints each topic's
``TOPIC_PUT_NUMS`` and each ``topic@group``'s ``GROUP_GET_NUMS`` as a rate (the minute's
``tps``) and a 24-hour count (the day's ``sum``, or the hour's, or the minute's when the
longer one is 0). GET_CONSUME_STATS answers the minute's ``GROUP_GET_NUMS`` rate as a group's
``consumeTps``.

Nothing here counts: the windows are built from counters the broker keeps anyway (``Stats``,
the send-backs of ``SendBack``), so the send and pull paths do no extra work. The counters are
totals since the broker started, and a key that is not in a table yet stood at 0. Every
``interval`` seconds (10 s, 10 min, 1 h, as RocketMQ samples) the tables are copied as a
tick; a window reaches from its oldest tick within ``span`` (1 min, 1 h, 24 h) to the last
sample, which the broker takes every second, so a message shows in every window within a
second. RocketMQ ends its windows at their last tick instead: a message reaches the day's sum
at the next hourly tick, and statsAll's 24-hour count of a new topic reads 0 from a minute
after its sends until the next 10-minute tick.

Time is ``time.monotonic()``, or whatever the caller passes to ``sample`` (tests drive the
windows through hours in no time that way); a sample older than the last one is ignored.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

# RocketMQ's stats names (org.apache.rocketmq.common.stats.Stats) that rocketq keeps.
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
#: The names of the broker's own totals, whose one key is its cluster's name.
BROKER_WIDE = (BROKER_PUT_NUMS, BROKER_GET_NUMS)
#: The key of a broker-wide total in its table.
BROKER_KEY = ""


class Window(NamedTuple):
    """How often a window's tick is taken and how far back the window reaches (seconds)."""

    name: str
    interval: float
    span: float


MINUTE = Window("statsMinute", 10.0, 60.0)
HOUR = Window("statsHour", 600.0, 3600.0)
DAY = Window("statsDay", 3600.0, 86400.0)
WINDOWS = (MINUTE, HOUR, DAY)
#: Slack for the one-second sampling: a tick is due half a sample early, and a tick half a
#: sample older than a window's span still starts it.
TOLERANCE = 0.5


class Snapshot(NamedTuple):
    """One window of one item (StatsSnapshot, written as a BrokerStatsItem): how much the
    counter grew, per second, and per call. rocketq does not count calls per key, and
    RocketMQ's broker-wide totals do not either: ``avgpt`` is 0."""

    sum: int
    tps: float
    avgpt: float

    def to_json(self) -> dict[str, Any]:
        return {"avgpt": self.avgpt, "sum": self.sum, "tps": self.tps}


class Tick(NamedTuple):
    """A stats table as it was at ``at``."""

    at: float
    values: Mapping[Any, int]


def topic_group_key(key: str) -> tuple[str, str] | None:
    """``topic@group`` (BrokerStatsManager.buildStatsKey) as the counters' ``(topic,
    group)``; neither name can hold ``@`` (TopicValidator's characters)."""
    topic, at, group = key.partition("@")
    return (topic, group) if at else None


class StatsItemSet:
    """One stats name: a table of counters by key and its ticks in each window."""

    def __init__(self, name: str, counters: Callable[[], Mapping[Any, int]],
                 key: Callable[[str], Any]) -> None:
        self.name = name
        self.counters = counters  # the live table: key -> total since the broker started
        self.key = key  # a request's statsKey -> the table's key (None: there is none)
        self.ticks: dict[Window, deque[Tick]] = {w: deque() for w in WINDOWS}

    def has(self, key: Any) -> bool:
        """Whether anything was ever counted under ``key`` (RocketMQ creates a StatsItem on
        its first count)."""
        return key in self.counters()

    def snapshot(self, key: Any, window: Window, end: float) -> Snapshot:
        """How ``key`` grew from the window's first tick to ``end`` (the last sample)."""
        ticks = self.ticks[window]
        if not ticks:
            return Snapshot(0, 0.0, 0.0)
        start = ticks[-1]
        for tick in ticks:
            if end - tick.at <= window.span + TOLERANCE:
                start = tick
                break
        grown = max(0, self.counters().get(key, 0) - start.values.get(key, 0))
        elapsed = end - start.at
        return Snapshot(grown, grown / elapsed if elapsed > 0 else 0.0, 0.0)


class Counters(Protocol):
    """The totals the windows are built from, as ``Stats`` keeps them (this module sits below
    ``stats`` and knows only this shape of it)."""

    @property
    def put_by_topic(self) -> Mapping[str, int]: ...
    @property
    def put_bytes_by_topic(self) -> Mapping[str, int]: ...
    @property
    def get_by_topic_group(self) -> Mapping[tuple[str, str], int]: ...
    @property
    def get_bytes_by_topic_group(self) -> Mapping[tuple[str, str], int]: ...
    @property
    def put_total(self) -> int: ...
    @property
    def get_total(self) -> int: ...


class BrokerStatsItems:
    """The stats items of a broker (BrokerStatsManager's statsTable), fed by ``sample``."""

    def __init__(self, stats: Counters) -> None:
        self.sets: dict[str, StatsItemSet] = {}
        self.last: float | None = None  # when the last sample was taken
        self._due: dict[Window, float] = {}
        self.watch(TOPIC_PUT_NUMS, lambda: stats.put_by_topic)
        self.watch(TOPIC_PUT_SIZE, lambda: stats.put_bytes_by_topic)
        self.watch(GROUP_GET_NUMS, lambda: stats.get_by_topic_group, topic_group_key)
        self.watch(GROUP_GET_SIZE, lambda: stats.get_bytes_by_topic_group, topic_group_key)
        self.watch(BROKER_PUT_NUMS, lambda: {BROKER_KEY: stats.put_total}, _broker_key)
        self.watch(BROKER_GET_NUMS, lambda: {BROKER_KEY: stats.get_total}, _broker_key)

    def watch(self, name: str, counters: Callable[[], Mapping[Any, int]],
              key: Callable[[str], Any] = str) -> None:
        """Keep windows over the table ``counters()`` returns, as stats name ``name``.
        ``key`` turns a request's statsKey into the table's key."""
        item_set = self.sets[name] = StatsItemSet(name, counters, key)
        if self.last is not None:
            # Watched after the first sample: its windows start from the table as it is.
            tick = Tick(self.last, dict(counters()))
            for ticks in item_set.ticks.values():
                ticks.append(tick)

    def sample(self, at: float) -> None:
        """Note the time of a sample; take a tick in each window that is due (every window
        at the first sample)."""
        if self.last is not None and at <= self.last:
            return  # a clock that went back, or a caller's time ahead of it
        self.last = at
        due = [w for w in WINDOWS if at >= self._due.get(w, at)]
        if not due:
            return
        for item_set in self.sets.values():
            tick = Tick(at, dict(item_set.counters()))  # one copy, shared by the windows
            for window in due:
                ticks = item_set.ticks[window]
                ticks.append(tick)
                # Older ticks can start no window again: the end only moves on.
                while len(ticks) > 1 and at - ticks[0].at > window.span + TOLERANCE:
                    ticks.popleft()
        for window in due:
            self._due[window] = at + window.interval - TOLERANCE

    def find(self, name: str, stats_key: str) -> tuple[StatsItemSet, Any] | None:
        """The set and table key of ``name``/``stats_key``; None when nothing was ever
        counted there (RocketMQ: "The stats <name> <key> not exist")."""
        item_set = self.sets.get(name)
        if item_set is None:
            return None
        key = item_set.key(stats_key)
        if key is None or not item_set.has(key):
            return None
        return item_set, key

    def view(self, name: str, stats_key: str) -> dict[str, Any] | None:
        """BrokerStatsData: ``statsMinute``, ``statsHour`` and ``statsDay`` of one item, or
        None when it does not exist."""
        found = self.find(name, stats_key)
        if found is None:
            return None
        item_set, key = found
        end = self.last if self.last is not None else 0.0
        return {w.name: item_set.snapshot(key, w, end).to_json() for w in WINDOWS}

    def group_get_tps(self, topic: str, group: str) -> float:
        """Messages per second the group took from the topic over the last minute
        (BrokerStatsManager.tpsGroupGetNums); 0 when it took none."""
        item_set = self.sets[GROUP_GET_NUMS]
        key = (topic, group)
        if self.last is None or not item_set.has(key):
            return 0.0
        return item_set.snapshot(key, MINUTE, self.last).tps


def _broker_key(stats_key: str) -> str:
    """The table key of a broker-wide total: the caller checks the cluster's name."""
    return BROKER_KEY
