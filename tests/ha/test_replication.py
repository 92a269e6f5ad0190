"""Master/slave replication on RocketMQ's HA stream: a slave's CommitLog is its master's,
byte for byte, and the slave serves what it received."""

from __future__ import annotations

import time

import pytest

from rocketq import LocalTransactionState, Message, Producer, TransactionProducer
from rocketq.ha.protocol import (
    HAProtocolError,
    ReportReader,
    TransferReader,
    encode_report,
    encode_transfer_header,
)
from rocketq.protocol import ResponseCode
from rocketq.store import SlaveNotWritableError, StoreMessage

from ..conftest import fetch_route, wait_for


def test_reports_and_chunks_split_anywhere():
    reports = ReportReader()
    raw = encode_report(5) + encode_report(1 << 40)
    assert reports.feed(raw[:3]) is None
    assert reports.feed(raw[3:12]) == 5
    assert reports.feed(raw[12:]) == 1 << 40  # the last whole report wins
    with pytest.raises(HAProtocolError):
        ReportReader().feed(encode_report(-5))
    stream = (encode_transfer_header(100, 3) + b"abc" + encode_transfer_header(103, 0)
              + encode_transfer_header(103, 2) + b"de")
    chunks = TransferReader(1 << 20)
    got = []
    for i in range(0, len(stream), 5):
        got.extend(chunks.feed(stream[i:i + 5]))
    assert got == [(100, b"abc"), (103, b""), (103, b"de")]
    with pytest.raises(HAProtocolError):
        list(TransferReader(10).feed(encode_transfer_header(0, 11)))
    # A controller-mode link: each header also says how far the group confirmed.
    stream = (encode_transfer_header(0, 3, 0) + b"abc" + encode_transfer_header(3, 0, 3))
    chunks = TransferReader(1 << 20, confirm=True)
    assert list(chunks.feed(stream[:17])) == [] and chunks.confirm == -1
    assert list(chunks.feed(stream[17:])) == [(0, b"abc"), (3, b"")]
    assert chunks.confirm == 3


def start_slave(st, name: str = "slave", **conf):
    """A slave of broker-a (brokerId 1), heartbeating its master every 200 ms."""
    values = dict(brokerName="broker-a", brokerId=1, brokerRole="SLAVE",
                  haSendHeartbeatInterval=200)
    values.update(conf)
    return st.start_broker(name, **values)


class Commit:
    def execute_local_transaction(self, message, arg):
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, message):
        return LocalTransactionState.COMMIT


def commitlog_bytes(broker) -> bytes:
    cl = broker.store.commitlog
    return b"".join(f.view[:f.wrote_position].tobytes() for f in cl.files.files)


@pytest.mark.slow
def test_slave_log_is_the_masters_byte_for_byte_and_serves_reads(st):
    master = st.start_broker("broker-a", mappedFileSizeCommitLog=64 << 10,
                             haSendHeartbeatInterval=200)
    st.create_topic("Replicated", 2)
    slave = st.start_broker("broker-a-slave", brokerName="broker-a", brokerId=1,
                            brokerRole="SLAVE", mappedFileSizeCommitLog=64 << 10,
                            haMasterAddress=master.ha_server.address,
                            haSendHeartbeatInterval=200)
    with Producer("pg", namesrv=st.namesrv) as producer:
        for i in range(300):  # several 64 KiB files: fillers and file starts replicate too
            producer.send(Message("Replicated", b"m%d-" % i + b"x" * 200, tags="t"))
        producer.send_batch([Message("Replicated", b"b%d" % i) for i in range(10)])
        producer.send(Message("Replicated", b"later", delay_level=1))
    with TransactionProducer("tpg", Commit(), namesrv=st.namesrv) as tp:
        tp.send_message_in_transaction(Message("Replicated", b"half"))
    assert wait_for(lambda: any(  # the half, its op record and the committed copy
        m.body == b"half" for m in master.store.get_messages(
            "Replicated", 0, 0, 1000).decode() + master.store.get_messages(
            "Replicated", 1, 0, 1000).decode()), 10)
    end = master.store.commitlog.max_offset
    assert wait_for(lambda: slave.store.commitlog.max_offset == end, 10)
    assert len(master.store.commitlog.files.files) > 1
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    # The slave dispatched what it received: its queues serve the same messages.
    assert slave.store.wait_dispatched(timeout=5)
    for queue_id in (0, 1):
        mine = master.store.get_messages("Replicated", queue_id, 0, 1000).decode()
        theirs = slave.store.get_messages("Replicated", queue_id, 0, 1000).decode()
        assert [m.body for m in theirs] == [m.body for m in mine] and mine
    # A slave takes no writes of its own.
    with pytest.raises(SlaveNotWritableError):
        slave.store.put_message(StoreMessage.create("Replicated", b"no", 0))


