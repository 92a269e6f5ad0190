"""The options users of Spark's Kafka source reach for (subscribePattern, assign, offsets by
timestamp per queue, lag in the progress, message properties as headers), against real
topics on a real broker: the readers directly where that is enough, a SparkSession and the
C++ RocketMQ client where it is not."""

from __future__ import annotations

import json
import time

import pytest

from rocketq import Message, Producer, PullConsumer

pytest.importorskip("pyspark")

from rocketq.spark import RocketMQBatchReader, RocketMQStreamReader, offsets_behind  # noqa: E402
from rocketq.spark.options import LAG_METRICS  # noqa: E402

from ..conftest import wait_for  # noqa: E402


def batch_reader(options: dict[str, str]) -> RocketMQBatchReader:
    return RocketMQBatchReader({k.lower(): v for k, v in options.items()})


def stream_reader(options: dict[str, str]) -> RocketMQStreamReader:
    return RocketMQStreamReader({k.lower(): v for k, v in options.items()})


def ranges(reader: RocketMQBatchReader) -> dict[tuple[str, str, int], tuple[int, int]]:
    return {(p.topic, p.broker, p.queue_id): (p.start, p.end) for p in reader.partitions()}


def send(namesrv: str, topic: str, count: int) -> dict[int, int]:
    """Send ``count`` messages to ``topic``; how many went to each queue id."""
    per_queue: dict[int, int] = {}
    with Producer("pg", namesrv=namesrv) as producer:
        for i in range(count):
            q = producer.send(Message(topic, b"m%d" % i)).queue.queue_id
            per_queue[q] = per_queue.get(q, 0) + 1
    return per_queue


# ----------------------------------------------------------------------------- selection
@pytest.mark.parametrize("reader", [RocketMQBatchReader, RocketMQStreamReader])
@pytest.mark.parametrize(("options", "error"), [
    ({}, "exactly one of the options topic .* none is given"),
    ({"topic": "A", "subscribepattern": "A.*"}, "got topic, subscribePattern"),
    ({"subscribe": "A", "assign": '{"A": [0]}'}, "got subscribe, assign"),
    ({"subscribepattern": "(unclosed"}, "subscribePattern is not a regular expression"),
    ({"assign": "[0, 1]"}, "assign must map each topic to a list of its queues"),
    ({"assign": '{"A": []}'}, "assign must map each topic"),
    ({"assign": '{"A": ["broker-a:x"]}'}, "'broker-a:x' .* is not a queue"),
    ({"topic": "A", "startingoffsetsbytimestamp": '{"A": {"broker-a:0": "soon"}}'},
     'startingOffsetsByTimestamp must map each topic to {"broker:queueId": ms'),
    ({"topic": "A", "startingoffsetsbytimestamp": '{"A": {"b:0": 1'},
     "startingOffsetsByTimestamp is not valid JSON"),
])
def test_what_to_read_is_exactly_one_valid_option(reader, options, error):
    with pytest.raises(ValueError, match=error):
        reader({"namesrv": "127.0.0.1:1", **options})


def test_subscribe_pattern_matches_whole_names_of_users_topics_only(servers):
    for topic in ("PatOrders", "PatRefunds", "Other", "%RETRY%pat-group", "%DLQ%pat-group"):
        servers.create_topic(topic, 2)
    send(servers.namesrv, "PatOrders", 4)
    send(servers.namesrv, "Other", 2)

    def topics(pattern):
        """The topics of the queues a read by ``pattern`` covers, empty ones included."""
        reader = batch_reader({"namesrv": servers.namesrv, "subscribePattern": pattern})
        return {key[0] for key in reader.selection.queues(servers.namesrv)}

    assert topics("Pat.*") == {"PatOrders", "PatRefunds"}
    assert topics("Pat") == set()  # a whole-name match, as Kafka's
    # Everything matches ".*", but the brokers' own topics, retry and dead-letter topics,
    # and the cluster's and broker's topics are left out.
    assert topics(".*") == {"PatOrders", "PatRefunds", "Other"}
    reader = batch_reader({"namesrv": servers.namesrv, "subscribePattern": "Pat.*"})
    parts = reader.partitions()  # PatRefunds is empty: nothing to read there
    assert {p.topic for p in parts} == {"PatOrders"}
    assert sum(p.end - p.start for p in parts) == 4
    ranges_ = ranges(batch_reader({"namesrv": servers.namesrv, "subscribe": "PatOrders,Other"}))
    assert sum(end - start for start, end in ranges_.values()) == 6  # Kafka's subscribe


