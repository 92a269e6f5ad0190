"""Consumer offsets in the replicated log (broker/offsets/log.py): the record codec, the
checkpoint plus replay of the records after it at load, and a slave that holds its master's
commits through the HA stream alone."""

from __future__ import annotations

import os
import time

import orjson
import pytest

from rocketq.broker.offsets.log import OFFSET_LOG_TOPIC, OffsetLog
from rocketq.broker.offsets.log_records import OffsetRecord, compact, decode_record, encode_record
from rocketq.broker.offsets.table import COMMIT, REMOVE_GROUP, ConsumerOffsets
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.protocol.topic import is_system_topic
from rocketq.remoting import RemotingClient, cancel_tasks
from rocketq.store import MessageStore, StoreMessage

from ..conftest import wait_for
from ..store.conftest import small_config
from ..store.test_retention import age_files, hour_now


def test_records_round_trip_small_and_refuse_what_they_are_not():
    r = OffsetRecord(COMMIT, "grp", "Orders", 3, 1 << 40, b"12345678")
    body = encode_record(r)
    assert decode_record(body) == r
    assert len(body) == 26 + len("grp") + len("Orders")  # binary: 35 bytes for this one
    assert decode_record(encode_record(OffsetRecord(REMOVE_GROUP, "g-ü", ""))).group == "g-ü"
    for bad in (b"", body[:-1], b"\x09" + body[1:], body[:9] + b"\x07" + body[10:]):
        with pytest.raises(ValueError):
            decode_record(bad)


def test_compaction_keeps_the_latest_per_queue_and_removals_in_order():
    records = [OffsetRecord(COMMIT, "g", "T", 0, 1), OffsetRecord(COMMIT, "g", "T", 1, 5),
               OffsetRecord(COMMIT, "g", "T", 0, 7), OffsetRecord(COMMIT, "h", "T", 0, 2),
               OffsetRecord(REMOVE_GROUP, "h", ""), OffsetRecord(COMMIT, "h", "U", 0, 9),
               OffsetRecord(COMMIT, "g", "T", 1, 6)]
    assert compact(records) == [OffsetRecord(COMMIT, "g", "T", 0, 7),
                                OffsetRecord(REMOVE_GROUP, "h", ""),
                                OffsetRecord(COMMIT, "h", "U", 0, 9),
                                OffsetRecord(COMMIT, "g", "T", 1, 6)]

    def applied(rs):
        table = ConsumerOffsets(os.devnull + "-none")
        table.apply_logged((r.change() for r in rs), 0)
        return table.offsets
    assert applied(compact(records)) == applied(records) == {"T@g": {0: 7, 1: 6},
                                                            "U@h": {0: 9}}


def test_the_topic_is_a_system_topic_clients_cannot_use(tmp_path):
    from rocketq.broker.config import BrokerConfig
    from rocketq.broker.topics import TopicTable
    assert is_system_topic(OFFSET_LOG_TOPIC)
    config = TopicTable(BrokerConfig(), str(tmp_path)).get(OFFSET_LOG_TOPIC)
    assert config is not None and config.perm == 0  # no send, no pull


class Broker:
    """A store, the offset table and its log, as a broker holds them (no network)."""

    def __init__(self, root, **store_conf) -> None:
        self.config_dir = str(root / "config")
        os.makedirs(self.config_dir, exist_ok=True)
        self.offsets = ConsumerOffsets(self.config_dir)
        self.log = OffsetLog(self.offsets)
        self.store = MessageStore(small_config(root, **store_conf))
        self.replayed = self.log.attach(self.store)

    def close(self) -> None:
        self.store.close()


def test_load_is_the_checkpoint_plus_the_records_after_it(tmp_path):
    b = Broker(tmp_path)
    try:
        assert b.replayed == 0
        for i in range(50):
            b.offsets.commit("g", "T", i % 4, i)
        b.offsets.commit("g", "T", 3, 47)  # the same offset again: no record
        assert b.log.written == 50
        b.store.wait_dispatched()
        b.offsets.persist()
        checkpoint = orjson.loads(open(os.path.join(b.config_dir, "consumerOffset.json"),
                                       "rb").read())
        # RocketMQ's format, and how far into the log the table covers.
        assert checkpoint["offsetTable"] == {"T@g": {"0": 48, "1": 49, "2": 46, "3": 47}}
        assert checkpoint["offsetLogOffset"] == 50
        for i in range(10):  # after the checkpoint: only in the log
            b.offsets.commit("g", "T", 0, 100 + i)
        b.offsets.commit("h", "T", 1, 7)
        b.offsets.commit("gone", "T", 0, 3)
        b.offsets.remove_group("gone")
        b.offsets.remove_topic("Nothing")  # nothing to forget: no record
        b.offsets.commit("g", "T", 2, 5)  # set back: the latest wins, not the highest
        assert b.log.written == 64
    finally:
        b.store.wait_dispatched()
        b.store.close()  # no persist: as if the broker were killed
    b = Broker(tmp_path)
    try:
        # 14 records after the checkpoint, compacted to the 4 that matter.
        assert b.replayed == 4
        assert b.offsets.offsets == {"T@g": {0: 109, 1: 49, 2: 5, 3: 47}, "T@h": {1: 7}}
        assert b.offsets.log_offset == 64
        b.offsets.commit("g", "T", 2, 6)  # new records go on from there
        b.store.wait_dispatched()
        assert b.offsets.log_offset == 65 and b.log.applied == 4  # its own: not applied
    finally:
        b.close()


