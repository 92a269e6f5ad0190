"""The data source's startingOffsets / endingOffsets: the client's words (first, last,
timestamp), Kafka's (earliest, latest) and JSON, planned against a real broker without a
SparkSession."""

from __future__ import annotations

import time

import pytest

from rocketq import Message, Producer

pytest.importorskip("pyspark")

from rocketq.spark import RocketMQBatchReader, RocketMQStreamReader  # noqa: E402


@pytest.fixture
def ten(servers):
    """A one-queue topic of ten messages, and a time between the fifth and the sixth."""
    servers.create_topic("Offsets", 1)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(5):
            producer.send(Message("Offsets", b"m%d" % i))
        time.sleep(0.1)
        between = int(time.time() * 1000)
        time.sleep(0.1)
        for i in range(5, 10):
            producer.send(Message("Offsets", b"m%d" % i))
    return {"namesrv": servers.namesrv, "topic": "Offsets"}, between


def ranges(options: dict[str, str]) -> list[tuple[int, int]]:
    reader = RocketMQBatchReader({k.lower(): v for k, v in options.items()})
    return [(p.start, p.end) for p in reader.partitions()]


@pytest.mark.parametrize(("starting", "ending", "expected"), [
    ("first", "last", [(0, 10)]),
    ("First", "LATEST", [(0, 10)]),
    ("last", "last", []),
    ("first", '{"Offsets": {"broker-a:0": 4}}', [(0, 4)]),
])
def test_batch_reads_take_both_spellings(ten, starting, ending, expected):
    options, _ = ten
    assert ranges({**options, "startingOffsets": starting, "endingOffsets": ending}) == expected


def test_batch_reads_start_and_end_at_a_timestamp(ten):
    options, between = ten
    assert ranges({**options, "startingOffsets": "timestamp",
                   "startingTimestamp": str(between)}) == [(5, 10)]
    assert ranges({**options, "endingOffsets": "timestamp",
                   "endingTimestamp": str(between)}) == [(0, 5)]


@pytest.mark.parametrize(("starting", "expected"), [
    ("first", 0), ("Earliest", 0), ("last", 10)])
def test_streams_start_where_either_spelling_says(ten, starting, expected):
    options, _ = ten
    options["startingoffsets"] = starting
    assert RocketMQStreamReader(options).initialOffset() == {"Offsets|broker-a|0": expected}


def test_streams_start_at_a_timestamp(ten):
    options, between = ten
    reader = RocketMQStreamReader({**options, "startingoffsets": "timestamp",
                                   "startingtimestamp": str(between)})
    assert reader.initialOffset() == {"Offsets|broker-a|0": 5}


@pytest.mark.parametrize(("option", "reader"), [
    ("startingOffsets", RocketMQBatchReader), ("endingOffsets", RocketMQBatchReader),
    ("startingOffsets", RocketMQStreamReader)])
def test_an_unknown_position_is_refused_naming_the_option_and_what_it_takes(option, reader):
    options = {"namesrv": "127.0.0.1:1", "topic": "T", option.lower(): "beginning"}
    with pytest.raises(ValueError, match=rf"{option} must be 'first' \(or 'earliest'\), 'last' "
                                         r"\(or 'latest'\), 'timestamp' .* or JSON per queue"):
        reader(options)


def test_a_timestamp_position_without_its_time_is_refused(ten):
    options, _ = ten
    with pytest.raises(ValueError, match="startingOffsets=timestamp needs the option "
                                         "startingTimestamp"):
        ranges({**options, "startingOffsets": "timestamp"})


def stream_reader(options: dict[str, str]) -> RocketMQStreamReader:
    return RocketMQStreamReader({k.lower(): v for k, v in options.items()})


def test_kafkas_max_offsets_per_trigger_bounds_a_micro_batch(ten):
    options, _ = ten
    reader = stream_reader({**options, "startingOffsets": "earliest",
                            "maxOffsetsPerTrigger": "4"})
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert [int(v) for v in end.values()] == [4]


def test_min_offsets_per_trigger_waits_for_enough_or_for_the_delay(ten, servers):
    options, _ = ten
    reader = stream_reader({**options, "startingOffsets": "earliest",
                            "minOffsetsPerTrigger": "12", "maxTriggerDelay": "1500ms"})
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(start, limit) == start  # 10 waiting, 12 wanted: no batch
    time.sleep(1.6)
    first = reader.latestOffset(start, limit)  # the delay is up: what there is
    assert [int(v) for v in first.values()] == [10]
    assert reader.latestOffset(first, limit) == first  # nothing new, and the delay restarts
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(12):
            producer.send(Message("Offsets", b"n%d" % i))
    assert [int(v) for v in reader.latestOffset(first, limit).values()] == [22]  # enough


def test_min_messages_per_trigger_is_ignored_by_available_now(ten):
    options, _ = ten
    reader = stream_reader({**options, "startingOffsets": "earliest",
                            "minMessagesPerTrigger": "1000"})
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert [int(v) for v in end.values()] == [10]


@pytest.mark.parametrize("delay", ["soon", "-1s", "1d"])
def test_a_trigger_delay_that_is_not_a_duration_is_refused(ten, delay):
    options, _ = ten
    with pytest.raises(ValueError, match="maxTriggerDelay must be a duration"):
        stream_reader({**options, "maxTriggerDelay": delay})