def test_a_pattern_stream_picks_up_topics_created_later_from_their_first_offset(servers):
    servers.create_topic("LiveA", 1)
    send(servers.namesrv, "LiveA", 3)
    reader = stream_reader({"namesrv": servers.namesrv, "subscribePattern": "Live[A-Z]"})
    assert reader.reportLatestOffset() is None  # no latestOffset yet
    start = reader.initialOffset()
    assert start == {"LiveA|broker-a|0": 3}  # startingOffsets=last
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(start, limit) == start
    servers.create_topic("LiveB", 2)
    servers.create_topic("LiveLater", 1)  # does not match
    per_queue = send(servers.namesrv, "LiveB", 5)
    send(servers.namesrv, "LiveLater", 1)
    end = reader.latestOffset(start, limit)
    expected = {"LiveA|broker-a|0": 3,
                **{f"LiveB|broker-a|{q}": n for q, n in per_queue.items()}}
    assert end == expected
    assert reader.reportLatestOffset() == expected  # what latestOffset saw, no new request
    parts = reader.partitions(start, end)
    assert sorted((p.topic, p.queue_id, p.start, p.end) for p in parts) == sorted(
        ("LiveB", q, 0, n) for q, n in per_queue.items())
    rows = [batch for p in parts for batch in reader.read(p)]
    assert sum(b.num_rows for b in rows) == 5


def test_assign_reads_only_the_named_queues(servers):
    servers.start_broker("broker-b")
    servers.create_topic("Assigned", 4)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        sent: dict[tuple[str, int], int] = {}
        for i in range(40):
            r = producer.send(Message("Assigned", b"m%d" % i))
            key = (r.queue.broker_name, r.queue.queue_id)
            sent[key] = sent.get(key, 0) + 1
    assert len(sent) == 8  # 4 queues on each broker

    def read(assign, **more):
        return ranges(batch_reader({"namesrv": servers.namesrv, "assign": json.dumps(assign),
                                    **more}))

    assert read({"Assigned": ["broker-a:1", "broker-b:3"]}) == {
        ("Assigned", "broker-a", 1): (0, sent["broker-a", 1]),
        ("Assigned", "broker-b", 3): (0, sent["broker-b", 3])}
    # Kafka's bare partition numbers: that queue id on every broker.
    assert read({"Assigned": [2]}) == {
        ("Assigned", b, 2): (0, sent[b, 2]) for b in ("broker-a", "broker-b")}
    with pytest.raises(ValueError, match=r"assign names queues that do not exist: "
                                         r"Assigned broker-c:0, Assigned \*:9"):
        read({"Assigned": ["broker-c:0", 9, "broker-a:0"]})
    reader = stream_reader({"namesrv": servers.namesrv, "startingOffsets": "earliest",
                            "assign": '{"Assigned": ["broker-b:0", "1"]}'})
    start = reader.initialOffset()
    assert start == {"Assigned|broker-b|0": 0, "Assigned|broker-a|1": 0,
                     "Assigned|broker-b|1": 0}
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"Assigned|broker-b|0": sent["broker-b", 0],
                   "Assigned|broker-a|1": sent["broker-a", 1],
                   "Assigned|broker-b|1": sent["broker-b", 1]}
    assert reader.reportLatestOffset() == end


# ------------------------------------------------------------------------- by timestamp
@pytest.fixture
def two_phases(servers):
    """A two-queue topic, messages sent before and after a time; the offsets at which the
    second phase starts in each queue, and how many there are in all."""
    servers.create_topic("ByTime", 2)
    first = send(servers.namesrv, "ByTime", 10)
    time.sleep(0.1)
    between = int(time.time() * 1000)
    time.sleep(0.1)
    second = send(servers.namesrv, "ByTime", 10)
    assert set(first) == set(second) == {0, 1}
    total = {q: first[q] + second[q] for q in (0, 1)}
    return {"namesrv": servers.namesrv, "topic": "ByTime"}, between, first, total


