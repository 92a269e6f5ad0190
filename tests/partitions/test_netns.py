"""Partitions of a real cluster: every NameServer, broker and client its own process in its own
network namespace, faults as nft rules between them, and the history checked afterwards."""

from __future__ import annotations

import time

import pytest

from . import rig
from .history import check, load
from .net import unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

WHY = unavailable()
if WHY:
    pytest.skip(WHY, allow_module_level=True)

ACKED = '"outcome":"ok"'


def test_slave_cut_from_its_master_loses_nothing_and_catches_up(net, tmp_path):
    """SYNC_MASTER and one slave; a producer and a consumer group in namespaces of their own;
    the slave is cut from the master both ways for 4 s while the producer sends without
    pause. Nothing acknowledged may be lost or read twice, and the slave catches up."""
    began = time.monotonic()
    d = str(tmp_path)
    ns, m, s = net.node("namesrv"), net.node("master"), net.node("slave")
    producer_node, consumer_node = net.node("producer"), net.node("consumer")
    namesrv = rig.namesrv(net, ns, d)
    master = rig.broker(net, m, d, namesrv, 0, "SYNC_MASTER")
    slave = rig.broker(net, s, d, namesrv, 1, "SLAVE", master=m)
    consumer, reads = rig.client(net, consumer_node, d, "consume", namesrv, "Cut")
    producer, sends = rig.client(net, producer_node, d, "produce", namesrv, "Cut",
                                 "--timeout", "2")

    def acked() -> int:
        return rig.count_lines(sends, ACKED)

    assert rig.wait_until(lambda: acked() >= 100, 20), "no steady acknowledged sends"
    net.cut(m, s)
    cut_at = acked()
    time.sleep(4)
    net.heal(m, s)
    healed_at = acked()
    # The producer goes on until sends are acknowledged again (the slave reconnected).
    assert rig.wait_until(lambda: acked() >= healed_at + 100, 25), \
        f"sends not acknowledged again after healing ({acked()} acknowledged)"
    assert rig.stop(producer) == 0
    total = acked()
    assert rig.wait_until(lambda: rig.count_lines(reads) >= total, 15), \
        f"the consumer read {rig.count_lines(reads)} of {total} acknowledged"
    time.sleep(0.5)  # reads of anything else that was stored
    assert rig.stop(consumer) == 0

    # The slave holds everything its master does.
    assert rig.wait_until(lambda: rig.max_offset(slave) == rig.max_offset(master), 15), \
        f"slave at {rig.max_offset(slave)}, master at {rig.max_offset(master)}"

    verdict = check(load([sends, reads]))
    assert verdict.ok, str(verdict)
    assert verdict.stats["acknowledged"] == total
    print(f"\n{verdict}; acknowledged during the cut {healed_at - cut_at}; "
          f"{time.monotonic() - began:.1f} s")
