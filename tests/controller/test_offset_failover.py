"""Consumer offsets through failovers (controller mode): a group commits, its master stops
right after, a slave is promoted, and a new consumer instance of the group goes on exactly
where the last one committed. The offsets reach the slaves as offset-log records in the
replicated CommitLog (broker/offsets/log.py), not by the metadata copy every 3 s, which a
master stopped right after a commit never makes."""

from __future__ import annotations

import collections

import pytest

from rocketq import Message, Producer, PullConsumer, SendStatus

from ..cli.test_cli import start
from ..conftest import fetch_route, wait_for
from .test_failover import ControlledCluster
from .test_tail import controlled  # noqa: F401,F811  (the fixture)

TOPIC = "Resumed"
QUEUES = 4


def route_master(namesrv: str) -> str | None:
    route = fetch_route(namesrv, TOPIC)
    if route is None:
        return None
    addrs = route.broker_addrs.get("broker-a", {})
    return addrs.get(0) or addrs.get("0")


def produce(namesrv: str, bodies: list[bytes]) -> None:
    with Producer("pg", namesrv=namesrv, send_timeout=3, retries=2) as producer:
        for body in bodies:
            assert wait_for(lambda b=body: producer.send(Message(TOPIC, b)).status
                            is SendStatus.SEND_OK, 10), body


def consume_and_commit(namesrv: str, wanted: set[bytes]) -> list[bytes]:
    """What a new instance of group ``cg`` reads until it has every body of ``wanted``
    (and a moment more, to catch what it should not read); it commits, as users do, and
    shuts down."""
    got: list[bytes] = []
    with PullConsumer("cg", namesrv=namesrv, from_where="first", auto_commit=False,
                      rebalance_interval=1.0) as consumer:
        consumer.subscribe(TOPIC)
        consumer.start()
        assert wait_for(lambda: got.extend(m.body for m in consumer.poll(0.2))
                        or wanted <= set(got), 30), sorted(wanted - set(got))[:5]
        got.extend(m.body for m in consumer.poll(0.5))  # nothing more is there
        consumer.commit()
    return got


@pytest.mark.slow
def test_a_group_restarted_after_each_of_three_failovers_reads_everything_once(
        controlled):  # noqa: F811
    st, controller, conf = controlled
    conf.update(syncFlushTimeout=3000, haMaxTimeSlaveNotCatchup=60_000)
    names = ["a", "b", "c"]
    brokers = {name: st.start_broker(name, **conf) for name in names}
    group = controller.engine.state.groups["broker-a"]
    assert wait_for(lambda: len(group.sync_state_set) == 3, 15)
    st.create_topic(TOPIC, QUEUES)
    sent: list[bytes] = []
    read: list[bytes] = []
    for round_ in range(3):
        bodies = [b"r%d-m%d" % (round_, i) for i in range(40)]
        produce(st.namesrv, bodies)
        sent += bodies
        # A new consumer instance goes on from the last commit: it reads this round's
        # messages, and nothing of the earlier rounds.
        got = consume_and_commit(st.namesrv, set(bodies))
        read += got
        assert sorted(got) == sorted(bodies), f"round {round_}: read again " \
            f"{sorted(set(got) - set(bodies))[:5]}"
        # The master stops right after the commit (no metadata copy could run since).
        master = next(n for n, b in brokers.items() if b.replicas.is_master)
        epoch = group.master_epoch
        st.stop_broker(brokers.pop(master))
        assert wait_for(lambda e=epoch: group.master_epoch > e
                        and any(b.replicas.is_master for b in brokers.values()), 15)
        promoted = next(b for b in brokers.values() if b.replicas.is_master)
        assert wait_for(lambda p=promoted: route_master(st.namesrv) == p.address, 15)
        # The stopped broker comes back as a slave: the group has three members again.
        brokers[master] = st.start_broker(master, **conf)
        assert wait_for(lambda: len(group.sync_state_set) == 3, 20), group.sync_state_set
    last = [b"last-m%d" % i for i in range(20)]
    produce(st.namesrv, last)
    sent += last
    read += consume_and_commit(st.namesrv, set(last))
    assert_read_once(read, sent)


def assert_read_once(read: list[bytes], sent: list[bytes]) -> None:
    twice = collections.Counter(read) - collections.Counter(set(read))
    assert not twice, f"read twice: {sorted(twice)[:10]}"
    assert set(read) == set(sent) and len(read) == len(sent) == 140


@pytest.mark.slow
def test_a_group_reads_everything_once_through_three_killed_masters(tmp_path):
    # Processes, and SIGKILL right after the commit: nothing is saved on the way out.
    c = ControlledCluster(tmp_path)
    try:
        assert wait_for(lambda: len(c.replica_info().get("syncStateSet", [])) == 3, 30)
        sent: list[bytes] = []
        read: list[bytes] = []
        for round_ in range(3):
            bodies = [b"r%d-m%d" % (round_, i) for i in range(40)]
            produce(c.namesrv, bodies)
            sent += bodies
            got = consume_and_commit(c.namesrv, set(bodies))
            read += got
            assert sorted(got) == sorted(bodies), f"round {round_}: read again " \
                f"{sorted(set(got) - set(bodies))[:5]}"
            master = c.master()
            epoch = int(c.replica_info()["masterEpoch"])
            c.brokers[master].kill()
            c.brokers[master].wait()
            assert wait_for(lambda e=epoch, m=master: int(c.replica_info().get(
                "masterEpoch", 0)) > e and route_master(c.namesrv) not in (None, m), 20)
            index = list(c.brokers).index(master)
            c.brokers[master] = start(["broker", "-c", str(c.confs[index])], "listening")
            assert wait_for(lambda: len(c.replica_info().get("syncStateSet", [])) == 3, 30)
        last = [b"last-m%d" % i for i in range(20)]
        produce(c.namesrv, last)
        sent += last
        read += consume_and_commit(c.namesrv, set(last))
        assert_read_once(read, sent)
    finally:
        c.close()
