"""The admin client's brokers, topics, groups, members and broker settings, against a real
broker on 127.0.0.1."""

from __future__ import annotations

import socket

import pytest

from rocketq import Admin, BrokerError, ClientError, Message, Producer, PushConsumer, __version__
from rocketq.protocol import CURRENT_VERSION
from rocketq.protocol.version import version_name

from ..conftest import wait_for


def test_cluster_lists_each_broker_with_its_figures_and_one_that_does_not_answer(servers):
    broker = servers.brokers[0]
    servers.create_topic("Figures", 1)
    with Producer("figures-producer", namesrv=servers.namesrv) as producer:
        for i in range(5):
            producer.send(Message("Figures", b"m%d" % i))
    with Admin(servers.namesrv) as admin:
        [status] = admin.cluster()
        assert (status.cluster, status.broker_name, status.broker_id, status.address) == (
            broker.config.brokerClusterName, "broker-a", 0, broker.address)
        assert status.role == "ASYNC_MASTER" and status.error is None
        assert (status.version, status.rocketq_version) == ("V4_9_8", __version__)
        assert status.epoch is None
        assert status.put_today == 5 and status.runtime["msgPutTotalTodayNow"] == "5"
        assert status.put_tps >= 0 and status.get_tps >= 0
        assert 0 < status.disk_ratio < 1 and status.dispatch_behind >= 0
        assert status.behind_master is None

        # A broker the NameServer lists but that does not answer: listed, with its error.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{s.getsockname()[1]}"
        servers.namesrvs[0].routes.register_broker(
            broker.config.brokerClusterName, dead, "broker-gone", 0, "", {},
            {"counter": 1, "timestamp": 0})
        statuses = {s.broker_name: s for s in admin.cluster()}
        assert statuses["broker-a"].error is None and statuses["broker-a"].put_today == 5
        gone = statuses["broker-gone"]
        assert gone.address == dead and gone.error and gone.runtime == {}
        assert (gone.role, gone.put_today, gone.put_tps) == ("MASTER", 0, 0.0)


def test_topics_listed_shown_and_updated(servers):
    broker = servers.brokers[0]
    with Admin(servers.namesrv) as admin:
        admin.create_topic("Fifo", 4, message_type="FIFO")
        admin.create_topic("Plain", 2)
        topics = {t.name: t for t in admin.topics()}
        fifo = topics["Fifo"]
        assert (fifo.read_queues, fifo.write_queues, fifo.perm, fifo.message_type,
                fifo.system, fifo.brokers, fifo.kind) == (4, 4, 6, "FIFO", False,
                                                          ["broker-a"], "FIFO")
        assert topics["Plain"].message_type == "NORMAL"
        assert topics["TBW102"].system and topics["SCHEDULE_TOPIC_XXXX"].system
        assert topics["broker-a"].system and topics["DefaultCluster"].system
        assert admin.topic("Fifo") == fifo

        assert admin.update_topic("Fifo", write_queues=2, perm=4) == ["broker-a"]
        fifo = admin.topic("Fifo")
        assert (fifo.read_queues, fifo.write_queues, fifo.perm, fifo.message_type) == (
            4, 2, 4, "FIFO")
        config = broker.topics.get("Fifo")
        assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (4, 2, 4)
        admin.update_topic("Fifo", message_type="normal")
        assert admin.topic("Fifo").message_type == "NORMAL"
        assert broker.topics.get("Fifo").write_queue_nums == 2  # kept

        with pytest.raises(ClientError, match="NoSuchTopic does not exist"):
            admin.topic("NoSuchTopic")
        with pytest.raises(ClientError, match="does not exist"):
            admin.update_topic("NoSuchTopic", perm=6)
        with pytest.raises(BrokerError, match="writeQueueNums"):
            admin.update_topic("Plain", write_queues=0)
        with pytest.raises(ValueError, match="message_type"):
            admin.update_topic("Plain", message_type="SOMETIMES")
        assert broker.topics.get("Plain").write_queue_nums == 2


