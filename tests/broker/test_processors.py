"""The broker's processors built from their parts alone, without a Broker: each is handed the
tables, the store (here a stand-in) and the callbacks it uses, and nothing else."""

from __future__ import annotations

import asyncio
import zlib

import orjson
import pytest

from rocketq.broker.admin.message_queries import MessageQueries
from rocketq.broker.admin.requests import AdminRequests
from rocketq.broker.client_requests import LOCK_EXPIRY, ClientRequests
from rocketq.broker.clients import ClientTable
from rocketq.broker.config import BrokerConfig
from rocketq.broker.offsets.requests import OffsetRequests
from rocketq.broker.offsets.table import ConsumerOffsets
from rocketq.broker.replication.registration import Registration
from rocketq.broker.subscription_groups import SubscriptionGroupTable
from rocketq.broker.topics import TopicTable
from rocketq.protocol import Perm
from rocketq.protocol.codes import RequestCode, ResponseCode
from rocketq.protocol.command import ProtocolError, RemotingCommand


class FakeConnection:
    """What the client table keeps of a connection: its peer, attributes, oneway sends."""

    def __init__(self, port: int = 50000) -> None:
        self.peer = ("192.0.2.1", port)
        self.attributes: dict[str, object] = {}
        self.sent: list[RemotingCommand] = []
        self.is_open = True

    def oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


class QueueStore:
    """A store stand-in holding queue offsets and store times only."""

    def __init__(self) -> None:
        #: (topic, queue id) -> (min offset, store time of each offset from min on)
        self.queues: dict[tuple[str, int], tuple[int, list[int]]] = {}
        self.records: dict[int, bytes] = {}

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.get((topic, queue_id), (0, []))[0]

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        low, times = self.queues.get((topic, queue_id), (0, []))
        return low + len(times)

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        low, times = self.queues.get((topic, queue_id), (0, []))
        return low + next((i for i, t in enumerate(times) if t >= timestamp), len(times))

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int | None:
        times = self.queues.get((topic, queue_id), (0, []))[1]
        return times[0] if times else None

    def record_bytes(self, offset: int) -> bytes | None:
        return self.records.get(offset)


def request(code: int, body: bytes = b"", **fields: object) -> RemotingCommand:
    return RemotingCommand.request(code, {k: str(v) for k, v in fields.items()}, body)


# --------------------------------------------------------------------------- client requests
def client_requests(tmp_path, notified: list | None = None, changed: list | None = None,
                    **conf: object) -> ClientRequests:
    config = BrokerConfig(**conf)  # type: ignore[arg-type]
    groups = SubscriptionGroupTable(config, str(tmp_path))
    clients = ClientTable((notified if notified is not None else []).append, groups.notifies)
    topics = TopicTable(config, str(tmp_path))
    return ClientRequests(config, clients, groups, topics,
                          lambda: (changed if changed is not None else []).append(1))


def heartbeat_body(client_id: str, *groups: str) -> bytes:
    return orjson.dumps({"clientID": client_id, "producerDataSet": [],
                         "consumerDataSet": [{"groupName": g, "consumeType": "CONSUME_PASSIVELY",
                                              "messageModel": "CLUSTERING",
                                              "subscriptionDataSet": []} for g in groups]})


def test_heartbeat_creates_the_retry_topic_and_asks_for_registration_once(tmp_path):
    notified, changed = [], []
    part = client_requests(tmp_path, notified, changed)
    conn = FakeConnection()

    r = part.heartbeat(conn, request(RequestCode.HEART_BEAT, heartbeat_body("c1", "G1")))
    assert r.code == ResponseCode.SUCCESS
    retry = part.topics.get("%RETRY%G1")
    assert retry is not None and retry.perm & (Perm.READ | Perm.WRITE)
    assert changed == [1]
    assert [g.name for g in notified] == ["G1"]  # a new member: the group is told
    assert part.clients.consumer_ids("G1") == ["c1"]

    part.heartbeat(conn, request(RequestCode.HEART_BEAT, heartbeat_body("c1", "G1")))
    assert changed == [1]  # the retry topic exists: nothing to register
    assert len(notified) == 1


def test_heartbeat_that_is_not_json_is_a_protocol_error(tmp_path):
    part = client_requests(tmp_path)
    with pytest.raises(ProtocolError):
        part.heartbeat(FakeConnection(), request(RequestCode.HEART_BEAT, b"[1, 2]"))


