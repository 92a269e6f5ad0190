"""A broker's counters, sampled every second, and the GET_BROKER_RUNTIME_INFO table built from
them (RocketMQ's StoreStatsService, BrokerStats and AdminBrokerProcessor.prepareRuntimeInfo).

mqadmin reads the table: ``clusterList`` takes the first of the three numbers of ``putTps`` and
``getTransferedTps`` (over 10 s, 1 min and 10 min), the send and pull queue sizes and head wait
times, ``pageCacheLockTimeMills``, ``earliestMessageTimeStamp`` and ``commitLogDiskRatio``;
``clusterList -m`` subtracts the ``msgPutTotal*``/``msgGetTotal*`` counters of the mornings;
``brokerStatus`` prints every key.
"""

from __future__ import annotations

import asyncio
import os
import time
from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from ..._version import __version__
from ...protocol import CURRENT_VERSION, SCHEDULE_TOPIC
from ...protocol.message import STORE_TIMESTAMP, STORE_TIMESTAMP_POS
from ...protocol.version import version_name
from ...store.retention import disk_space
from .stats_items import BrokerStatsItems

if TYPE_CHECKING:
    from ...store import MessageStore

#: Seconds between samples, and how many are kept: enough for the 10-minute window.
SAMPLE_INTERVAL = 1.0
MAX_SAMPLES = 10 * 60 + 1
#: The windows of putTps, getTransferedTps and the other rates, in seconds.
TPS_WINDOWS = (10, 60, 600)
#: Upper bounds (bytes) of the message size histogram's buckets, RocketMQ's for
#: rocketmq_message_size: 1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB (and one past them).
SIZE_BUCKETS = (1 << 10, 4 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20)


class Sample(NamedTuple):
    """The counters at one moment (``at``: ``time.monotonic()``)."""

    at: float
    put: int
    transferred: int
    found: int
    miss: int


