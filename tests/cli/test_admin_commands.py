"""The ``rocketq admin`` twins of the dashboard's actions, against a real broker: broker
status, topic update and details, group details, members, offsets skipped, messages by time,
message track, dead letters listed and resent."""

from __future__ import annotations

import json
import threading
import time

from rocketq import ConsumeResult, Message, Producer, PullConsumer, PushConsumer, __version__
from rocketq.cli import main

from ..conftest import wait_for


def _json_objects(text: str) -> list[dict]:
    """The indented JSON objects the message commands print, one after another."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        while text[at].isspace():
            at += 1
        obj, at = decoder.raw_decode(text, at)
        found.append(obj)
    return found


def test_brokers_topics_and_groups(servers, capsys):
    broker = servers.brokers[0]
    admin = ["admin", "--namesrv", servers.namesrv]
    assert main([*admin, "cluster", "status", broker.address]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "brokerRole=ASYNC_MASTER" in lines and any(x.startswith("putTps=") for x in lines)
    # The RocketMQ version it speaks, named as RocketMQ 4.9.8 names it; rocketq's apart.
    assert "brokerVersionDesc=V4_9_8" in lines and f"rocketqVersion={__version__}" in lines
    assert main([*admin, "cluster", "status", broker.address, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["brokerName"], status["role"], status["epoch"]) == (
        "broker-a", "ASYNC_MASTER", None)
    assert (status["version"], status["rocketqVersion"]) == ("V4_9_8", __version__)
    assert main([*admin, "cluster", "list"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[3:6] == [broker.address, "ASYNC_MASTER", "-"] and row[6] == "V4_9_8"

    assert main([*admin, "topic", "create", "Shop", "--queues", "4"]) == 0
    assert main([*admin, "topic", "update", "Shop", "--write-queues", "2", "--message-type",
                 "fifo"]) == 0
    assert "updated Shop on broker-a" in capsys.readouterr().out
    assert main([*admin, "topic", "show", "Shop"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["readQueues"], shown["writeQueues"], shown["messageType"],
            shown["permText"]) == (4, 2, "FIFO", "RW-")
    assert main([*admin, "topic", "list", "--detail"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert rows["Shop"][1:] == ["4", "2", "RW-", "FIFO", "broker-a"]
    assert rows["TBW102"][4] == "SYSTEM"
    assert main([*admin, "topic", "update", "NoSuchTopic", "--perm", "6"]) == 1
    assert "NoSuchTopic does not exist" in capsys.readouterr().err

    assert main([*admin, "group", "create", "Shoppers", "--retry-max-times", "5"]) == 0
    assert main([*admin, "group", "show", "Shoppers"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out[out.index("{"):])
    assert (shown["retryMaxTimes"], shown["system"], shown["brokers"]) == (
        5, False, [broker.address])

    with Producer("shop-producer", namesrv=servers.namesrv) as producer, \
            PushConsumer("Shoppers", namesrv=servers.namesrv) as consumer:
        producer.send(Message("Shop", b"x"))
        consumer.subscribe("Shop", "a || b")
        consumer.register(lambda messages: None)
        consumer.start()
        assert main([*admin, "producer", "connections", "shop-producer"]) == 0
        assert "(V" in capsys.readouterr().out  # the version's name, e.g. (V4_9_8)
        assert wait_for(lambda: main([*admin, "consumer", "connections", "Shoppers"]) == 0)
        out = capsys.readouterr().out
        assert "broker-a: CLUSTERING CONSUME_PASSIVELY" in out
        assert consumer.client_id in out and "subscribes Shop: a || b" in out
    assert main([*admin, "producer", "connections", "nobody"]) == 1


def test_offsets_skipped_messages_by_time_and_their_track(servers, capsys):
    ns = servers.namesrv
    admin = ["admin", "--namesrv", ns]
    servers.create_topic("Clock", 1)
    with Producer("clock-producer", namesrv=ns) as producer:
        producer.send(Message("Clock", b"early"))
        time.sleep(0.05)
        begin = int(time.time() * 1000)
        sent = [producer.send(Message("Clock", b"tick %d" % i)) for i in range(3)]
        end = int(time.time() * 1000)
        time.sleep(0.05)
        producer.send(Message("Clock", b"late"))
    assert servers.brokers[0].store.wait_dispatched()
    assert main([*admin, "message", "time", "Clock", "--begin", str(begin), "--end",
                 str(end)]) == 0
    found = _json_objects(capsys.readouterr().out)
    assert [m["body"] for m in found] == ["tick 0", "tick 1", "tick 2"]

    consumer = PullConsumer("clock-readers", namesrv=ns, from_where="first", auto_commit=False)
    consumer.subscribe("Clock")
    consumer.start()
    try:
        assert wait_for(lambda: main([*admin, "message", "trace", "Clock",
                                      sent[0].msg_id]) == 0
                        and "clock-readers" in capsys.readouterr().out)
        assert main([*admin, "message", "trace", "Clock", sent[0].msg_id]) == 0
        row = [line.split() for line in capsys.readouterr().out.splitlines()
               if line.startswith("clock-readers")]
        assert row == [["clock-readers", "NOT_CONSUMED_YET", "0", "1"]]
        assert main([*admin, "offset", "skip", "clock-readers", "Clock"]) == 0
        out = capsys.readouterr().out
        assert "moved to the end of each queue" in out
        assert out.splitlines()[-1].split() == ["broker-a", "0", "5"]
        assert main([*admin, "message", "trace", "Clock", sent[0].msg_id]) == 0
        assert "clock-readers                    CONSUMED" in capsys.readouterr().out
    finally:
        consumer.shutdown()


def test_dead_letters_listed_and_resent(servers, capsys):
    ns = servers.namesrv
    admin = ["admin", "--namesrv", ns]
    servers.create_topic("Jobs", 1)
    failing = threading.Event()
    failing.set()
    got: list = []

    def work(messages):
        got.extend(messages)
        return ConsumeResult.RECONSUME_LATER if failing.is_set() else ConsumeResult.SUCCESS

    with PushConsumer("jobbers", namesrv=ns, from_where="first",
                      max_reconsume_times=0) as consumer:
        consumer.subscribe("Jobs")
        consumer.register(work)
        consumer.start()
        assert main([*admin, "dlq", "list", "jobbers"]) == 0
        assert capsys.readouterr().out == ""
        # Its id as a RocketMQ 5 client makes them: "01" and 32 hex digits.
        five = "01" + "5E5E5E5E5E5E" + "0102" + "00ABCDEF" + "00000007"
        with Producer("jobs-producer", namesrv=ns) as producer:
            producer.send(Message("Jobs", b"doomed", tags="t1", properties={"UNIQ_KEY": five}))

        def listed() -> list[dict]:
            assert main([*admin, "dlq", "list", "jobbers"]) == 0
            return _json_objects(capsys.readouterr().out)

        assert wait_for(listed, 15)
        [dead] = listed()
        assert (dead["topic"], dead["body"], dead["tags"]) == ("%DLQ%jobbers", "doomed", "t1")
        assert dead["msgId"] == five
        assert main([*admin, "message", "id", five, "--topic", "%DLQ%jobbers"]) == 0
        assert json.loads(capsys.readouterr().out)["topic"] == "%DLQ%jobbers"
        failing.clear()
        seen = len(got)
        assert main([*admin, "dlq", "resend", "jobbers", dead["msgId"]]) == 0
        line = capsys.readouterr().out.split()
        assert line[0] == "SEND_OK" and line[1] == dead["msgId"]
        assert line[2].startswith("%RETRY%jobbers@broker-a:")
        assert wait_for(lambda: len(got) > seen, 15)
        assert (got[-1].topic, got[-1].body) == ("Jobs", b"doomed")
    assert main([*admin, "dlq", "resend", "jobbers", "0" * 32]) == 1