def test_queue_locks_belong_to_their_holder_until_they_expire(tmp_path):
    part = client_requests(tmp_path)
    mq = {"topic": "T", "brokerName": "broker-a", "queueId": 1}

    def lock(client: str) -> list:
        body = orjson.dumps({"consumerGroup": "G", "clientId": client, "mqSet": [mq]})
        r = part.lock_batch(FakeConnection(), request(RequestCode.LOCK_BATCH_MQ, body))
        return orjson.loads(r.body)["lockOKMQSet"]

    assert lock("a") == [mq]
    assert lock("b") == []
    assert lock("a") == [mq]  # the holder renews
    # Not the holder: the unlock changes nothing.
    part.unlock_batch(FakeConnection(), request(RequestCode.UNLOCK_BATCH_MQ, orjson.dumps(
        {"consumerGroup": "G", "clientId": "b", "mqSet": [mq]})))
    assert lock("b") == []
    client, at = part.queue_locks[("G", "T", 1)]
    part.queue_locks[("G", "T", 1)] = (client, at - LOCK_EXPIRY - 1)
    assert lock("b") == [mq]  # expired: another client takes it


def test_check_client_config_refuses_sql92_when_the_broker_does_not_filter(tmp_path):
    sql = orjson.dumps({"subscriptionData": {"expressionType": "SQL92", "subString": "a > 1"}})
    off = client_requests(tmp_path / "off", enablePropertyFilter=False)
    r = off.check_client_config(FakeConnection(), request(RequestCode.CHECK_CLIENT_CONFIG, sql))
    assert r.code == ResponseCode.SYSTEM_ERROR
    on = client_requests(tmp_path / "on", enablePropertyFilter=True)
    r = on.check_client_config(FakeConnection(), request(RequestCode.CHECK_CLIENT_CONFIG, sql))
    assert r.code == ResponseCode.SUCCESS
    bad = orjson.dumps({"subscriptionData": {"expressionType": "SQL92", "subString": "a >"}})
    r = on.check_client_config(FakeConnection(), request(RequestCode.CHECK_CLIENT_CONFIG, bad))
    assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


# --------------------------------------------------------------------------- offsets, queries
def test_offset_requests_answer_from_the_offset_table_and_the_store(tmp_path):
    store = QueueStore()
    store.queues[("T", 0)] = (0, [100, 200, 200, 300])
    store.queues[("Old", 0)] = (7, [500])
    offsets = ConsumerOffsets(str(tmp_path))
    part = OffsetRequests(offsets, lambda: store)
    conn = FakeConnection()

    def ask(code: int, **fields: object) -> RemotingCommand:
        return part.handlers()[code](conn, request(code, **fields))

    r = ask(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="G", topic="T", queueId=0)
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["offset"] == "0"  # young queue
    r = ask(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="G", topic="Old", queueId=0)
    assert r.code == ResponseCode.QUERY_NOT_FOUND
    ask(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="G", topic="T", queueId=0,
        commitOffset=3)
    assert offsets.query("G", "T", 0) == 3
    r = ask(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="G", topic="T", queueId=0)
    assert r.ext_fields["offset"] == "3"

    assert ask(RequestCode.GET_MAX_OFFSET, topic="T", queueId=0).ext_fields["offset"] == "4"
    assert ask(RequestCode.GET_MIN_OFFSET, topic="Old", queueId=0).ext_fields["offset"] == "7"
    lower = ask(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="T", queueId=0, timestamp=200)
    upper = ask(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="T", queueId=0, timestamp=200,
                boundaryType="UPPER")
    assert (lower.ext_fields["offset"], upper.ext_fields["offset"]) == ("1", "2")
    r = ask(RequestCode.GET_EARLIEST_MSG_STORETIME, topic="T", queueId=0)
    assert r.ext_fields["timestamp"] == "100"
    r = ask(RequestCode.GET_EARLIEST_MSG_STORETIME, topic="None", queueId=0)
    assert r.code == ResponseCode.SYSTEM_ERROR


