"""What a writing task sends, without Spark: rows to batch elements, the rows that go alone,
a failed send failing the task, and every row stored once."""

from __future__ import annotations

import pytest

from rocketq.client.errors import MessageValidationError
from rocketq.protocol import decode_properties

pa = pytest.importorskip("pyarrow")

from rocketq.spark import broker_io, writes  # noqa: E402


def rows(**columns):
    return pa.RecordBatch.from_pydict(columns)


def test_plain_rows_become_elements_with_an_id_each():
    by_topic, alone = writes.Rows("Out", 4 << 20, 4096).split(rows(body=["a", "b"]))
    assert alone == [] and list(by_topic) == ["Out"]
    (fa, a, pa_), (fb, b, pb) = by_topic["Out"]
    assert (fa, a, fb, b) == (0, b"a", 0, b"b")
    ids = [decode_properties(p)["UNIQ_KEY"] for p in (pa_, pb)]
    assert len(set(ids)) == 2 and all(len(i) == 32 for i in ids)


def test_columns_topics_and_what_goes_alone():
    batch = pa.RecordBatch.from_pydict({
        "body": [b"x", b"y" * 5000, b"z", b"w"], "topic": ["A", "B", "A", "C"],
        "tags": ["t", None, None, None], "keys": ["k1 k2", None, None, None],
        "properties": [[("p", "1")], None, None, [("DELAY", "2")]]},
        schema=pa.schema([("body", pa.binary()), ("topic", pa.string()), ("tags", pa.string()),
                          ("keys", pa.string()),
                          ("properties", pa.map_(pa.string(), pa.string()))]))
    by_topic, alone = writes.Rows(None, 4 << 20, 4096).split(batch)
    assert sorted(by_topic) == ["A"] and [e[1] for e in by_topic["A"]] == [b"x", b"z"]
    props = decode_properties(by_topic["A"][0][2])
    assert (props["TAGS"], props["KEYS"], props["p"]) == ("t", "k1 k2", "1")
    # A body past compress_over goes alone (compressed), and so does a delay.
    assert [(m.topic, len(m.body)) for m in alone] == [("B", 5000), ("C", 1)]


@pytest.mark.parametrize("columns, error", [
    ({"value": ["x"]}, "needs a 'body' column"),
    ({"body": [None]}, "null body"),
    ({"body": [""]}, "body is empty"),
    ({"body": ["x"], "topic": [None]}, "no topic"),
    ({"body": ["x"], "topic": ["bad topic!"]}, "topic"),
])
def test_a_row_the_checks_refuse_raises(columns, error):
    default = None if "topic" in columns else "Out"
    with pytest.raises((ValueError, MessageValidationError), match=error):
        writes.Rows(default, 4 << 20, 4096).split(rows(**columns))


def test_chunks_hold_at_most_the_limit_and_a_larger_element_alone():
    elements = [(0, b"x" * 100, b"p") for _ in range(10)] + [(0, b"y" * 1000, b"")]
    runs = list(writes.chunks(elements, 350))
    assert [len(r) for r in runs] == [2, 2, 2, 2, 2, 1]
    assert sum(runs, []) == elements


def test_every_row_is_stored_once_and_a_refusal_fails_the_task(servers):
    servers.create_topic("WritesOut", 4)
    batches = [rows(body=[b"%d-%d" % (n, i) for i in range(5000)]) for n in range(3)]
    sent = writes.send_batches(servers.namesrv, "WritesOut", "pg", batches)
    assert sent.count == 15000 and set(sent.addrs) == set(sent.counts)
    servers.brokers[0].store.wait_dispatched()  # queue offsets move as the log dispatches
    stored = sum(high for _low, high in
                 broker_io.queue_offsets(servers.namesrv, ["WritesOut"]).values())
    assert stored == 15000
    servers.brokers[0].config.brokerPermission = 4  # read only: sends are refused
    try:
        with pytest.raises(Exception, match="forbidden"):
            writes.send_batches(servers.namesrv, "WritesOut", "pg", batches)
    finally:
        servers.brokers[0].config.brokerPermission = 6