@pytest.mark.slow
def test_a_slave_that_was_away_catches_up(st):
    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    st.create_topic("Later", 1)
    with Producer("pg", namesrv=st.namesrv) as producer:
        for i in range(50):
            producer.send(Message("Later", b"before-%d" % i))
    slave_conf = dict(brokerName="broker-a", brokerId=1, brokerRole="SLAVE",
                      haMasterAddress=master.ha_server.address,
                      haSendHeartbeatInterval=200)
    slave = st.start_broker("slave", **slave_conf)
    assert wait_for(lambda: slave.store.commitlog.max_offset
                    == master.store.commitlog.max_offset, 10)
    st.stop_broker(slave)
    with Producer("pg2", namesrv=st.namesrv) as producer:
        for i in range(50):
            producer.send(Message("Later", b"while-away-%d" % i))
    slave = st.start_broker("slave", **slave_conf)
    end = master.store.commitlog.max_offset
    assert wait_for(lambda: slave.store.commitlog.max_offset == end, 10)
    assert commitlog_bytes(slave) == commitlog_bytes(master)
    assert slave.store.wait_dispatched(timeout=5)
    bodies = [m.body for m in slave.store.get_messages("Later", 0, 0, 1000).decode()]
    assert len(bodies) == 100 and bodies[-1] == b"while-away-49"


def test_a_send_to_a_slave_is_refused_with_service_not_available():
    from rocketq.broker.send import SendProcessor
    from rocketq.protocol import RemotingCommand, RequestCode

    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"})
    answer = SendProcessor._store_error(None, cmd, SlaveNotWritableError("slave"))  # type: ignore[arg-type]
    assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE


@pytest.mark.slow
def test_sync_master_answers_after_a_slave_holds_the_message(st):
    import socket

    from rocketq import SendStatus

    master = st.start_broker("broker-a", brokerRole="SYNC_MASTER", syncFlushTimeout=400,
                             haSendHeartbeatInterval=200)
    st.create_topic("Safe", 1)
    with Producer("pg", namesrv=st.namesrv) as producer:
        # No slave: stored on the master, but the sender hears it is not replicated.
        alone = producer.send(Message("Safe", b"alone"))
        assert alone.status is SendStatus.SLAVE_NOT_AVAILABLE
        # A slave that connects and never acknowledges: the send times out waiting.
        with socket.create_connection(("127.0.0.1", master.ha_server.port)) as mute:
            mute.sendall(encode_report(0))
            assert wait_for(lambda: master.ha_server.connections, 5)
            stuck = producer.send(Message("Safe", b"stuck"))
            assert stuck.status is SendStatus.FLUSH_SLAVE_TIMEOUT
        assert wait_for(lambda: not master.ha_server.connections, 5)
        slave = st.start_broker("slave", brokerName="broker-a", brokerId=1,
                                brokerRole="SLAVE", haSendHeartbeatInterval=200,
                                haMasterAddress=master.ha_server.address)
        assert wait_for(lambda: master.ha_server.connections, 5)
        results = [producer.send(Message("Safe", b"ok-%d" % i)) for i in range(20)]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        # Answered only once the slave held it: every acknowledged byte is there.
        assert slave.store.commitlog.max_offset >= master.ha_server.slave_acked
        assert master.ha_server.slave_acked == master.store.commitlog.max_offset
    bodies = [m.body for m in master.store.get_messages("Safe", 0, 0, 100).decode()]
    assert bodies[:2] == [b"alone", b"stuck"] and len(bodies) == 22


@pytest.mark.slow
def test_a_slave_finds_its_master_through_the_nameserver(st):

    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    st.create_topic("Routed", 1)
    slave = start_slave(st)  # no haMasterAddress
    assert slave.registration.master_ha_addr == master.ha_server.address
    assert slave.registration.master_addr == master.address
    with Producer("pg", namesrv=st.namesrv) as producer:
        producer.send(Message("Routed", b"via-nameserver"))
    end = master.store.commitlog.max_offset
    assert wait_for(lambda: slave.store.commitlog.max_offset == end, 10)

    found = fetch_route(st.namesrv, "Routed")
    addrs = {int(k): v for k, v in found.broker_addrs["broker-a"].items()}
    assert addrs == {0: master.address, 1: slave.address}


