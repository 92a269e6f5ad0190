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


def _pulled(st: ServerThread, broker, topic: str) -> list[bytes]:
    """The bodies a consumer's pull from ``broker`` (queue 0, from offset 0) gets."""
    from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
    from rocketq.protocol.message import decode_records
    from rocketq.remoting import RemotingClient

    async def go():
        client = RemotingClient()
        try:
            return await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "cg", "topic": topic, "queueId": 0, "queueOffset": 0,
                    "maxMsgNums": 32, "sysFlag": 4, "subscription": "*", "commitOffset": 0,
                    "suspendTimeoutMillis": 0, "subVersion": 0}), 5)
        finally:
            await client.close()
    r = st.call(go())
    if r.code != ResponseCode.SUCCESS:
        return []
    return [m.body for m in decode_records(r.body)]


class StuckReplica:
    """A link to a master's HA port that says it is replica ``broker_id`` holding
    ``offset``, then acknowledges nothing more (it reads and drops what comes): the replica
    stays in the SyncStateSet (for ``haMaxTimeSlaveNotCatchup``) and holds the master's
    confirmOffset back."""

    def __init__(self, st: ServerThread, address: str, broker_id: int, offset: int) -> None:
        import asyncio

        from rocketq.ha.protocol import encode_hello, encode_report

        async def go():
            host, _, port = address.rpartition(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(encode_hello(broker_id) + encode_report(offset))

            async def drain():
                while await reader.read(1 << 16):
                    pass
            return writer, asyncio.get_running_loop().create_task(drain())
        self.st = st
        self.writer, self.task = st.call(go())

    def close(self) -> None:
        async def go():
            self.task.cancel()
            self.writer.transport.abort()
        self.st.call(go())


def test_a_restarted_slave_shows_nothing_past_the_confirm_offset_it_knew(controlled):
    st, controller, conf = controlled
    conf.update(haMaxTimeSlaveNotCatchup=60_000, slaveReadEnable=True)
    a = st.start_broker("a", **conf)
    b = st.start_broker("b", **conf)
    c = st.start_broker("c", **conf)
    group = controller.engine.state.groups["broker-a"]
    assert wait_for(lambda: group.sync_state_set == {1, 2, 3}, 10)
    st.create_topic("Restart", 1)
    confirmed = [b"m%d" % i for i in range(10)]
    with Producer("pg", namesrv=st.namesrv) as producer:
        sent = [producer.send(Message("Restart", body)) for body in confirmed]
        assert {r.status for r in sent} == {SendStatus.SEND_OK}
        # c stops taking a's log, but a link in its name stays, in sync and acknowledging
        # nothing more: a's confirmOffset stays where it is, whoever else comes and goes.
        st.call(c.ha_client.stop())
        stuck = StuckReplica(st, a.ha_server.address, 3, c.store.commitlog.max_offset)
        assert wait_for(lambda: group.sync_state_set == {1, 2, 3}
                        and a.ha_server.sync_members == {2, 3}
                        and 3 in {link.broker_id for link in a.ha_server.connections}, 10)
        held = [producer.send(Message("Restart", b"h%d" % i)) for i in range(3)]
    assert {r.status for r in held} <= {SendStatus.FLUSH_SLAVE_TIMEOUT,
                                        SendStatus.SLAVE_NOT_AVAILABLE}
    end = a.store.commitlog.max_offset
    assert wait_for(lambda: b.store.commitlog.max_offset == end, 5)
    b.store.catch_up()
    assert b.store.get_max_offset("Restart", 0) == 10
    assert _pulled(st, b, "Restart") == confirmed
    # b restarts holding a's whole log, the unconfirmed tail included.
    st.stop_broker(b)
    b = st.start_broker("b", **conf)
    assert b.store.commitlog.max_offset == end
    b.store.catch_up()
    assert b.store.get_max_offset("Restart", 0) == 10  # recovered no further than confirmed
    assert _pulled(st, b, "Restart") == confirmed
    # It hears its master's confirmOffset, still held back by c: still nothing more.
    assert wait_for(lambda: b.ha_client is not None and b.ha_client.confirm_offset > 0, 10)
    b.store.catch_up()
    assert b.store.get_max_offset("Restart", 0) == 10
    assert _pulled(st, b, "Restart") == confirmed
    stuck.close()
    st.call(_start(c.ha_client))  # c catches up: the tail is confirmed, b shows it
    assert wait_for(lambda: b.store.get_max_offset("Restart", 0) == 13, 10)
    assert _pulled(st, b, "Restart") == confirmed + [b"h%d" % i for i in range(3)]


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
