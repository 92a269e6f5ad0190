"""The brokers of a cluster: each one's role, version and runtime figures (mqadmin clusterList
and brokerStatus), and its settings (getBrokerConfig, updateBrokerConfig)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import orjson

from ...protocol import RemotingCommand, RequestCode
from ..errors import InvalidArgumentError
from .base import AdminBase

#: Seconds a broker has to answer for ``cluster()``; one that does not is listed with an error.
RUNTIME_TIMEOUT = 3.0


def _first_number(text: str | None) -> float:
    """The first figure of a runtime value such as putTps (``"12.5 11.0 10.9"``: the rates
    over the last 10 s, 1 min and 10 min); 0.0 when there is none."""
    try:
        return float((text or "").split()[0])
    except (IndexError, ValueError):
        return 0.0


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


@dataclass
class BrokerStatus:
    """One broker as the NameServer lists it, with its GET_BROKER_RUNTIME_INFO table."""

    cluster: str
    broker_name: str
    #: 0 for a master, 1 and up for its slaves.
    broker_id: int
    address: str
    #: ``ASYNC_MASTER``, ``SYNC_MASTER`` or ``SLAVE`` as the broker reports it; ``MASTER`` or
    #: ``SLAVE`` (by its id) for a broker that does not say.
    role: str
    #: The broker's version description (``brokerVersionDesc``: the name of the RocketMQ
    #: version it speaks, ``V4_9_8``), '' if unknown.
    version: str = ""
    #: A rocketq broker's own version (``rocketqVersion``), '' for another broker.
    rocketq_version: str = ""
    #: The master's epoch in controller mode, else None.
    epoch: int | None = None
    #: The whole runtime table, as the broker wrote it.
    runtime: dict[str, str] = field(default_factory=dict)
    #: A slave's distance behind its master: bytes of the master's CommitLog it does not
    #: hold yet; None for a master, or when either did not answer.
    behind_master: int | None = None
    #: Why the broker could not be asked, when it could not (its figures are then empty).
    error: str | None = None

    @property
    def put_tps(self) -> float:
        """Messages put per second, over the last 10 seconds."""
        return _first_number(self.runtime.get("putTps"))

    @property
    def get_tps(self) -> float:
        """Messages handed to consumers per second, over the last 10 seconds."""
        return _first_number(self.runtime.get("getTransferedTps"))

    @property
    def put_today(self) -> int:
        """Messages put since midnight."""
        return _int(self.runtime.get("msgPutTotalTodayNow")) - _int(
            self.runtime.get("msgPutTotalTodayMorning"))

    @property
    def get_today(self) -> int:
        """Messages handed to consumers since midnight."""
        return _int(self.runtime.get("msgGetTotalTodayNow")) - _int(
            self.runtime.get("msgGetTotalTodayMorning"))

    @property
    def disk_ratio(self) -> float:
        """How full the CommitLog's disk is, 0.0 to 1.0."""
        try:
            return float(self.runtime.get("commitLogDiskRatio") or 0)
        except ValueError:
            return 0.0

    @property
    def refusal(self) -> str | None:
        """Why the broker refuses every send now (its disk over
        ``diskSpaceWarningLevelRatio``, its permission, no lease from the controller, too few
        in-sync replicas), from its runtime table's ``writeable`` and ``notWriteableReason``;
        None while it takes sends, or when it does not say."""
        if self.runtime.get("writeable") != "false":
            return None
        return self.runtime.get("notWriteableReason") or "the broker says it is not writeable"

    @property
    def dispatch_behind(self) -> int:
        """Bytes of the CommitLog not yet dispatched to ConsumeQueues and the index."""
        return _int(self.runtime.get("dispatchBehindBytes"))


class ClusterAdmin(AdminBase):
    """Brokers: their status and their settings."""

    async def cluster(self) -> list[BrokerStatus]:
        """Every broker of every cluster the NameServer knows, by cluster, name and id, each
        with its runtime table (asked of all of them at once). A broker that does not answer
        is listed with ``error`` set rather than failing the whole call.

        Raises:
            NameServerError: no NameServer answered.
            ClientError: the NameServer refused the query.
        """
        info = await self._cluster_info()
        rows = [(cluster, name, bid, addr)
                for cluster, names in sorted((info.get("clusterAddrTable") or {}).items())
                for name in sorted(names)
                for bid, addr in self._members(info, name)]
        statuses = await asyncio.gather(*(self._status(*row) for row in rows))
        master_max = {s.broker_name: s.runtime.get("commitLogMaxOffset") for s in statuses
                      if s.broker_id == 0 and s.runtime}
        for s in statuses:
            mine, theirs = s.runtime.get("commitLogMaxOffset"), master_max.get(s.broker_name)
            if s.broker_id != 0 and mine is not None and theirs is not None:
                s.behind_master = max(0, _int(theirs) - _int(mine))
        return list(statuses)

    async def _status(self, cluster: str, name: str, bid: int, addr: str) -> BrokerStatus:
        status = BrokerStatus(cluster, name, bid, addr, "MASTER" if bid == 0 else "SLAVE")
        try:
            r = await self._ask(addr, RemotingCommand.request(
                RequestCode.GET_BROKER_RUNTIME_INFO), "runtime info", RUNTIME_TIMEOUT)
            table = orjson.loads(r.body).get("table") or {}
        except Exception as exc:  # a broker that does not answer is still listed
            status.error = str(exc).strip() or type(exc).__name__
            return status
        status.runtime = {str(k): str(v) for k, v in table.items()}
        status.role = status.runtime.get("brokerRole") or status.role
        status.version = status.runtime.get("brokerVersionDesc", "")
        status.rocketq_version = status.runtime.get("rocketqVersion", "")
        if "masterEpoch" in status.runtime:
            status.epoch = _int(status.runtime["masterEpoch"])
        return status

    async def broker_config(self, address: str) -> dict[str, str]:
        """Every setting of the broker at ``address`` (mqadmin getBrokerConfig), in the order
        it lists them.

        Raises:
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            BrokerError: the broker refused the query.
        """
        r = await self._ask(address, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG),
                            "broker config")
        out = {}
        for line in r.body.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.lstrip().startswith(("#", "!")):
                out[key.strip()] = value.strip()
        return out

    async def update_broker_config(self, address: str, values: dict[str, str]) -> None:
        """Change settings of the broker at ``address`` (mqadmin updateBrokerConfig). The
        broker checks every one first and changes nothing if one is refused (an unknown key,
        a value out of range, a key read only at start); what it accepts it keeps across
        restarts.

        Raises:
            InvalidArgumentError: ``values`` is empty, or a key is empty or holds ``=``.
            ConnectionClosedError: the broker could not be reached.
            ClientTimeoutError: the broker did not answer in time.
            BrokerError: the broker refused the change; its remark says which key and why.
        """
        if not values:
            raise InvalidArgumentError("values: give at least one setting to change")
        for key, value in values.items():
            if not str(key).strip() or "=" in str(key) or "\n" in f"{key}{value}":
                raise InvalidArgumentError(f"values: {key!r}={value!r} is not a setting")
        # Java properties text, as mqadmin sends it.
        text = "".join(f"{str(k).strip()}={str(v).strip()}\n" for k, v in values.items())
        await self._ask(address, RemotingCommand.request(
            RequestCode.UPDATE_BROKER_CONFIG, body=text.encode()), "updating the broker config")
