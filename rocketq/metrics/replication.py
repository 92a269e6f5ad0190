"""How far each slave is behind its master (rocketq's own metrics: RocketMQ exports none),
from what the master's HA port knows of each slave link: the CommitLog offset the slave last
reported holding, and when the master appended what comes after it.

- ``rocketq_replication_lag_bytes``: the master's CommitLog end minus what the slave holds.
- ``rocketq_replication_lag_seconds``: how long ago the master appended the first byte the
  slave lacks, that is the age of the oldest message not on the slave yet; 0 when it holds
  everything. The master notes where its log ends every 0.1 s of appends
  (``HAServer.lag_seconds``), so the age is known to that much; reading the message's own
  store timestamp instead would need a record boundary, which a slave's reported offset
  (the end of a chunk) is not.

Served by the master; a slave's samples say which link (``slave_addr``, its address as the
master sees it, and ``slave_id``, the broker id a controller-mode slave gives).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from .broker import broker_node

if TYPE_CHECKING:
    from ..broker import Broker


class ReplicationCollector:
    """The slaves of one master, as its HA port sees them."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.node = broker_node(broker)

    def collect(self) -> Iterator[Metric]:
        node = self.node
        slaves = node.gauge("rocketq_replication_slaves", "Slaves connected to this master's "
                            "HA port")
        lag_bytes = node.gauge("rocketq_replication_lag_bytes", "CommitLog bytes the slave "
                               "does not hold yet", "slave_addr", "slave_id")
        lag_seconds = node.gauge("rocketq_replication_lag_seconds", "Age of the oldest "
                                 "message the slave does not hold yet, in seconds",
                                 "slave_addr", "slave_id")
        ha = self.broker.ha_server
        store = self.broker.store
        if ha is not None and ha.serving and store is not None:
            end = store.commitlog.max_offset
            links = list(ha.connections)
            node.add(slaves, [], len(links))
            for link in links:
                labels = [link.peer, "" if link.broker_id is None else str(link.broker_id)]
                node.add(lag_bytes, labels, max(0, end - link.acked))
                node.add(lag_seconds, labels, ha.lag_seconds(link.acked))
        yield from (slaves, lag_bytes, lag_seconds)