def test_offsets_by_timestamp_per_queue_in_batch_reads(two_phases):
    options, between, first, total = two_phases
    later = int(time.time() * 1000) + 60_000
    got = ranges(batch_reader({
        **options,
        "startingOffsetsByTimestamp": json.dumps({"ByTime": {"broker-a:0": between}}),
        "endingOffsetsByTimestamp": json.dumps({"ByTime": {"1": between}})}))
    # Queue 0 starts at its first message at or after the time and ends at its last (the
    # ending option does not name it); queue 1 starts at startingOffsets (first) and ends at
    # the time. A queue left out follows startingOffsets / endingOffsets, where Kafka fails.
    assert got == {("ByTime", "broker-a", 0): (first[0], total[0]),
                   ("ByTime", "broker-a", 1): (0, first[1])}
    # Named queues win over startingOffsets for them; a time after every message gives the
    # queue's end (Kafka's startingOffsetsByTimestampStrategy=latest): nothing to read.
    got = ranges(batch_reader({
        **options, "startingOffsets": '{"ByTime": {"broker-a:0": 1, "broker-a:1": 2}}',
        "startingOffsetsByTimestamp": json.dumps({"ByTime": {"broker-a:1": later}})}))
    assert got == {("ByTime", "broker-a", 0): (1, total[0])}


def test_a_stream_starts_at_the_times_per_queue(two_phases):
    options, between, first, total = two_phases
    reader = stream_reader({**options, "startingOffsets": "earliest",
                            "startingOffsetsByTimestamp": json.dumps(
                                {"ByTime": {"broker-a:1": between}})})
    assert reader.initialOffset() == {"ByTime|broker-a|0": 0, "ByTime|broker-a|1": first[1]}
    reader = stream_reader({**options, "startingOffsetsByTimestamp": json.dumps(
        {"ByTime": {"0": between, "1": 0}})})
    assert reader.initialOffset() == {"ByTime|broker-a|0": first[0], "ByTime|broker-a|1": 0}


# --------------------------------------------------------------------------------- lag
def test_offsets_behind_computes_kafkas_metrics_from_a_progress():
    progress = {"sources": [
        {"description": "rocketq", "endOffset": '{"T|b|0": 3, "T|b|1": 10}',
         "latestOffset": {"T|b|0": 8, "T|b|1": 10, "T|b|2": 4}},
        {"description": "KafkaV2[Subscribe[t]]", "endOffset": '{"t": {"0": 1}}',
         "latestOffset": '{"t": {"0": 5}}'},  # not rocketq's kind of offsets
        {"description": "rocketq", "endOffset": '{"T|b|0": 1}', "latestOffset": "null"},
        {"description": "rocketq", "endOffset": '{"U|b|0": 1}', "latestOffset": '{"U|b|0": 2}'},
    ]}
    # A queue the end offsets do not name counts from 0, as in Kafka's source.
    assert offsets_behind(progress) == {
        0: {"minOffsetsBehindLatest": 0, "maxOffsetsBehindLatest": 5,
            "avgOffsetsBehindLatest": 3.0},
        3: {"minOffsetsBehindLatest": 1, "maxOffsetsBehindLatest": 1,
            "avgOffsetsBehindLatest": 1.0}}
    assert offsets_behind({"sources": []}) == {}


@pytest.mark.slow
def test_lag_of_a_streaming_query_from_its_progress(spark, servers):
    servers.create_topic("Laggy", 2)
    per_queue = send(servers.namesrv, "Laggy", 40)
    query = (spark.readStream.format("rocketq").option("namesrv", servers.namesrv)
             .option("topic", "Laggy").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "6").load()
             .writeStream.format("noop").trigger(processingTime="1 second").start())
    try:
        assert wait_for(lambda: any(p["numInputRows"] for p in query.recentProgress), 90)
        progresses = query.recentProgress
    finally:
        query.stop()
    read = 0
    for progress in progresses:
        read += progress["numInputRows"]
        if progress["numInputRows"]:
            break
    (source,) = progress["sources"]
    latest = json.loads(source["latestOffset"])
    end = json.loads(source["endOffset"])
    # The reader reported the queues' max offsets: everything sent.
    assert latest == {f"Laggy|broker-a|{q}": n for q, n in per_queue.items()}
    left = {key: latest[key] - end[key] for key in latest}
    assert sum(left.values()) == 40 - read > 0  # the query lags: 6 per trigger
    lag = offsets_behind(progress)
    assert lag == {0: dict(zip(LAG_METRICS, (
        min(left.values()), max(left.values()), sum(left.values()) / 2), strict=True))}
    assert source["metrics"] == {}  # what Spark's Python sources cannot fill


