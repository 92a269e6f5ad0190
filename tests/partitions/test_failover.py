"""Partitions of a controller-mode group (every in-sync replica acknowledges each send): the
master cut off from the controller and its slaves while its producers still reach it, a
controller split 2/1, a lossy link. Every process runs in its own namespace; a producer
sends without pause and a consumer group reads throughout, and the history checker judges
what they recorded."""

from __future__ import annotations

import time

import pytest

from . import rig
from .history import annotate_epochs, check, load
from .net import Network, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

WHY = unavailable()
if WHY:
    pytest.skip(WHY, allow_module_level=True)

ACKED = '"outcome":"ok"'


class Load:
    """A producer and a consumer group, each in a namespace of its own."""

    def __init__(self, net: Network, group: rig.ControlledGroup, topic: str) -> None:
        d = group.directory
        self.consumer, self.reads = rig.client(net, net.node("consumer"), d, "consume",
                                               group.namesrv, topic)
        self.producer, self.sends = rig.client(net, net.node("producer"), d, "produce",
                                               group.namesrv, topic, "--timeout", "2")

    def acked(self) -> int:
        return rig.count_lines(self.sends, ACKED)

    def first_ack_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` (time.time()) to the first send acknowledged that began
        after it; None if there is none."""
        firsts = [op.end for op in load([self.sends])
                  if op.outcome == "ok" and op.start >= moment]
        return min(firsts) - moment if firsts else None

    def longest_pause(self, begin: float, end: float) -> float:
        """The longest time between two acknowledgements from ``begin`` to ``end``."""
        ends = sorted(op.end for op in load([self.sends])
                      if op.outcome == "ok" and begin <= op.end <= end)
        marks = [begin, *ends, end]
        return max(b - a for a, b in zip(marks, marks[1:]))  # noqa: B905

    def finish(self, group: rig.ControlledGroup):
        """Stop the producer, let the consumer read everything acknowledged, stop it; the
        checker's verdict on the history (epochs taken from the master's epoch file)."""
        assert rig.stop(self.producer) == 0
        total = self.acked()
        assert rig.wait_until(lambda: rig.count_lines(self.reads) >= total, 30), \
            f"the consumer read {rig.count_lines(self.reads)} of {total} acknowledged"
        time.sleep(0.5)  # reads of anything else that was stored
        assert rig.stop(self.consumer) == 0
        ops = load([self.sends, self.reads])
        annotate_epochs(ops, group.epochs())
        verdict = check(ops)
        assert verdict.stats["acknowledged"] == total
        return verdict, ops


#: The controller's default master lease (ControllerConfig.masterLeaseMillis), in seconds.
LEASE = 3.0


@pytest.mark.parametrize("cut", ["controller-and-slaves", "controller-only"])
def test_isolated_master_is_fenced_and_rejoins(net, tmp_path, cut):
    """The master loses the controller (and, in the first case, both slaves); producers and
    consumers still reach it. Cut from its slaves, it acknowledges nothing more (they cannot
    confirm); still reaching them, it acknowledges nothing once its lease is gone, before
    the controller elects one of them. A slave is elected, the producer goes on with it,
    and after healing the old master follows it as a slave, its unconfirmed tail cut."""
    d = str(tmp_path)
    group = rig.ControlledGroup(net, d)
    old = group.master()
    assert old is not None
    work = Load(net, group, "Fenced")
    assert rig.wait_until(lambda: work.acked() >= 100, 20), "no steady acknowledged sends"

    others = [*group.controller_nodes] + \
        ([n for n in group.nodes if n is not old] if cut == "controller-and-slaves" else [])
    for node in others:
        net.cut(old, node)
    cut_at = time.time()  # every rule in place
    assert rig.wait_until(lambda: group.master() not in (None, old), 20), \
        f"no new master elected: {group.info()}"
    new = group.master()
    elected_after = time.time() - cut_at
    acked_at_cut = work.acked()
    assert rig.wait_until(lambda: work.acked() >= acked_at_cut + 100, 30), \
        "the producer did not go on with the new master"
    for node in others:
        net.heal(old, node)
    # The old master learns the newer epoch and follows; the group is whole again.
    assert rig.wait_until(group.whole, 30), f"the old master did not rejoin: {group.info()}"
    verdict, ops = work.finish(group)
    # Once the producer has stopped: sends begun before a cut may still have been in flight
    # when the count above was reached, and those begun after it logged later.
    resumed = work.first_ack_after(cut_at)
    assert resumed is not None, "no send begun after the cut was acknowledged"
    # With the producer stopped (while it sends, two reads of the logs' ends never agree).
    assert rig.wait_until(
        lambda: rig.max_offset(group.addr_of(old)) == rig.max_offset(group.addr_of(new)), 20), \
        f"old at {rig.max_offset(group.addr_of(old))}, new at " \
        f"{rig.max_offset(group.addr_of(new))}; {group.info()}"
    assert verdict.ok, str(verdict)
    old_writer = group.addr_of(old)
    if cut == "controller-and-slaves":
        # What it appended after the cut (sends left unknown) was confirmed by nobody.
        with open(f"{d}/{old.name}.log") as fh:
            assert "does not share with master" in fh.read(), "no unconfirmed tail was cut"
    fenced_from = cut_at + (0 if cut == "controller-and-slaves" else LEASE)
    late = [op for op in ops if op.kind == "send" and op.outcome == "ok"
            and op.writer == old_writer and op.start > fenced_from]
    assert not late, f"the isolated master acknowledged {len(late)} sends after " \
                     f"+{fenced_from - cut_at:.0f} s"
    last_old = max((op.end for op in ops if op.kind == "send" and op.outcome == "ok"
                    and op.writer == old_writer), default=cut_at) - cut_at
    print(f"\n{verdict}; the old master's last acknowledgement +{last_old:.1f} s, new master "
          f"after {elected_after:.1f} s, first acknowledged send {resumed:.1f} s after the cut")


def test_controller_split_two_one_minority_elects_nothing(net, tmp_path):
    """Three controller nodes; the Raft leader is cut from the other two (brokers reach all
    three). The majority elects a leader of its own and the master keeps its lease through
    it; then the master is SIGKILLed and the majority elects a new master. The minority node
    changes nothing: it never names another master."""
    d = str(tmp_path)
    group = rig.ControlledGroup(net, d, controllers=3)
    work = Load(net, group, "Split")
    assert rig.wait_until(lambda: work.acked() >= 100, 20), "no steady acknowledged sends"
    leading = rig.controller_leader(group.controllers)
    leader = next(n for n, a in zip(group.controller_nodes, group.controllers, strict=True)
                  if a == leading)
    majority = [n for n in group.controller_nodes if n is not leader]
    majority_addrs = [f"{n.addr}:{rig.CONTROLLER_PORT}" for n in majority]
    minority_addr = f"{leader.addr}:{rig.CONTROLLER_PORT}"
    epoch_before = int(group.info()["masterEpoch"])
    old = group.master()
    for node in majority:
        net.cut(leader, node)
    split_at = time.time()
    assert rig.wait_until(lambda: rig.controller_leader(majority_addrs) is not None, 10), \
        "the majority elected no controller leader"
    stepped_down = rig.wait_until(lambda: rig.controller_leader([minority_addr]) is None, 10)
    assert stepped_down, "the cut-off controller leader still says it leads"
    # The master renews its lease with the new controller leader: sends go on.
    acked = work.acked()
    assert rig.wait_until(lambda: work.acked() >= acked + 200, 20), "sends stopped"
    assert rig.replica_info(majority_addrs).get("masterAddress") == group.addr_of(old), \
        "the master changed though it never went away"

    group.procs[old.name].kill()
    killed_at = time.time()
    assert rig.wait_until(lambda: rig.replica_info(majority_addrs).get("masterAddress")
                          not in (None, "", group.addr_of(old)), 30), \
        "the majority elected no new master"
    assert rig.wait_until(lambda: work.first_ack_after(killed_at) is not None, 30), \
        "no send acknowledged after the master was killed"
    # The minority answers with the old state or not at all; it never names a master.
    for _ in range(10):
        info = rig.replica_info([minority_addr])
        assert not info or int(info["masterEpoch"]) <= epoch_before, info
        time.sleep(0.3)
    net.heal_all()
    assert rig.wait_until(lambda: len(group.info().get("syncStateSet", [])) >= 2, 30)
    verdict, _ = work.finish(group)
    assert verdict.ok, str(verdict)
    print(f"\n{verdict}; longest pause of acknowledged sends over the split "
          f"{work.longest_pause(split_at, killed_at):.2f} s; first acknowledged send "
          f"{work.first_ack_after(killed_at):.1f} s after the kill")


def test_lossy_links_for_a_minute_lose_nothing(net, tmp_path):
    """30 % of the packets between the master and every other node dropped at random for
    60 s, both ways: sends slow down or fail, failovers may happen, and nothing acknowledged
    is lost, read twice or written by two masters at once."""
    d = str(tmp_path)
    group = rig.ControlledGroup(net, d)
    work = Load(net, group, "Lossy")
    assert rig.wait_until(lambda: work.acked() >= 100, 20), "no steady acknowledged sends"
    master = group.master()
    assert master is not None
    others = [n for n in net.nodes.values() if n is not master]
    before = work.acked()
    for node in others:
        net.lossy(master, node, 0.3)
    time.sleep(60)
    during = work.acked() - before
    net.heal_all()
    assert rig.wait_until(group.whole, 30), f"the group is not whole again: {group.info()}"
    healed = work.acked()
    assert rig.wait_until(lambda: work.acked() >= healed + 100, 30), "sends did not recover"
    verdict, _ = work.finish(group)
    assert verdict.ok, str(verdict)
    print(f"\n{verdict}; acknowledged during the 60 s of loss: {during}")


def test_slave_cut_from_its_master_leaves_the_sync_state_set_and_returns(net, tmp_path):
    """A slave cut from its master: sends wait for it (unacknowledged) until it has been
    behind for haMaxTimeSlaveNotCatchup (3 s here, RocketMQ's default 15 s), then the
    master shrinks the SyncStateSet and sends are acknowledged again; after healing the
    slave catches up and is back in the set."""
    d = str(tmp_path)
    group = rig.ControlledGroup(net, d, haMaxTimeSlaveNotCatchup=3000)
    master = group.master()
    assert master is not None
    slave = next(n for n in group.nodes if n is not master)
    work = Load(net, group, "SlaveCut")
    assert rig.wait_until(lambda: work.acked() >= 100, 20), "no steady acknowledged sends"
    net.cut(master, slave)
    cut_at = time.time()
    assert rig.wait_until(lambda: len(group.info().get("syncStateSet", [])) == 2, 20), \
        f"the SyncStateSet did not shrink: {group.info()}"
    shrunk_after = time.time() - cut_at
    acked = work.acked()
    assert rig.wait_until(lambda: work.acked() >= acked + 100, 20), \
        "sends not acknowledged with the smaller SyncStateSet"
    net.heal(master, slave)
    healed_at = time.time()
    assert rig.wait_until(group.whole, 30), f"the slave did not return: {group.info()}"
    back_after = time.time() - healed_at
    verdict, _ = work.finish(group)
    assert verdict.ok, str(verdict)
    assert rig.wait_until(lambda: rig.max_offset(group.addr_of(slave))
                          == rig.max_offset(group.addr_of(master)), 20)
    # Read once the load has finished and its log of sends is complete.
    resumed = work.first_ack_after(cut_at + 0.5)
    assert resumed is not None, "no send begun after the cut was acknowledged"
    print(f"\n{verdict}; SyncStateSet shrank {shrunk_after:.1f} s after the cut, sends "
          f"acknowledged again {resumed:.1f} s after it; back in the set {back_after:.1f} s "
          "after healing")
