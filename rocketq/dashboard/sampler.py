"""The dashboard's memory of the last minutes: every few seconds it asks the cluster for each
broker's TPS and each consumer group's lag, and keeps a bounded history for the charts.

Nothing is written anywhere: a dashboard started again begins with an empty history, as
RocketMQ Dashboard's own collector does without its files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ClientError
from .brokers import BrokerBook

if TYPE_CHECKING:
    from ..client.admin import AsyncAdmin

log = logging.getLogger("rocketq.dashboard")

#: Seconds between two samples.
DEFAULT_INTERVAL = 5.0
#: How far back the charts go, in seconds.
HISTORY_SECONDS = 600
#: Most samples kept, whatever the interval.
MAX_HISTORY = 3600
#: Most consumer groups whose lag one sample asks for (each is one request per broker).
MAX_SAMPLED_GROUPS = 64


@dataclass(frozen=True)
class Sample:
    """What the cluster looked like at one moment."""

    #: When, in seconds since the epoch.
    at: float
    #: ``broker name/id -> (put TPS, get TPS)`` of each broker that answered.
    tps: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: ``group -> lag`` (messages not consumed yet, over every topic) of each group sampled.
    lag: dict[str, int] = field(default_factory=dict)


class Sampler:
    """Samples ``admin.cluster()`` and ``admin.consumer_progress()`` every ``interval``
    seconds on the running event loop, keeping the last ``history`` samples (by default
    those of the last ``HISTORY_SECONDS``)."""

    def __init__(self, admin: AsyncAdmin, *, interval: float = DEFAULT_INTERVAL,
                 history: int | None = None) -> None:
        self.admin = admin
        self.interval = interval
        if history is None:
            history = min(MAX_HISTORY, max(2, round(HISTORY_SECONDS / interval)))
        self.samples: deque[Sample] = deque(maxlen=history)
        #: The last failure to sample, shown on the pages until a sample succeeds.
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        #: The brokers seen, and their counts of the day (every sample and page feeds it).
        self.brokers = BrokerBook()

    def start(self) -> None:
        """Begin sampling (the first sample at once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop sampling and wait for the loop to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.samples.append(await self.sample())
                self.error = None
            except asyncio.CancelledError:
                raise
            except (ClientError, OSError) as exc:  # the cluster may be away a while
                if self.error is None:
                    log.warning("dashboard: cannot sample the cluster: %s", exc)
                self.error = str(exc) or type(exc).__name__
            except Exception:  # a fault of ours: the details go to the log, not the pages
                if self.error is None:
                    log.exception("dashboard: sampling failed")
                self.error = "an unexpected error (the dashboard's log says which)"
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    async def sample(self) -> Sample:
        """One sample, taken now."""
        tps = {}
        for broker in self.brokers.update(await self.admin.cluster()):
            if getattr(broker, "error", None):
                continue
            tps[broker_key(broker)] = (float(broker.put_tps or 0), float(broker.get_tps or 0))
        lag = {}
        groups = [g.name for g in await self.admin.groups() if not g.system]
        for name in groups[:MAX_SAMPLED_GROUPS]:
            try:
                progress = await self.admin.consumer_progress(name)
            except Exception as exc:  # one group's broker away must not lose the others
                log.debug("dashboard: no progress of %s: %s", name, exc)
                continue
            lag[name] = progress.total_lag
        return Sample(time.time(), tps, lag)

    def latest(self) -> Sample | None:
        """The newest sample, if any."""
        return self.samples[-1] if self.samples else None

    def tps_series(self) -> dict[str, list[tuple[float, float]]]:
        """``"<broker> put" / "<broker> get" -> [(time, TPS), ...]`` over the history."""
        series: dict[str, list[tuple[float, float]]] = {}
        for sample in self.samples:
            for broker, (put, get) in sorted(sample.tps.items()):
                series.setdefault(f"{broker} put", []).append((sample.at, put))
                series.setdefault(f"{broker} get", []).append((sample.at, get))
        return series

    def lag_series(self, groups: Iterable[str] | None = None
                   ) -> dict[str, list[tuple[float, float]]]:
        """``group -> [(time, lag), ...]`` over the history (of ``groups``, if given)."""
        wanted = set(groups) if groups is not None else None
        series: dict[str, list[tuple[float, float]]] = {}
        for sample in self.samples:
            for group, lag in sorted(sample.lag.items()):
                if wanted is None or group in wanted:
                    series.setdefault(group, []).append((sample.at, float(lag)))
        return series


def broker_key(broker: Any) -> str:
    """How a broker is named in the charts: its name, and its id when it is not the master."""
    broker_id = getattr(broker, "broker_id", 0)
    return broker.broker_name if not broker_id else f"{broker.broker_name}/{broker_id}"
