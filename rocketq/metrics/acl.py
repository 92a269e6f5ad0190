"""``rocketq_acl_refusals_total``: requests a broker's or NameServer's ACL refused, by the
check that refused them (``reason``: ``unsigned``, ``unknown_access_key``, ``no_signature``,
``bad_signature``, ``not_admin``, ``no_permission``), counted by ``AccessControl`` as it
refuses, remoting and gRPC requests alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from ..acl import AccessControl
from .labels import Node


class AclCollector:
    """The refusals of one server's ACL (``acl()`` is None while it has none)."""

    def __init__(self, node: Node, acl: Callable[[], AccessControl | None]) -> None:
        self.node = node
        self.acl = acl

    def collect(self) -> Iterator[Metric]:
        family = self.node.counter("rocketq_acl_refusals_total", "Requests the ACL refused",
                                   "reason")
        acl = self.acl()
        if acl is not None:
            for reason, count in sorted(acl.refused.items()):
                self.node.add(family, [reason], count)
        yield family