class Stats:
    """Counters of a broker (what its processors count as they go) and their samples over
    time, from which the rates of the runtime info are computed."""

    def __init__(self) -> None:
        self.started = time.time()
        #: Messages stored for producers.
        self.put_total = 0
        #: Messages handed to consumers, and pulls that found messages or none.
        self.get_total = 0
        self.get_found = 0
        self.get_miss = 0
        self.put_by_topic: dict[str, int] = {}
        #: Bytes stored per topic (the records' sizes in the CommitLog).
        self.put_bytes_by_topic: dict[str, int] = {}
        #: Messages and bytes handed out per (topic, consumer group).
        self.get_by_topic_group: dict[tuple[str, str], int] = {}
        self.get_bytes_by_topic_group: dict[tuple[str, str], int] = {}
        #: Messages stored per topic by size, one count per SIZE_BUCKETS bucket and one for
        #: larger ones (a put of several counts each at their average size, as RocketMQ's).
        self.size_buckets: dict[str, list[int]] = {}
        #: Messages sent to a dead-letter topic per (original topic, consumer group).
        self.dlq_by_topic_group: dict[tuple[str, str], int] = {}
        #: Where each (group, topic, queue id)'s pulls read next: messages between the
        #: committed offset and this one are in flight at the consumer, the rest wait.
        self.pull_offsets: dict[tuple[str, str, int], int] = {}
        #: The counters at the last midnight (local time) and the one before, as
        #: BrokerStats.record keeps them; 0 until the broker has seen a midnight.
        self.put_today_morning = self.put_yesterday_morning = 0
        self.get_today_morning = self.get_yesterday_morning = 0
        #: How late the sampler's last timer ran, in seconds: how long work that is ready
        #: waits for the event loop (every request is served on it).
        self.loop_lag = 0.0
        self.samples: deque[Sample] = deque(maxlen=MAX_SAMPLES)
        self._day = time.localtime(self.started)[:3]
        #: The minute, hour and day windows mqadmin's statsAll reads, fed by sample().
        self.items = BrokerStatsItems(self)
        self.sample()

    def put(self, n: int, topic: str, size: int = 0) -> None:
        """``n`` messages of ``topic``, ``size`` bytes in all, were stored for a producer."""
        self.put_total += n
        self.put_by_topic[topic] = self.put_by_topic.get(topic, 0) + n
        self.put_bytes_by_topic[topic] = self.put_bytes_by_topic.get(topic, 0) + size
        buckets = self.size_buckets.get(topic)
        if buckets is None:
            buckets = self.size_buckets[topic] = [0] * (len(SIZE_BUCKETS) + 1)
        buckets[bisect_left(SIZE_BUCKETS, size // n if n > 1 else size)] += n

    def get(self, n: int, topic: str = "", group: str = "", size: int = 0,
            queue_id: int = -1, next_offset: int = -1) -> None:
        """A pull (or POP) of ``group`` found ``n`` messages of ``topic``, ``size`` bytes; a
        pull of one queue also says where the group reads next (``pull_offsets``)."""
        self.get_total += n
        self.get_found += 1
        key = (topic, group)
        self.get_by_topic_group[key] = self.get_by_topic_group.get(key, 0) + n
        self.get_bytes_by_topic_group[key] = self.get_bytes_by_topic_group.get(key, 0) + size
        if queue_id >= 0:
            self.pull_offsets[(group, topic, queue_id)] = next_offset

    def miss(self) -> None:
        """A pull found no message."""
        self.get_miss += 1

    def dlq(self, n: int, topic: str, group: str) -> None:
        """``n`` messages of ``topic`` that ``group`` failed went to its dead-letter topic."""
        key = (topic, group)
        self.dlq_by_topic_group[key] = self.dlq_by_topic_group.get(key, 0) + n

    def now(self) -> Sample:
        """The counters as they are."""
        return Sample(time.monotonic(), self.put_total, self.get_total, self.get_found,
                      self.get_miss)

    def sample(self, wall: float | None = None) -> None:
        """Record the counters; at the first sample of a new day, move the morning counters
        (BrokerStats.record runs at each midnight)."""
        self.samples.append(self.now())
        self.items.sample(self.samples[-1].at)
        day = time.localtime(time.time() if wall is None else wall)[:3]
        if day != self._day:
            self._day = day
            self.put_yesterday_morning = self.put_today_morning
            self.get_yesterday_morning = self.get_today_morning
            self.put_today_morning = self.put_total
            self.get_today_morning = self.get_total

    def rate(self, field: str, window: float) -> float:
        """Per second over the last ``window`` seconds, up to now: from the oldest sample
        within the window (the oldest there is, for a broker younger than the window)."""
        current = self.now()
        base = self.samples[-1]
        for sample in self.samples:
            if current.at - sample.at <= window + SAMPLE_INTERVAL / 2:
                base = sample
                break
        elapsed = current.at - base.at
        if elapsed <= 0:
            return 0.0
        return (getattr(current, field) - getattr(base, field)) / elapsed

    def rates(self, field: str) -> str:
        """RocketMQ's form: the rates over 10 s, 1 min and 10 min, separated by spaces."""
        return " ".join(repr(self.rate(field, w)) for w in TPS_WINDOWS)

    async def run(self) -> None:
        """Sample every second until cancelled, measuring the event loop's lag as it goes."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + SAMPLE_INTERVAL
            await asyncio.sleep(SAMPLE_INTERVAL)
            self.loop_lag = max(0.0, loop.time() - due)
            self.sample()


def human_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(n, false): ``512 B``, ``1.5 KiB``, ``3.0 GiB``."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def _disk_ratio(path: str) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent: the partition's use as ``df`` gives it (the
    root reserve counted neither used nor usable), a fraction rounded up to a hundredth, -1
    when the path does not exist."""
    if not os.path.exists(path):
        return -1.0
    return disk_space(path).used_percent / 100


def earliest_message_time(store: MessageStore) -> int:
    """Store time of the oldest message in the CommitLog, -1 when it holds none
    (DefaultMessageStore.getEarliestMessageTime)."""
    commitlog = store.commitlog
    if commitlog.max_offset <= commitlog.min_offset:
        return -1
    view = commitlog.view(commitlog.min_offset + STORE_TIMESTAMP_POS, STORE_TIMESTAMP.size)
    if view is None:
        return -1
    try:
        return STORE_TIMESTAMP.unpack(view)[0]
    finally:
        view.release()


def _runtime(seconds: float) -> str:
    seconds = int(seconds)
    return (f"[ {seconds // 86400} days, {seconds % 86400 // 3600} hours, "
            f"{seconds % 3600 // 60} minutes, {seconds % 60} seconds ]")


def runtime_info(stats: Stats, store: MessageStore, queued_sends: int, held_pulls: int,
                 delay_offsets: dict[int, int], refusal: str | None = None,
                 master_epoch: int | None = None) -> dict[str, str]:
    """The GET_BROKER_RUNTIME_INFO table: RocketMQ's keys, each value in the form RocketMQ
    writes it. Keys of things rocketq does not have (thread pool capacities, the transient
    store pool, put latency histograms) are left out rather than filled with made-up
    values.

    ``queued_sends`` and ``held_pulls`` are the sends waiting to be appended and the pulls
    held for messages; ``delay_offsets`` is the delivered offset of each delay level;
    ``refusal`` why the broker refuses every send now (None while it takes them);
    ``master_epoch`` in controller mode the epoch the broker's role is from."""
    commitlog = store.commitlog
    cfg = store.config
    lag_ms = str(int(stats.loop_lag * 1000))
    table = {
        # The name of the version code it speaks, as RocketMQ writes it (V4_9_8 for 409):
        # mqadmin's clusterList and brokerStatus show it; rocketq's own version apart.
        "brokerVersionDesc": version_name(CURRENT_VERSION),
        "brokerVersion": str(CURRENT_VERSION),
        "rocketqVersion": __version__,
        "bootTimestamp": str(int(stats.started * 1000)),
        "runtime": _runtime(time.time() - stats.started),
        "brokerActive": "true",
        # Messages put and handed out: now, and at the last two midnights.
        "putMessageTimesTotal": str(stats.put_total),
        "msgPutTotalTodayNow": str(stats.put_total),
        "msgPutTotalTodayMorning": str(stats.put_today_morning),
        "msgPutTotalYesterdayMorning": str(stats.put_yesterday_morning),
        "msgGetTotalTodayNow": str(stats.get_total),
        "msgGetTotalTodayMorning": str(stats.get_today_morning),
        "msgGetTotalYesterdayMorning": str(stats.get_yesterday_morning),
        "putTps": stats.rates("put"),
        "getTransferedTps": stats.rates("transferred"),
        "getFoundTps": stats.rates("found"),
        "getMissTps": stats.rates("miss"),
        "getTotalTps": " ".join(repr(stats.rate("found", w) + stats.rate("miss", w))
                                for w in TPS_WINDOWS),
        # rocketq serves requests on one event loop, not on send and pull thread pools. The
        # sends waiting are those read and queued to be appended together at the end of the
        # loop iteration; the pulls waiting are those held (long polling) until a message
        # arrives or they time out. The head of either queue waits as long as the event loop
        # is late to run what is ready, which the sampler measures every second.
        "sendThreadPoolQueueSize": str(queued_sends),
        "pullThreadPoolQueueSize": str(held_pulls),
        "sendThreadPoolQueueHeadWaitTimeMills": lag_ms,
        "pullThreadPoolQueueHeadWaitTimeMills": lag_ms,
        # How long the CommitLog put under way has held its lock. Puts run on the event loop
        # that is answering this request, so none is under way now: 0 is the true value.
        "pageCacheLockTimeMills": "0",
        "earliestMessageTimeStamp": str(earliest_message_time(store)),
        "commitLogMinOffset": str(commitlog.min_offset),
        "commitLogMaxOffset": str(commitlog.max_offset),
        # Not in RocketMQ's table (mqadmin ignores keys it does not know): for rocketq admin.
        "brokerRole": store.config.brokerRole,
        "dispatchBehindBytes": str(commitlog.max_offset - store.reput_offset),
        "remainHowManyDataToFlush": human_bytes(
            max(0, commitlog.max_offset - commitlog.files.flushed_offset)),
        "commitLogDiskRatio": repr(store.disk_used_ratio() / 100),
        f"commitLogDiskRatio_{cfg.storePathCommitLog}": repr(_disk_ratio(
            cfg.storePathCommitLog)),
        "consumeQueueDiskRatio": repr(_disk_ratio(cfg.store_path_consume_queue)),
        # Not in RocketMQ's table: whether sends are taken (RunningFlags.isWriteable, with
        # the broker's permission and, in controller mode, its lease and in-sync replicas),
        # and why not, for the dashboard and rocketq admin.
        "writeable": "false" if refusal else "true",
    }
    if refusal:
        table["notWriteableReason"] = refusal
    root = cfg.storePathRootDir
    if os.path.exists(root):
        # File.getTotalSpace and File.getFreeSpace: Free counts the root reserve, as Java's.
        space = disk_space(root)
        table["commitLogDirCapacity"] = (f"Total : {human_bytes(space.total)}, Free : "
                                         f"{human_bytes(space.free)}.")
    # ScheduleMessageService.buildRunningStats: delivered offset and max offset per level.
    for level, offset in sorted(delay_offsets.items()):
        table[f"scheduleMessageOffset_{level}"] = (
            f"{offset},{store.get_max_offset(SCHEDULE_TOPIC, level - 1)}")
    if master_epoch is not None:
        # Controller mode (not in RocketMQ's table): the epoch this broker's role is from.
        table["masterEpoch"] = str(master_epoch)
    return table