def test_loading_needs_no_record_older_than_the_checkpoint(tmp_path):
    conf = dict(fileReservedTime=1, deleteWhen=hour_now(), diskMaxUsedSpaceRatio=99,
                diskSpaceCleanForciblyRatio=99)
    b = Broker(tmp_path, **conf)
    try:
        for i in range(60):  # offset records spread over several CommitLog files
            b.offsets.commit("g", "T", 0, i)
            b.store.put_message(StoreMessage.create("Filler", os.urandom(4000)))
        b.store.wait_dispatched()
        b.offsets.persist()
        b.offsets.commit("g", "T", 1, 77)
        files = len(b.store.commitlog.files.files)
        assert files > 3
        age_files(b.store, 2, files - 1)
        assert b.store.clean_expired_files() == files - 1
        assert b.store.get_min_offset(OFFSET_LOG_TOPIC, 0) > 0
        b.store.wait_dispatched()
    finally:
        b.close()
    b = Broker(tmp_path, **conf)
    try:
        assert b.offsets.offsets == {"T@g": {0: 59, 1: 77}}
    finally:
        b.close()


def test_with_the_log_off_commits_write_nothing_and_old_records_are_passed(tmp_path):
    b = Broker(tmp_path)
    try:
        b.offsets.commit("g", "T", 0, 5)
        b.store.wait_dispatched()
    finally:
        b.close()
    offsets = ConsumerOffsets(b.config_dir)
    log = OffsetLog(offsets, enabled=False)
    store = MessageStore(small_config(tmp_path))
    try:
        assert log.attach(store) == 0 and offsets.offsets == {}
        assert offsets.log_offset == 1  # the checkpoint moves past them
        offsets.commit("g", "T", 0, 9)
        assert log.written == 0 and store.get_max_offset(OFFSET_LOG_TOPIC, 0) == 1
    finally:
        store.close()


# ---------------------------------------------------------------------- master and slave
async def _commit(addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
    client = RemotingClient()
    try:
        r = await client.invoke(addr, RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                 "queueId": queue_id, "commitOffset": offset}),
            3)
        assert r.code == ResponseCode.SUCCESS
    finally:
        await client.close()


@pytest.mark.slow
def test_a_slave_holds_its_masters_commits_within_a_second_without_the_copy(st):
    master = st.start_broker("broker-a", haSendHeartbeatInterval=200)
    st.create_topic("Offsets", 4)
    slave = st.start_broker("slave", brokerName="broker-a", brokerId=1, brokerRole="SLAVE",
                            haMasterAddress=master.ha_server.address,
                            haSendHeartbeatInterval=200)
    assert wait_for(lambda: slave.slave_sync is not None, 5)
    st.call(cancel_tasks([slave.roles._slave_task]))  # no metadata copy from here on
    slave_sync = slave.slave_sync
    copies = []
    slave_sync.sync_once = lambda: copies.append(1)  # would be seen if anything ran it
    for q in range(4):
        st.call(_commit(master.address, "cg", "Offsets", q, 10 + q))
    began = time.monotonic()
    assert wait_for(lambda: slave.offsets.table("cg", "Offsets")
                    == {0: 10, 1: 11, 2: 12, 3: 13}, 5)
    assert time.monotonic() - began < 1.0
    st.call(_commit(master.address, "cg", "Offsets", 0, 3))  # set back (a reset): follows
    assert wait_for(lambda: slave.offsets.query("cg", "Offsets", 0) == 3, 1)
    assert not copies
    # The master wrote one record per change, and applied none of its own.
    assert master.offset_requests.log.written == 5 and master.offset_requests.log.applied == 0
    assert slave.offset_requests.log.applied == 5
    # A copy from the master that covers as much of the log is the master's table: it
    # takes over what the slave has (here, an offset set on the slave alone).
    slave.offsets.apply_logged([(COMMIT, "cg", "Offsets", 1, 99)], slave.offsets.log_offset)
    assert st.call(slave_sync_copy(slave, master))
    assert slave.offsets.query("cg", "Offsets", 1) == 11
    # The master's own offset table gets the same answers.
    assert master.offsets.table("cg", "Offsets") == {0: 3, 1: 11, 2: 12, 3: 13}


async def slave_sync_copy(slave, master) -> bool:
    from rocketq.broker.replication.slave_sync import SlaveSync
    sync = SlaveSync(slave.namesrv_client, lambda: master.address, slave.topics,
                     slave.offsets, slave.schedule, slave.subscription_groups)
    return await sync.sync_once()