@pytest.mark.slow
def test_consumers_read_from_the_slave_when_the_master_is_gone(st):
    from rocketq import PullConsumer
    from rocketq.protocol import RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient

    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    st.create_topic("Survives", 2)  # on the master only: the slave copies it
    slave = start_slave(st)
    with Producer("pg", namesrv=st.namesrv) as producer:
        sent = [producer.send(Message("Survives", b"r%d" % i)) for i in range(40)]
    end = master.store.commitlog.max_offset
    assert wait_for(lambda: slave.store.commitlog.max_offset == end, 10)

    async def pull_from_slave():
        client = RemotingClient()
        try:
            return await client.invoke(slave.address, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "cg", "topic": "Survives", "queueId": 0,
                    "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 4, "subscription": "*",
                    "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0}), 5)
        finally:
            await client.close()

    # While its master is up, a slave sends readers to the master (no slaveReadEnable).
    answer = st.call(pull_from_slave())
    assert answer.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert answer.ext_fields["suggestWhichBrokerId"] == "0"
    st.stop_broker(master)
    assert wait_for(lambda: slave.ha_client.connected_to is None, 10)
    with PullConsumer("late-group", namesrv=st.namesrv, from_where="first") as consumer:
        consumer.subscribe("Survives")
        consumer.start()
        got = []
        wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 40, 20)
    assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)


@pytest.mark.slow
def test_a_slave_copies_its_masters_metadata(st):
    from rocketq.broker.subscription_groups import SubscriptionGroupConfig
    from rocketq.broker.topics import TopicConfig

    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    slave = start_slave(st)

    async def change_master():
        master.topics.update(TopicConfig("Copied", 3, 3))
        master.subscription_groups.update(SubscriptionGroupConfig("copied-group"))
        master.offsets.commit("copied-group", "Copied", 2, 41)
        master.schedule.offsets[3] = 7

    st.call(change_master())  # the slave's own 10 s round may copy it too: either way
    assert st.call(slave.slave_sync.sync_once())
    assert slave.topics.get("Copied").read_queue_nums == 3
    assert slave.subscription_groups.get("copied-group") is not None
    assert slave.offsets.query("copied-group", "Copied", 2) == 41
    assert slave.schedule.offsets[3] == 7

    async def remove_on_master():
        master.topics.delete("Copied")

    st.call(remove_on_master())
    assert st.call(slave.slave_sync.sync_once())
    assert slave.topics.get("Copied") is None


@pytest.mark.slow
def test_bad_input_on_the_ha_port_closes_only_that_link(st):
    import socket

    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    st.create_topic("Guarded", 1)
    slave = start_slave(st, haMasterAddress=master.ha_server.address)
    assert wait_for(lambda: len(master.ha_server.connections) == 1, 5)
    port = master.ha_server.port
    for hostile in (encode_report(-5), encode_report(1 << 50)):  # negative; beyond the log
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(hostile)
            s.settimeout(5)
            while s.recv(1 << 16):  # the master closes it (after any heartbeat bytes)
                pass
    with Producer("pg", namesrv=st.namesrv) as producer:
        producer.send(Message("Guarded", b"still-served"))
    end = master.store.commitlog.max_offset
    assert wait_for(lambda: slave.store.commitlog.max_offset == end, 10)
    assert len(master.ha_server.connections) == 1  # the real slave kept its link


@pytest.mark.slow
def test_standalone_with_slaves_replicates(tmp_path):
    from rocketq.cli import spawn_standalone

    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=1048576\nmaxHashSlotNum=4096\nmaxIndexNum=16384\n")
    data = tmp_path / "data"
    proc, namesrv = spawn_standalone(str(data), config=str(conf), extra=["--slaves", "1"])
    try:
        with Producer("pg", namesrv=namesrv) as producer:
            for i in range(30):
                producer.send(Message("TryIt", b"m%d" % i))

        assert wait_for(lambda: len(fetch_route(namesrv, "TryIt").broker_addrs["broker-a"]) == 2,
                        10)
        master_log = data / "commitlog" / ("0" * 20)
        slave_log = data / "slave-1" / "commitlog" / ("0" * 20)
        assert wait_for(lambda: slave_log.exists() and slave_log.read_bytes()
                        == master_log.read_bytes(), 10)
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.mark.slow
def test_producers_leave_a_group_whose_master_is_gone_at_once(st):
    from rocketq import SendStatus

    a = st.start_broker("broker-a")
    st.start_broker("broker-b")
    st.create_topic("Spread", 2)
    with Producer("pg", namesrv=st.namesrv, retries=2) as producer:
        first = [producer.send(Message("Spread", b"x")) for _ in range(8)]
        assert {r.queue.broker_name for r in first} == {"broker-a", "broker-b"}
        st.stop_broker(a)
        began = time.monotonic()
        after = [producer.send(Message("Spread", b"y")) for _ in range(8)]
        elapsed = time.monotonic() - began
        # The first failure refreshed the route: broker-a's queues are gone from it now,
        # not at the next 30 s poll.
        route = producer._async.instance.routes["Spread"]
        assert {q.broker_name for q in route.publish_queues} == {"broker-b"}
    assert {r.status for r in after} == {SendStatus.SEND_OK}
    assert {r.queue.broker_name for r in after} == {"broker-b"}
    assert elapsed < 10


