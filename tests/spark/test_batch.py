"""The rocketq data source in a real local SparkSession against a real broker."""

from __future__ import annotations

import datetime as dt

import pytest

from rocketq import Message, Producer

pytestmark = pytest.mark.slow


def test_batch_read_every_field_and_tag_filter(spark, servers):
    servers.create_topic("SparkIn", 3)
    sent = {}
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(30):
            r = producer.send(Message("SparkIn", f'{{"n": {i}}}'.encode(),
                                      tags="even" if i % 2 == 0 else "odd",
                                      keys=[f"k{i}", "all"], properties={"n": str(i)}))
            sent[r.msg_id] = (i, r)
    df = (spark.read.format("rocketq").option("namesrv", servers.namesrv)
          .option("topic", "SparkIn").load())
    assert df.rdd.getNumPartitions() == 3  # one per queue
    rows = df.collect()
    assert len(rows) == 30
    for row in rows:
        i, result = sent[row.msg_id]
        assert row.topic == "SparkIn" and row.broker == "broker-a"
        assert (row.queue_id, row.queue_offset) == (result.queue.queue_id, result.queue_offset)
        assert row.body == f'{{"n": {i}}}'.encode() and row.keys == [f"k{i}", "all"]
        assert row.tags == ("even" if i % 2 == 0 else "odd")
        assert row.properties["n"] == str(i) and row.reconsume_times == 0
        assert abs((row.store_timestamp - row.born_timestamp).total_seconds()) < 60
        assert abs((dt.datetime.now() - row.born_timestamp).total_seconds()) < 300
    evens = (spark.read.format("rocketq").option("namesrv", servers.namesrv)
             .option("topic", "SparkIn").option("subscription", "even").load())
    assert sorted(int(r.properties["n"]) for r in evens.collect()) == list(range(0, 30, 2))
    # startingOffsets / endingOffsets as JSON per queue.
    one = (spark.read.format("rocketq").option("namesrv", servers.namesrv)
           .option("topic", "SparkIn")
           .option("startingOffsets", '{"SparkIn": {"broker-a:0": 2}}')
           .option("endingOffsets", '{"SparkIn": {"broker-a:0": 4}}').load())
    got = [(r.queue_id, r.queue_offset) for r in one.collect() if r.queue_id == 0]
    assert got == [(0, 2), (0, 3)]


def test_batch_write_then_read_back(spark, servers):
    servers.create_topic("SparkOut", 2)
    df = spark.createDataFrame([(f"row {i}", "t" if i % 2 else "u", [f"key{i}"], {"i": str(i)})
                                for i in range(10)], "body string, tags string, keys "
                                                     "array<string>, properties "
                                                     "map<string,string>")
    (df.write.format("rocketq").option("namesrv", servers.namesrv)
     .option("topic", "SparkOut").mode("append").save())
    back = (spark.read.format("rocketq").option("namesrv", servers.namesrv)
            .option("topic", "SparkOut").load().collect())
    assert sorted(r.body.decode() for r in back) == sorted(f"row {i}" for i in range(10))
    for r in back:
        i = r.properties["i"]
        assert r.keys == [f"key{i}"] and r.tags == ("t" if int(i) % 2 else "u")


def test_topic_with_queues_on_two_brokers(spark, servers):
    servers.start_broker("broker-b")
    servers.create_topic("TwoBrokers", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        sent = {producer.send(Message("TwoBrokers", b"m%d" % i)).msg_id for i in range(20)}
    df = (spark.read.format("rocketq").option("namesrv", servers.namesrv)
          .option("topic", "TwoBrokers").load())
    assert df.rdd.getNumPartitions() == 4  # 2 queues on each broker
    rows = df.collect()
    assert {r.msg_id for r in rows} == sent and len(rows) == 20
    assert {r.broker for r in rows} == {"broker-a", "broker-b"}