@pytest.mark.slow
def test_spark_reads_by_pattern_and_assignment(spark, servers):
    servers.create_topic("SparkPatA", 2)
    servers.create_topic("SparkPatB", 2)
    send(servers.namesrv, "SparkPatA", 6)
    per_queue = send(servers.namesrv, "SparkPatB", 8)

    def read(**options):
        reader = spark.read.format("rocketq").option("namesrv", servers.namesrv)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load().collect()

    rows = read(subscribePattern="SparkPat[AB]")
    assert sorted({r.topic for r in rows}) == ["SparkPatA", "SparkPatB"] and len(rows) == 14
    rows = read(assign='{"SparkPatB": [1]}')
    assert {(r.topic, r.queue_id) for r in rows} == {("SparkPatB", 1)}
    assert len(rows) == per_queue[1]


# --------------------------------------------------------------- properties (C++ client)
CPP_PRODUCE = r"""
import sys
from rocketmq.client import Message, Producer
ns = sys.argv[1]
producer = Producer("PG_CPP_SPARK")
producer.set_namesrv_addr(ns)
producer.start()
for i in range(5):
    m = Message("CppToSpark")
    m.set_tags("cpp")
    m.set_keys("cpp-key-%d" % i)
    m.set_property("region", "eu")
    m.set_property("n", str(i))
    m.set_body(("cpp %d" % i).encode())
    print("SENT", producer.send_sync(m).msg_id, flush=True)
producer.shutdown()
"""

CPP_CONSUME = r"""
import sys, threading, time
from rocketmq.client import PushConsumer
ns, count = sys.argv[1], int(sys.argv[2])
got = []
lock = threading.Lock()
def on_message(msg):
    with lock:
        got.append("|".join([msg.body.decode(), (msg.get_property("region") or b"").decode(),
                             (msg.get_property("n") or b"").decode(), msg.tags.decode()]))
consumer = PushConsumer("CG_CPP_SPARK")
consumer.set_namesrv_addr(ns)
consumer.subscribe("SparkToCpp", on_message, "*")
consumer.start()
deadline = time.time() + 45
while time.time() < deadline and len(got) < count:
    time.sleep(0.1)
consumer.shutdown()
for line in got:
    print("GOT|" + line, flush=True)
"""


@pytest.fixture
def cpp_python():
    from ..compat.clients import client_python

    return client_python("rocketmq-0.4.4", "rocketmq==0.4.4")


@pytest.mark.slow
def test_properties_between_the_cpp_client_and_spark(spark, servers, cpp_python):
    from ..compat.clients import run_client

    servers.create_topic("CppToSpark", 2)
    servers.create_topic("SparkToCpp", 2)
    # (a) The C++ client's user properties come back in the properties map, beside the
    # system properties RocketMQ keeps there (its consumers' getProperties() shows both).
    proc = run_client(cpp_python, CPP_PRODUCE, servers.namesrv)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    sent = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("SENT")]
    rows = (spark.read.format("rocketq").option("namesrv", servers.namesrv)
            .option("topic", "CppToSpark").load().collect())
    assert sorted(r.msg_id for r in rows) == sorted(sent)
    for r in rows:
        n = r.properties["n"]
        assert r.body == f"cpp {n}".encode() and r.properties["region"] == "eu"
        assert r.tags == "cpp" and r.keys == [f"cpp-key-{n}"]
        assert r.properties["TAGS"] == "cpp" and r.properties["KEYS"] == f"cpp-key-{n}"
        assert r.properties["UNIQ_KEY"] == r.msg_id
    # (b) A Spark write's properties column reaches the C++ consumer as message properties.
    df = spark.createDataFrame([(f"spark {i}", "sp", {"region": "us", "n": str(i)})
                                for i in range(4)],
                               "body string, tags string, properties map<string,string>")
    (df.write.format("rocketq").option("namesrv", servers.namesrv)
     .option("topic", "SparkToCpp").mode("append").save())
    proc = run_client(cpp_python, CPP_CONSUME, servers.namesrv, "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    got = sorted(line.split("|")[1:] for line in proc.stdout.splitlines()
                 if line.startswith("GOT|"))
    assert got == [[f"spark {i}", "us", str(i), "sp"] for i in range(4)]
    # rocketq's own consumer sees the same.
    with PullConsumer("py-check", namesrv=servers.namesrv, from_where="first") as consumer:
        consumer.subscribe("SparkToCpp")
        consumer.start()
        seen = []
        wait_for(lambda: seen.extend(consumer.poll(0.3)) or len(seen) >= 4, 20)
    assert sorted(m.properties["n"] for m in seen) == ["0", "1", "2", "3"]
