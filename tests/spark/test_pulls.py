"""The connector's network and column code without Spark: pipelined range pulls and Arrow."""

from __future__ import annotations

import pytest

from rocketq import Message, Producer
from rocketq.protocol.message import decode_records

pytest.importorskip("pyarrow")

from rocketq.spark import SCHEMA, pulls  # noqa: E402
from rocketq.spark.columns import ARROW_SCHEMA  # noqa: E402


def _send(servers, topic, n, **kwargs):
    servers.create_topic(topic, 1)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        return [producer.send(Message(topic, b"m%d" % i, tags="even" if i % 2 == 0 else "odd",
                                      keys=[f"k{i}"], **kwargs))
                for i in range(n)]


@pytest.mark.parametrize("window,depth", [(1, 1), (3, 4), (7, 2), (1024, 4)])
def test_pipelined_pulls_return_each_offset_once_in_order(servers, window, depth):
    sent = _send(servers, f"Range{window}x{depth}", 40)
    topic = sent[0].queue.topic
    addr = servers.brokers[0].address
    got = []
    puller = pulls.RangePuller(addr, topic, 0, 5, 33, window=window, depth=depth)
    while not puller.done:
        body, begin, stop = puller.next_body()
        if body:
            got.extend(r.queue_offset for r in decode_records(body) if begin <= r.queue_offset
                       < stop)
    assert got == list(range(5, 33))


def test_batches_match_the_spark_schema_and_filter_tags(servers):
    sent = _send(servers, "Arrow", 30, properties={"p": "v"})
    addr = servers.brokers[0].address
    batches = list(pulls.pull_batches(addr, "Arrow", 0, 0, 100, "broker-a",
                                      rows_per_batch=8))
    assert all(b.schema == ARROW_SCHEMA for b in batches)
    assert [f.name for f in ARROW_SCHEMA] == SCHEMA.fieldNames()
    rows = [row for b in batches for row in b.to_pylist()]
    assert [r["queue_offset"] for r in rows] == list(range(30))  # stops at the queue's end
    assert [r["msg_id"] for r in rows] == [s.msg_id for s in sent]
    first = rows[0]
    assert first["body"] == b"m0" and first["keys"] == ["k0"] and first["tags"] == "even"
    assert dict(first["properties"])["p"] == "v" and first["topic"] == "Arrow"
    assert first["born_timestamp"] <= first["store_timestamp"]
    odd = [row for b in pulls.pull_batches(addr, "Arrow", 0, 0, 30, "broker-a", "odd")
           for row in b.to_pylist()]
    assert [r["body"] for r in odd] == [b"m%d" % i for i in range(1, 30, 2)]


def test_compressed_bodies_come_back_plain(servers):
    servers.create_topic("Big", 1)
    body = b"x" * 20000  # over the producer's compression threshold
    with Producer("pg", namesrv=servers.namesrv) as producer:
        producer.send(Message("Big", body))
    (batch,) = pulls.pull_batches(servers.brokers[0].address, "Big", 0, 0, 1, "broker-a")
    assert batch.column("body").to_pylist() == [body]


def test_a_pull_error_is_raised(servers):
    with pytest.raises(RuntimeError, match="pull from"):
        list(pulls.pull_batches(servers.brokers[0].address, "NoSuchTopic", 0, 0, 10,
                                "broker-a"))
