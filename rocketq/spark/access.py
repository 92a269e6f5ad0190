"""How the Spark connector connects: :class:`Access` (the ACL account and TLS every
connection uses, from the data source's options) and, per Access, the connection pool each
Python worker keeps on its event loop thread. Plain Python, no Spark imports: the driver's
planning, the tasks' pulls and sends and the sink's commits all connect through here."""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass
from typing import Any

from ..acl import Credentials
from ..client.instance import ClientInstance
from ..client.sync import _LoopThread
from ..remoting import RemotingClient


@dataclass(frozen=True)
class Access:
    """How every connection of the connector signs and encrypts: the options ``accessKey``
    and ``secretKey`` (ACL), ``tls`` and ``tlsTrustCertPath`` (the CA the brokers' and
    NameServers' certificates are checked against; the system's CAs without it). Plain
    strings, so it travels to the tasks with their partitions; each process makes its own TLS
    context. Every client below is made by :meth:`remoting`, :meth:`instance` or
    :meth:`producer`."""

    access_key: str = ""
    secret_key: str = ""
    tls: bool = False
    trust_cert_path: str = ""

    @classmethod
    def from_options(cls, options: dict[str, str]) -> Access:
        """From the data source's options (lowercase keys)."""
        key, secret = options.get("accesskey", ""), options.get("secretkey", "")
        if bool(key) != bool(secret):
            raise ValueError("the options accessKey and secretKey go together")
        tls = str(options.get("tls", "false")).strip().lower()
        if tls not in ("true", "false"):
            raise ValueError(f"tls must be true or false, not {tls!r}")
        trust = options.get("tlstrustcertpath", "")
        return cls(key, secret, tls == "true" or bool(trust), trust)

    @property
    def credentials(self) -> Credentials | None:
        return Credentials(self.access_key, self.secret_key) if self.access_key else None

    def ssl_context(self) -> ssl.SSLContext | None:
        return _ssl_context(self.trust_cert_path) if self.tls else None

    def remoting(self) -> RemotingClient:
        credentials = self.credentials
        return RemotingClient(signer=credentials.sign if credentials else None,
                              ssl=self.ssl_context())

    def instance(self, namesrv: str) -> ClientInstance:
        return ClientInstance(namesrv, credentials=self.credentials, tls=self.ssl_context())

    def producer(self, group: str, namesrv: str) -> Any:
        from ..client.producer import AsyncProducer

        return AsyncProducer(group, namesrv, credentials=self.credentials,
                             tls=self.ssl_context())


#: No ACL, no TLS.
PLAIN = Access()


@functools.lru_cache(maxsize=8)
def _ssl_context(trust_cert_path: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=trust_cert_path or None)


def worker_client(access: Access = PLAIN) -> tuple[_LoopThread, RemotingClient]:
    """The process's event loop thread and a connection pool on it, per way of connecting.
    Spark reuses Python workers, so later partitions read through connections already open."""
    loop = _LoopThread.get()
    found = _WORKERS.get(access)
    if found is None or found[0] is not loop:
        found = _WORKERS[access] = (loop, loop.create(access.remoting))
    return found


_WORKERS: dict[Access, tuple[_LoopThread, RemotingClient]] = {}
