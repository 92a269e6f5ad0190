"""UPDATE_AND_CREATE_TOPIC checks every field before anything changes; the topic table
changes in memory only once its new state is saved; bad fields of admin requests answer
INVALID_PARAMETER naming the field."""

from __future__ import annotations

import os

import orjson
import pytest

from rocketq.broker.config import BrokerConfig
from rocketq.broker.topics import TopicConfig, TopicTable
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand
from rocketq.remoting import RemotingClient

from ..conftest import run_async

GOOD = {"topic": "Admin", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}

BAD = [
    ("readQueueNums", "99999999999999999999"),
    ("readQueueNums", "0"),
    ("readQueueNums", "-3"),
    ("readQueueNums", "65536"),
    ("readQueueNums", "four"),
    ("writeQueueNums", "99999999999999999999"),
    ("writeQueueNums", "0"),
    ("perm", "8"),
    ("perm", "-1"),
    ("perm", "rw"),
    ("topicFilterType", "ANY_TAG"),
    ("topicSysFlag", "2147483648"),
    ("topicSysFlag", "-2147483649"),
    ("order", "perhaps"),
    ("topic", "bad topic"),
    ("topic", "x" * 128),
]


def create(**fields) -> RemotingCommand:
    return RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {**GOOD, **fields})


def topics_file(broker) -> dict:
    with open(os.path.join(broker.config_dir, "topics.json"), "rb") as fh:
        return orjson.loads(fh.read())["topicConfigTable"]


def test_each_bad_field_is_refused_then_a_good_change_is_saved_and_survives_a_restart(
        cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            version = broker.topics.data_version.counter
            on_disk = topics_file(broker)
            for field, value in BAD:
                r = await c.invoke(broker.address, create(**{field: value}))
                assert r.code == ResponseCode.INVALID_PARAMETER, (field, value, r.remark)
                assert f"field {field} " in r.remark, (field, r.remark)
                assert "Admin" not in broker.topics.topics
            assert broker.topics.data_version.counter == version
            assert topics_file(broker) == on_disk
            # Topics can still change, and are saved.
            r = await c.invoke(broker.address, create(readQueueNums="3", writeQueueNums="2",
                                                      perm="4", order="true",
                                                      topicFilterType="MULTI_TAG"))
            assert r.code == ResponseCode.SUCCESS, r.remark
            saved = topics_file(broker)["Admin"]
            assert (saved["readQueueNums"], saved["writeQueueNums"], saved["perm"],
                    saved["order"], saved["topicFilterType"]) == (3, 2, 4, True, "MULTI_TAG")
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Second", "readQueueNums": "2",
                                             "writeQueueNums": "2", "perm": "6"}))
            assert r.code == ResponseCode.SUCCESS, r.remark
            await broker.stop()
            cluster.brokers.remove(broker)
            broker = await cluster.start_broker()
            admin = broker.topics.get("Admin")
            assert (admin.read_queue_nums, admin.write_queue_nums, admin.perm, admin.order) \
                == (3, 2, 4, True)
            assert broker.topics.get("Second") is not None
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_admin_requests_with_bad_integer_fields_answer_invalid_parameter(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            for code, ext, field in [
                (RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "zero"}, "queueId"),
                (RC.GET_MIN_OFFSET, {"topic": "TBW102"}, "queueId"),
                (RC.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "TBW102", "queueId": "0",
                                                 "timestamp": "yesterday"}, "timestamp"),
                (RC.VIEW_MESSAGE_BY_ID, {"offset": "0x10"}, "offset"),
                (RC.QUERY_MESSAGE, {"topic": "TBW102", "key": "k", "maxNum": "many"},
                 "maxNum"),
            ]:
                r = await c.invoke(broker.address, RemotingCommand.request(code, ext))
                assert r.code == ResponseCode.INVALID_PARAMETER, (code, r.remark)
                assert repr(field) in r.remark, (code, r.remark)
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_a_change_that_cannot_be_saved_leaves_memory_and_disk_as_they_were(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        # The atomic write goes through topics.json.tmp: a directory there makes it fail,
        # for root too.
        blocker = os.path.join(broker.config_dir, "topics.json.tmp")
        try:
            r = await c.invoke(broker.address, create())
            assert r.code == ResponseCode.SUCCESS
            os.makedirs(blocker)
            table = dict(broker.topics.topics)
            version = broker.topics.data_version.to_json()
            on_disk = topics_file(broker)
            r = await c.invoke(broker.address, create(readQueueNums="8", writeQueueNums="8"))
            assert r.code == ResponseCode.SYSTEM_ERROR and "nothing changed" in r.remark
            r = await c.invoke(broker.address, create(topic="Brand_New"))
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert broker.topics.topics == table
            assert broker.topics.data_version.to_json() == version
            assert topics_file(broker) == on_disk
            os.rmdir(blocker)
            r = await c.invoke(broker.address, create(readQueueNums="8", writeQueueNums="8"))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert topics_file(broker)["Admin"]["readQueueNums"] == 8
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


@pytest.mark.parametrize("change", ["update", "delete", "create_in_send", "create_system"])
def test_every_change_of_the_table_is_undone_when_it_cannot_be_saved(tmp_path, change):
    config_dir = str(tmp_path / "config")
    topics = TopicTable(BrokerConfig(), config_dir)
    topics.update(TopicConfig("Kept", 2, 2))
    before = {name: topic.to_json() for name, topic in topics.topics.items()}
    version = topics.data_version.to_json()
    with open(topics.path, "rb") as fh:
        on_disk = fh.read()
    os.makedirs(topics.path + ".tmp")
    with pytest.raises(OSError):
        if change == "update":
            topics.update(TopicConfig("Kept", 9, 9))
        elif change == "delete":
            topics.delete("Kept")
        elif change == "create_in_send":
            topics.create_in_send("Auto", "TBW102", 4)
        else:
            topics.create_system("%RETRY%group", 1)
    assert {name: topic.to_json() for name, topic in topics.topics.items()} == before
    assert topics.data_version.to_json() == version
    with open(topics.path, "rb") as fh:
        assert fh.read() == on_disk
    os.rmdir(topics.path + ".tmp")
    reloaded = TopicTable(BrokerConfig(), config_dir)
    assert {name: topic.to_json() for name, topic in reloaded.topics.items()} == before