def test_message_queries_view_a_record_by_offset():
    store = QueueStore()
    store.records[4096] = b"record bytes"
    part = MessageQueries(lambda: store)
    r = part.view_message(FakeConnection(), request(RequestCode.VIEW_MESSAGE_BY_ID, offset=4096))
    assert r.code == ResponseCode.SUCCESS and r.body == b"record bytes"
    r = part.view_message(FakeConnection(), request(RequestCode.VIEW_MESSAGE_BY_ID, offset=1))
    assert r.code == ResponseCode.SYSTEM_ERROR


# --------------------------------------------------------------------------- admin
def test_admin_requests_create_topics_and_serve_runtime_info_through_their_parts(tmp_path):
    from rocketq.store import MessageStoreConfig

    config = BrokerConfig(brokerName="broker-x")
    topics = TopicTable(config, str(tmp_path))
    changed = []
    store = QueueStore()
    part = AdminRequests(config, MessageStoreConfig(storePathRootDir=str(tmp_path)),
                         lambda: store, topics, ConsumerOffsets(str(tmp_path)),
                         ClientTable(lambda group: None), lambda: changed.append(1),
                         lambda: {"brokerActive": "true"})
    conn = FakeConnection()

    r = part.create_topic(conn, request(RequestCode.UPDATE_AND_CREATE_TOPIC, topic="broker-x",
                                        readQueueNums=1, writeQueueNums=1, perm=6))
    assert r.code == ResponseCode.INVALID_PARAMETER and changed == []
    r = part.create_topic(conn, request(RequestCode.UPDATE_AND_CREATE_TOPIC, topic="Orders",
                                        readQueueNums=2, writeQueueNums=2, perm=6))
    assert r.code == ResponseCode.SUCCESS and changed == [1]
    assert topics.get("Orders") is not None and topics.get("Orders").read_queue_nums == 2

    r = part.broker_runtime_info(conn, request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert orjson.loads(r.body) == {"table": {"brokerActive": "true"}}
    r = part.consumer_connections(conn, request(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                consumerGroup="Nobody"))
    assert r.code == ResponseCode.CONSUMER_NOT_ONLINE


# --------------------------------------------------------------------------- registration
class RecordingClient:
    """A NameServer client stand-in: answers SUCCESS and remembers what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, RemotingCommand]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float
                     ) -> RemotingCommand:
        self.sent.append((addr, cmd))
        return cmd.response(ResponseCode.SUCCESS)


def test_registration_registers_the_topic_table_with_every_namesrv(tmp_path):
    config = BrokerConfig(brokerName="broker-r", listenPort=10999,
                          namesrvAddr="127.0.0.1:1;127.0.0.1:2")
    topics = TopicTable(config, str(tmp_path))
    client = RecordingClient()
    registration = Registration(config, topics, client)  # type: ignore[arg-type]

    registration.soon()  # before start(): nothing to wake, and no error
    asyncio.run(registration.register_all())
    assert sorted(addr for addr, _ in client.sent) == ["127.0.0.1:1", "127.0.0.1:2"]
    cmd = client.sent[0][1]
    assert cmd.code == RequestCode.REGISTER_BROKER
    assert cmd.ext_fields["brokerName"] == "broker-r"
    assert cmd.ext_fields["brokerAddr"] == "127.0.0.1:10999"
    assert int(cmd.ext_fields["bodyCrc32"]) == zlib.crc32(cmd.body) & 0x7FFFFFFF
    wrapper = orjson.loads(cmd.body)["topicConfigSerializeWrapper"]
    assert "broker-r" in wrapper["topicConfigTable"]

    client.sent.clear()
    asyncio.run(registration.unregister_all())
    assert {cmd.code for _, cmd in client.sent} == {RequestCode.UNREGISTER_BROKER}
    assert len(client.sent) == 2


def test_registration_registers_at_once_when_asked(tmp_path):
    config = BrokerConfig(namesrvAddr="127.0.0.1:1", registerNameServerPeriod=60_000)
    client = RecordingClient()
    topics = TopicTable(config, str(tmp_path))
    registration = Registration(config, topics, client)  # type: ignore[arg-type]

    async def main() -> None:
        registration.start()
        task = asyncio.ensure_future(registration.run())
        await asyncio.sleep(0.01)
        assert client.sent == []  # the period is a minute
        registration.soon()
        for _ in range(100):
            if client.sent:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert [cmd.code for _, cmd in client.sent] == [RequestCode.REGISTER_BROKER]