def test_topic_status_and_a_test_message(servers):
    with Admin(servers.namesrv) as admin:
        admin.create_topic("Status", 3)
        sent = [admin.send_message("Status", b"hello %d" % i, tags="probe",
                                   keys=["k1", f"n{i}"]) for i in range(4)]
        assert all(r.status.name == "SEND_OK" for r in sent)
        rows = admin.topic_status("Status")
        assert [(q.broker_name, q.queue_id) for q in rows] == [("broker-a", i) for i in range(3)]
        assert sum(q.max_offset for q in rows) == 4 and all(q.min_offset == 0 for q in rows)
        for q in rows:
            assert (q.last_update_timestamp > 0) == (q.max_offset > 0)
        found = admin.message_by_id(sent[2].msg_id)
        assert (found.topic, found.body, found.tags, found.keys) == (
            "Status", b"hello 2", "probe", ["k1", "n2"])
        assert admin.message_by_id(sent[2].offset_msg_id).broker_name == "broker-a"
        with pytest.raises(ClientError, match="no route"):
            admin.topic_status("NoSuchTopic")


def test_groups_created_changed_listed_and_deleted(servers):
    table = servers.brokers[0].subscription_groups
    with Admin(servers.namesrv) as admin:
        assert admin.create_group("Billing", retry_max_times=3, fifo=True) == [
            servers.brokers[0].address]
        groups = {g.name: g for g in admin.groups()}
        billing = groups["Billing"]
        assert (billing.retry_max_times, billing.fifo, billing.orderly, billing.consume_enable,
                billing.broadcast, billing.system) == (3, True, True, True, True, False)
        assert groups["TOOLS_CONSUMER"].system
        admin.update_group("Billing", consume_enable=False)
        billing = admin.group("Billing")
        assert (billing.consume_enable, billing.retry_max_times, billing.fifo) == (
            False, 3, True)
        assert table.get("Billing").consume_enable is False
        admin.create_group("Billing")  # create replaces: the defaults again
        assert admin.group("Billing").retry_max_times == 16
        with pytest.raises(BrokerError, match="retryQueueNums"):
            admin.update_group("Billing", retry_queues=-1)
        admin.delete_group("Billing", remove_offset=True)
        assert table.get("Billing") is None
        with pytest.raises(ClientError, match="Billing does not exist"):
            admin.group("Billing")


def test_consumer_and_producer_connections(servers):
    servers.create_topic("Members", 2)
    with Producer("members-producer", namesrv=servers.namesrv) as producer, \
            PushConsumer("members-group", namesrv=servers.namesrv) as consumer:
        producer.send(Message("Members", b"x"))
        consumer.subscribe("Members", "paid || refunded")
        consumer.register(lambda messages: None)
        consumer.start()
        with Admin(servers.namesrv) as admin:
            assert wait_for(lambda: admin.consumer_connections("members-group"), 10)
            [member] = admin.consumer_connections("members-group")
            assert member.client_id == consumer.client_id
            assert (member.version, member.version_name) == (
                CURRENT_VERSION, version_name(CURRENT_VERSION))
            assert member.version_name.startswith("V") and member.language
            assert member.subscriptions["Members"] == "paid || refunded"
            assert member.subscription_types["Members"] == "TAG"
            assert (member.message_model, member.consume_type, member.broker_name) == (
                "CLUSTERING", "CONSUME_PASSIVELY", "broker-a")
            assert admin.consumer_connections("nobody-here") == []

            [maker] = admin.producer_connections("members-producer")
            assert maker.version_name == member.version_name and maker.subscriptions == {}
            assert maker.message_model is None
            assert admin.producer_connections("nobody-here") == []


def test_broker_config_read_and_changed(servers):
    broker = servers.brokers[0]
    with Admin(servers.namesrv) as admin:
        [addr] = admin.broker_addresses()
        assert admin.broker_addresses(broker.config.brokerClusterName) == [addr]
        with pytest.raises(ClientError, match="NoSuchCluster"):
            admin.broker_addresses("NoSuchCluster")
        config = admin.broker_config(addr)
        assert config["brokerName"] == "broker-a" and config["fileReservedTime"] == "72"
        admin.update_broker_config(addr, {"fileReservedTime": "24"})
        assert broker.store_config.fileReservedTime == 24
        assert admin.broker_config(addr)["fileReservedTime"] == "24"
        with pytest.raises(BrokerError, match="listenPort"):
            admin.update_broker_config(addr, {"fileReservedTime": "12", "listenPort": "1"})
        assert broker.store_config.fileReservedTime == 24
        with pytest.raises(ValueError):
            admin.update_broker_config(addr, {})