@pytest.mark.slow
def test_admin_cluster_list_shows_roles_offsets_and_lag(st, capsys):
    from rocketq.cli import main

    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    st.create_topic("Listed", 1)
    slave = start_slave(st, haMasterAddress=master.ha_server.address)
    with Producer("pg", namesrv=st.namesrv) as producer:
        producer.send(Message("Listed", b"x"))
    end = master.store.commitlog.max_offset
    assert wait_for(lambda: slave.store.commitlog.max_offset == end, 10)
    capsys.readouterr()
    assert main(["admin", "--namesrv", st.namesrv, "cluster", "list"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    by_id = {int(r[2]): r for r in rows}
    assert by_id[0][4] == "ASYNC_MASTER" and by_id[0][-2] == str(end) and by_id[0][-1] == "-"
    assert by_id[1][4] == "SLAVE" and by_id[1][-2] == str(end) and by_id[1][-1] == "0"


def pull_once(st, addr: str, topic: str, offset: int = 0, group: str = "cg"):
    from rocketq.protocol import RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient

    async def go():
        client = RemotingClient()
        try:
            return await client.invoke(addr, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, {
                    "consumerGroup": group, "topic": topic, "queueId": 0,
                    "queueOffset": offset, "maxMsgNums": 4, "sysFlag": 4, "subscription": "*",
                    "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0}), 5)
        finally:
            await client.close()
    return st.call(go())


@pytest.mark.slow
def test_pull_answers_suggest_a_broker_by_rocketmqs_rule(st):
    from rocketq import MessageQueue
    from rocketq.broker.subscription_groups import SubscriptionGroupConfig

    plain = st.start_broker("broker-a")
    # Every byte counts as "out of memory" with a ratio of 0: a reader is always too slow.
    slow = st.start_broker("broker-b", slaveReadEnable=True, accessMessageInMemoryMaxRatio=0)
    roomy = st.start_broker("broker-c", slaveReadEnable=True)
    st.create_topic("Suggest", 1)
    with Producer("pg", namesrv=st.namesrv) as producer:
        for broker in (plain, slow, roomy):
            for i in range(8):
                producer.send(Message("Suggest", b"s%d" % i),
                              queue=MessageQueue("Suggest", broker.config.brokerName, 0))

    def suggested(broker, group="cg"):
        answer = pull_once(st, broker.address, "Suggest", group=group)
        assert answer.code == ResponseCode.SUCCESS
        return int(answer.ext_fields["suggestWhichBrokerId"])

    assert suggested(plain) == 0  # no slaveReadEnable: always the master
    assert suggested(slow) == 1   # too far behind: the group's whichBrokerWhenConsumeSlowly
    assert suggested(roomy) == 0  # in memory: the group's brokerId

    async def configure():
        for broker in (slow, roomy):
            broker.subscription_groups.update(SubscriptionGroupConfig(
                "tuned", broker_id=2, which_broker_when_consume_slowly=3))
    st.call(configure())
    assert suggested(slow, "tuned") == 3
    assert suggested(roomy, "tuned") == 2
    behind = slow.store.get_messages("Suggest", 0, 0, 1)
    assert behind.behind == slow.store.commitlog.max_offset and behind.suggest_slave
    behind.release()


def test_a_hello_names_the_slave_and_a_stream_without_one_is_4x():
    from rocketq.ha.protocol import encode_hello

    named = ReportReader()
    raw = encode_hello(3) + encode_report(77)
    assert named.feed(raw[:5]) is None and named.feed(raw[5:12]) is None
    assert named.feed(raw[12:]) == 77 and named.broker_id == 3
    plain = ReportReader()
    assert plain.feed(encode_report(5)) == 5 and plain.broker_id is None
    plain.feed(encode_hello(3))  # only a stream's first bytes can be a hello
    assert plain.broker_id is None
