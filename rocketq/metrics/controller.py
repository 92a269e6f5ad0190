"""A controller node's metrics (rocketq's names; RocketMQ's controller has ``role``,
``election_total`` and ``active_broker_num`` under no prefix): per broker group (label
``broker_set``, RocketMQ's name for it), the master epoch, the SyncStateSet and its epoch,
the brokers alive by this node's heartbeats, and the elections this node decided."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from .labels import Node

if TYPE_CHECKING:
    from ..controller import Controller


def controller_node(controller: Controller) -> Node:
    return Node("controller", controller.address)


class ControllerCollector:
    """One controller node's view of the broker groups."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.node = controller_node(controller)

    def collect(self) -> Iterator[Metric]:
        node, controller = self.node, self.controller
        leader = node.gauge("rocketq_controller_is_leader", "1 on the node that decides "
                            "(the consensus engine's leader), 0 on the others")
        node.add(leader, [], 1 if controller.engine.is_leader() else 0)
        names = ("cluster", "broker_set")
        epoch = node.gauge("rocketq_controller_master_epoch", "The group's master epoch: one "
                           "more at each election", *names)
        ss_epoch = node.gauge("rocketq_controller_sync_state_set_epoch", "The epoch of the "
                              "group's SyncStateSet", *names)
        in_sync = node.gauge("rocketq_controller_sync_state_set_size", "Brokers in the "
                             "group's SyncStateSet, the master included", *names)
        has_master = node.gauge("rocketq_controller_has_master", "1 while the group has a "
                                "master", *names)
        alive = node.gauge("rocketq_controller_active_brokers", "Brokers of the group whose "
                           "heartbeats this node hears", *names)
        now_ms = int(time.time() * 1000)
        clusters = {}
        for name, group in list(controller.engine.state.groups.items()):
            clusters[name] = group.cluster
            labels = [group.cluster, name]
            node.add(epoch, labels, group.master_epoch)
            node.add(ss_epoch, labels, group.sync_state_set_epoch)
            node.add(in_sync, labels, len(group.sync_state_set))
            node.add(has_master, labels, 0 if group.master_id is None else 1)
            live = controller.live.get(name, {})
            node.add(alive, labels, sum(1 for v in list(live.values()) if v.alive(now_ms)))
        elections = node.counter("rocketq_controller_elections_total", "Elections this node "
                                 "decided, by result", *names, "election_result")
        for (name, result), count in sorted(controller.elections.items()):
            node.add(elections, [clusters.get(name, ""), name, result], count)
        yield from (leader, epoch, ss_epoch, in_sync, has_master, alive, elections)
