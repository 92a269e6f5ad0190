"""A master that wrote what no replica acknowledged, then lost its group, cuts that tail when
it comes back as a slave: its log becomes the new master's, byte for byte. Brokers and the
controller run in one process here so the test can silence one broker's links at will."""

from __future__ import annotations

import pytest

from rocketq import BrokerError, Message, Producer, SendStatus
from rocketq.controller import Controller, ControllerConfig, RaftEngine

from ..conftest import wait_for
from ..servers import ServerThread
from .conftest import port_pair


@pytest.fixture
def controlled(tmp_path):
    """A NameServer and one controller node in a server thread, and the broker settings of a
    group that follows it; the tests start the brokers."""
    st = ServerThread(tmp_path)
    controller = None
    try:
        st.start_namesrv()
        controller, conf = start_controller(st)
        yield st, controller, conf
    finally:
        if controller is not None:
            st.call(controller.stop())
        st.stop()


def start_controller(st: ServerThread) -> tuple[Controller, dict]:
    """One Raft controller node in the test's server thread (short lease and scans), and the
    broker settings of a group that follows it."""
    port = port_pair()
    addr = f"127.0.0.1:{port}"

    async def go():
        node = Controller(RaftEngine(addr, [addr]), "127.0.0.1", port, ControllerConfig(
            scanNotActiveBrokerInterval=50, masterLeaseMillis=1000))
        await node.start()
        return node
    controller = st.call(go())
    assert wait_for(controller.engine.is_leader, 10)
    return controller, dict(
        brokerName="broker-a", enableControllerMode=True, controllerAddr=addr,
        allAckInSyncStateSet=True, syncFlushTimeout=300, brokerHeartbeatInterval=200,
        controllerHeartBeatTimeoutMills=1000, checkSyncStateSetPeriod=200,
        syncBrokerMetadataPeriod=300)


def test_a_slave_dispatches_no_further_than_its_masters_confirm_offset(controlled):
    st, controller, conf = controlled
    conf["haMaxTimeSlaveNotCatchup"] = 60_000  # c stays in the SyncStateSet
    a = st.start_broker("a", **conf)
    b = st.start_broker("b", **conf)
    c = st.start_broker("c", **conf)
    group = controller.engine.state.groups["broker-a"]
    assert wait_for(lambda: group.sync_state_set == {1, 2, 3}, 10)
    st.create_topic("Confirm", 1)
    with Producer("pg", namesrv=st.namesrv) as producer:
        sent = [producer.send(Message("Confirm", b"m%d" % i)) for i in range(10)]
        assert {r.status for r in sent} == {SendStatus.SEND_OK}
        st.call(c.ha_client.stop())  # c acknowledges nothing more
        held = [producer.send(Message("Confirm", b"h%d" % i)) for i in range(3)]
    assert {r.status for r in held} <= {SendStatus.FLUSH_SLAVE_TIMEOUT,
                                        SendStatus.SLAVE_NOT_AVAILABLE}
    # b holds all of a's log, but a consumer of b sees only what the whole group holds.
    assert wait_for(lambda: b.store.commitlog.max_offset == a.store.commitlog.max_offset,
                    5)
    b.store.catch_up()
    assert b.store.get_max_offset("Confirm", 0) == 10
    st.call(_start(c.ha_client))  # c catches up: the confirmOffset moves, b dispatches
    assert wait_for(lambda: b.store.get_max_offset("Confirm", 0) == 13, 10)


async def _start(client) -> None:
    client.start()


def test_a_master_that_wrote_alone_cuts_that_tail_when_it_rejoins(controlled):
    st, controller, conf = controlled
    a = st.start_broker("a", **conf)
    b = st.start_broker("b", **conf)
    assert a.replicas.is_master and not b.replicas.is_master
    group = controller.engine.state.groups["broker-a"]
    assert wait_for(lambda: group.sync_state_set == {1, 2}, 10)
    st.create_topic("Tail", 1)
    with Producer("pg", namesrv=st.namesrv) as producer:
        sent = [producer.send(Message("Tail", b"kept-%d" % i)) for i in range(20)]
        assert {r.status for r in sent} == {SendStatus.SEND_OK}
        st.call(b.ha_client.stop())  # b hears nothing more from a
        alone = [producer.send(Message("Tail", b"alone-%d" % i)) for i in range(5)]
    # Stored on a alone, and a said so: none was acknowledged as replicated.
    assert {r.status for r in alone} <= {SendStatus.FLUSH_SLAVE_TIMEOUT,
                                         SendStatus.SLAVE_NOT_AVAILABLE}
    a_end, b_end = a.store.commitlog.max_offset, b.store.commitlog.max_offset
    assert a_end > b_end
    # Dispatch stops at the confirmOffset: no consumer of a sees what a failover could
    # take back.
    a.store.catch_up()
    assert a.store.get_max_offset("Tail", 0) == 20
    st.call(a.replicas.stop())  # a falls silent: its lease runs out, b is elected
    assert wait_for(lambda: b.replicas.is_master, 10)
    assert group.master_epoch == 2
    assert not a.replicas.lease_valid()  # a takes no write meanwhile
    st.call(a.replicas.start())  # a is back: it learns of epoch 2
    assert wait_for(lambda: not a.replicas.is_master
                    and a.store.commitlog.max_offset == b.store.commitlog.max_offset, 10)

    def log_bytes(broker) -> bytes:
        files = broker.store.commitlog.files.files
        return b"".join(f.view[:f.wrote_position].tobytes() for f in files)
    assert log_bytes(a) == log_bytes(b)
    a.store.wait_dispatched(timeout=5)
    bodies = [m.body for m in a.store.get_messages("Tail", 0, 0, 100).decode()]
    assert bodies == [b"kept-%d" % i for i in range(20)]  # the lone tail is gone
    assert a.replicas.epochs.entries == b.replicas.epochs.entries


def test_sends_fail_while_fewer_replicas_are_in_sync_than_min_in_sync_replicas(controlled):
    st, controller, conf = controlled
    conf.update(minInSyncReplicas=2, haMaxTimeSlaveNotCatchup=500)
    a = st.start_broker("a", **conf)
    b = st.start_broker("b", **conf)
    group = controller.engine.state.groups["broker-a"]
    assert wait_for(lambda: group.sync_state_set == {1, 2}, 10)
    st.create_topic("Min", 1)
    with Producer("pg", namesrv=st.namesrv, retries=0) as producer:
        assert producer.send(Message("Min", b"ok")).status is SendStatus.SEND_OK
        st.call(b.ha_client.stop())  # b falls behind and leaves the SyncStateSet
        assert wait_for(lambda: group.sync_state_set == {1}, 10)
        end = a.store.commitlog.max_offset
        with pytest.raises(BrokerError, match="in-sync replicas not enough"):
            producer.send(Message("Min", b"refused"))
        assert a.store.commitlog.max_offset == end  # nothing written
        st.call(_start(b.ha_client))  # b catches up and is back in the set
        assert wait_for(lambda: group.sync_state_set == {1, 2}, 10)
        assert wait_for(lambda: a.ha_server.sync_members == {2}, 5)
        assert producer.send(Message("Min", b"again")).status is SendStatus.SEND_OK
