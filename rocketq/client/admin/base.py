"""What every admin operation stands on: the client connection, the NameServer's cluster
table (which brokers there are, and where), and a request to one broker checked for
success."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Self

from ...acl import Credentials
from ...protocol import RemotingCommand, RequestCode, ResponseCode, fastjson
from ..errors import BrokerError, ClientError, NotFoundError
from ..instance import ClientInstance

#: The consumer group admin reads are made as: the tools' group every RocketMQ broker has
#: from its start (what mqadmin's consumeMessage uses), so that they leave no group behind.
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: Seconds an admin request to one broker may take.
BROKER_TIMEOUT = 5.0


class AdminBase:
    """The connection of an admin client and its look-ups of the cluster's brokers."""

    def __init__(self, namesrv: str, *,
                 credentials: Credentials | tuple[str, ...] | None = None,
                 tls: bool | ssl.SSLContext | None = None,
                 instance: ClientInstance | None = None) -> None:
        self.instance = instance or ClientInstance(namesrv, credentials=credentials, tls=tls)
        #: The admin's producers, by group, made on first use (they share ``instance``).
        self._producers: dict[str, Any] = {}

    async def close(self) -> None:
        """Close the admin's connections.

        Raises:
            Nothing.
        """
        await self.instance.remoting.close()

    async def __aenter__(self) -> Self:
        """The admin itself; ``close()`` runs on leaving the block."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ the cluster table
    async def _cluster_info(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_INFO: ``clusterAddrTable`` (cluster -> broker names) and
        ``brokerAddrTable`` (broker name -> its ``brokerAddrs``, id -> address)."""
        r = await self.instance.invoke_namesrv(lambda: RemotingCommand.request(
            RequestCode.GET_BROKER_CLUSTER_INFO))
        if r.code != ResponseCode.SUCCESS:
            raise ClientError(f"cluster info: {r.remark} (code {r.code})")
        info: dict[str, Any] = fastjson.loads(r.body)
        return info

    @staticmethod
    def _members(info: dict[str, Any], name: str) -> list[tuple[int, str]]:
        """``(broker id, address)`` of the broker group ``name``, by id."""
        data = (info.get("brokerAddrTable") or {}).get(name) or {}
        return sorted((int(k), v) for k, v in (data.get("brokerAddrs") or {}).items())

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """``broker name -> master address`` of every broker (of ``cluster``, if given).

        Raises:
            NameServerError: no NameServer answered.
            ClientError: the NameServer refused the query.
        """
        info = await self._cluster_info()
        names = set(info.get("clusterAddrTable", {}).get(cluster, [])) if cluster else None
        out = {}
        for name in info.get("brokerAddrTable", {}):
            addrs = dict(self._members(info, name))
            if 0 in addrs and (names is None or name in names):
                out[name] = addrs[0]
        return out

    async def broker_addresses(self, cluster: str | None = None) -> list[str]:
        """The address of every broker (of ``cluster``), masters and slaves, by broker name
        and id (as mqadmin's CommandUtil.fetchMasterAndSlaveAddrByClusterName gives them).

        Raises:
            NameServerError: no NameServer answered.
            NotFoundError: the NameServer knows no cluster ``cluster``.
            ClientError: the NameServer refused the query.
        """
        info = await self._cluster_info()
        if cluster is None:
            names = sorted(info.get("brokerAddrTable") or {})
        else:
            names = sorted((info.get("clusterAddrTable") or {}).get(cluster) or ())
            if not names:
                raise NotFoundError(f"the NameServer knows no cluster {cluster!r}")
        return [addr for name in names for _, addr in self._members(info, name)]

    async def _targets(self, brokers: list[str] | None, cluster: str | None) -> list[str]:
        """The brokers an operation on groups or accounts goes to: those named, else every
        broker of ``cluster``, else every master broker."""
        if brokers:
            return list(brokers)
        if cluster:
            return await self.broker_addresses(cluster)
        return sorted(set((await self.masters()).values()))

    async def _broker_names(self) -> dict[str, str]:
        """``address -> broker name`` of every broker the NameServer knows."""
        info = await self._cluster_info()
        return {addr: name for name in info.get("brokerAddrTable") or {}
                for _, addr in self._members(info, name)}

    # ------------------------------------------------------------------ requests
    async def _ask(self, addr: str, cmd: RemotingCommand, what: str,
                   timeout: float = BROKER_TIMEOUT) -> RemotingCommand:
        """Send ``cmd`` to the broker at ``addr``; BrokerError (naming ``what``, the broker
        and its remark) unless it answers SUCCESS."""
        r = await self.instance.remoting.invoke(addr, cmd, timeout)
        if r.code != ResponseCode.SUCCESS:
            raise BrokerError(r.code, f"{what} on {addr}: {r.remark or 'refused'}")
        return r

    async def _on_each(self, addrs: list[str], change: Callable[[str], Awaitable[None]]
                       ) -> list[str]:
        """Run ``change`` on every address in turn, and raise its failure (or all of them,
        in one ClientError) once every address was tried. Returns ``addrs``."""
        failures: list[ClientError | OSError] = []
        for addr in addrs:
            try:
                await change(addr)
            except (ClientError, OSError) as exc:
                failures.append(exc)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise ClientError("; ".join(str(f) for f in failures))
        return addrs
