"""Exactly-once sinks on the broker: halves committed per batch by one recorded decision."""

from __future__ import annotations

import time

import pytest

from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode, SysFlag
from rocketq.remoting import RemotingClient, run

pa = pytest.importorskip("pyarrow")

from rocketq.spark import broker_io, pulls, sink_commits, writes  # noqa: E402

from ..conftest import wait_for  # noqa: E402

SINK = "orders-sink"


def rows(*bodies: bytes):
    return [pa.RecordBatch.from_pydict({"body": list(bodies)})]


def prepare(st, batch: str, txn: str, *bodies: bytes, check_after_s: int = 900,
            topic: str = "Out"):
    sent = writes.send_batches(st.namesrv, topic, "pg", rows(*bodies),
                               writes.Halves(SINK, batch, txn, check_after_s))
    return sent


def visible(st, topic: str = "Out") -> list[bytes]:
    """Every message consumers can read from the topic, by pulling each queue from 0."""
    out = []
    for (t, broker, addr, qid), (low, high) in broker_io.queue_offsets(st.namesrv,
                                                                        [topic]).items():
        for batch in pulls.pull_batches(addr, t, qid, low, high, broker):
            out.extend(batch.column("body").to_pylist())
    return sorted(out)


def open_halves(st, batch):
    return st.call(st.brokers[0].sinks.open_halves(SINK, batch))


def commit(st, batch, decision, addrs=None):
    return sink_commits.commit_sink(st.namesrv, ["Out"], addrs or {}, SINK, batch, decision)


@pytest.fixture
def st(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    st.start_namesrv()
    st.start_broker(transactionCheckInterval=200)
    st.create_topic("Out", 4)
    yield st
    st.stop()


def test_halves_stay_invisible_until_the_batch_is_committed_once(st):
    a = prepare(st, "b1", "0.0.x", b"a1", b"a2", b"a3")
    b = prepare(st, "b1", "1.0.y", b"b1")
    failed = prepare(st, "b1", "1.1.z", b"dup")  # an attempt that failed: not decided
    assert a.count == 3 and b.count == 1 and failed.count == 1
    assert visible(st) == []
    decision = {"0.0.x": a.counts, "1.0.y": b.counts}
    assert commit(st, "b1", decision) == decision
    assert visible(st) == [b"a1", b"a2", b"a3", b"b1"]

    # The batch replayed (its driver died before recording it done): the new attempts'
    # halves are rolled back, the recorded decision comes back, nothing is added.
    again = prepare(st, "b1", "0.0.w", b"a1", b"a2", b"a3")
    assert commit(st, "b1", {"0.0.w": again.counts}) == decision
    assert visible(st) == [b"a1", b"a2", b"a3", b"b1"]
    assert open_halves(st, "b1") == {}  # every half resolved


def test_a_large_batch_is_committed_whole(st):
    # Large enough to cross from one CommitLog file (8 MiB here) into the next.
    bodies = [b"%05d" % i + b"x" * 3000 for i in range(3000)]
    a = prepare(st, "big", "0.0.x", *bodies[:1700])
    b = prepare(st, "big", "1.0.y", *bodies[1700:])
    commit(st, "big", {"0.0.x": a.counts, "1.0.y": b.counts})
    assert wait_for(lambda: len(visible(st)) >= 3000)
    assert visible(st) == bodies


def test_the_decision_survives_a_broker_restart(st):
    a = prepare(st, "b7", "0.0.x", b"m")
    commit(st, "b7", {"0.0.x": a.counts})
    st.stop_broker(st.brokers[0])
    st.start_broker(transactionCheckInterval=200)
    again = prepare(st, "b7", "0.1.y", b"m")
    assert commit(st, "b7", {"0.1.y": again.counts}) == {"0.0.x": a.counts}
    assert visible(st) == [b"m"]


def test_a_decision_that_counts_halves_the_broker_lacks_is_refused(st):
    a = prepare(st, "b2", "0.0.x", b"m1", b"m2")
    counts = {name: n + 1 for name, n in a.counts.items()}
    with pytest.raises(RuntimeError, match=r"txn 0\.0\.x has 2 prepared messages on broker-a, "
                                           r"the decision counts 3"):
        commit(st, "b2", {"0.0.x": counts})
    assert visible(st) == []
    commit(st, "b2", {"0.0.x": a.counts})  # not recorded: the right decision still goes
    assert visible(st) == [b"m1", b"m2"]


def test_abort_rolls_the_batch_back(st):
    prepare(st, "b3", "0.0.x", b"gone")
    assert open_halves(st, "b3") == {"0.0.x": 1}
    sink_commits.abort_sink(st.namesrv, ["Out"], {}, SINK, "b3")
    assert open_halves(st, "b3") == {}
    # A later run of the batch commits its own attempt.
    a = prepare(st, "b3", "0.1.y", b"kept")
    commit(st, "b3", {"0.1.y": a.counts})
    assert visible(st) == [b"kept"]


def test_orphan_halves_follow_the_ledger_after_their_check_time(st):
    prepare(st, "b4", "0.0.x", b"orphan", check_after_s=1)
    assert open_halves(st, "b4") == {"0.0.x": 1}
    assert wait_for(lambda: open_halves(st, "b4") == {}, timeout=10)
    assert visible(st) == []
    # Rolled back: a commit that counts them is refused rather than committing nothing.
    with pytest.raises(RuntimeError, match="rolled back after the check time"):
        commit(st, "b4", {"0.0.x": {"broker-a": 1}})


def test_bad_requests_get_clear_answers(st):
    addr = st.brokers[0].address

    async def ask(cmd):
        client = RemotingClient()
        try:
            return await client.invoke(addr, cmd, 5)
        finally:
            await client.close()

    r = run(ask(RemotingCommand.request(RequestCode.SINK_COMMIT, {"sink": SINK, "batch": "x"},
                                        b"not json")))
    assert r.code == ResponseCode.INVALID_PARAMETER and "txns" in r.remark
    r = run(ask(RemotingCommand.request(RequestCode.SINK_ABORT, {"batch": "x"})))
    assert r.code == ResponseCode.INVALID_PARAMETER
    # A batch of messages cannot be a half: it would be stored visible.
    r = run(ask(RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, {
        "a": "pg", "b": "Out", "c": "TBW102", "d": 4, "e": 0, "f": SysFlag.TRANSACTION_PREPARED,
        "g": int(time.time() * 1000), "h": 0, "i": "", "j": 0, "k": False, "m": True},
        b"")))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "transactional" in r.remark
    # SINK_PREPARE's check time must be plain digits: "²" is a digit to Python, not to int().
    from rocketq.protocol.message import encode_batch

    body = encode_batch([(0, b"row", b"")])
    for immunity in ("\u00b2", "9" * 5000, "", "-1"):
        r = run(ask(RemotingCommand.request(RequestCode.SINK_PREPARE, {
            "sink": SINK, "batch": "b", "txn": "t", "topic": "Out", "queueId": 0,
            "checkImmunity": immunity}, body)))
        assert r.code == ResponseCode.INVALID_PARAMETER, (immunity, r.remark)
    assert open_halves(st, "b") == {}
    r = run(ask(RemotingCommand.request(RequestCode.SINK_PREPARE, {
        "sink": SINK, "batch": "b", "txn": "t", "topic": "Out", "queueId": 0,
        "checkImmunity": "60"}, body)))
    assert r.code == ResponseCode.SUCCESS and open_halves(st, "b") == {"t": 1}


def test_an_orphan_of_a_decided_batch_is_committed_by_the_check(st):
    import orjson

    from rocketq.protocol.topic import SINK_LEDGER_TOPIC
    from rocketq.store import StoreMessage

    a = prepare(st, "b5", "0.0.x", b"late", check_after_s=1)
    broker = st.brokers[0]
    # The decision reached the ledger, and the broker died before applying it.
    entry = orjson.dumps({"sink": SINK, "batch": "b5", "txns": {"0.0.x": a.counts}})
    st.call(broker.store_slot.put_messages([StoreMessage(SINK_LEDGER_TOPIC, entry, 0)]))
    assert wait_for(lambda: visible(st) == [b"late"], timeout=10)
    assert open_halves(st, "b5") == {}


def test_a_waiting_sink_half_does_not_hold_up_other_transactions(st):
    from rocketq import LocalTransactionState, Message, TransactionProducer

    prepare(st, "b6", "0.0.x", b"waiting")  # checked only after 900 s

    class Unknown:
        checked: list[str] = []

        def execute_local_transaction(self, message, arg):
            return LocalTransactionState.UNKNOWN

        def check_local_transaction(self, message):
            self.checked.append(message.body)
            return LocalTransactionState.COMMIT

    listener = Unknown()
    broker = st.brokers[0]
    broker.config.transactionTimeOut = 300
    with TransactionProducer("txg", listener, namesrv=st.namesrv) as producer:
        producer.send_message_in_transaction(Message("Out", b"checked"))
        assert wait_for(lambda: b"checked" in visible(st), 10)
    assert open_halves(st, "b6") == {"0.0.x": 1}


def test_a_commit_builds_the_committed_messages_without_reading_a_half(st, monkeypatch):
    from rocketq.protocol import TRANS_HALF_TOPIC

    batch = [pa.RecordBatch.from_pydict({
        "body": [b"k1", b"k2"], "tags": ["t", None], "keys": ["a b", None],
        "properties": [[("region", "eu")], None]},
        schema=pa.schema([("body", pa.binary()), ("tags", pa.string()), ("keys", pa.string()),
                          ("properties", pa.map_(pa.string(), pa.string()))]))]
    sent = writes.send_batches(st.namesrv, "Out", "pg", batch,
                               writes.Halves(SINK, "b9", "0.0.x", 900))
    broker = st.brokers[0]
    store = broker.store
    reads = []
    get_messages = store.get_messages
    monkeypatch.setattr(store, "get_messages", lambda topic, *a, **kw: (
        reads.append(topic), get_messages(topic, *a, **kw))[1])
    commit(st, "b9", {"0.0.x": sent.counts})
    assert TRANS_HALF_TOPIC not in reads  # indexed when stored, committed as a batch
    monkeypatch.undo()
    assert visible(st) == [b"k1", b"k2"]
    found = {}
    for qid in range(4):
        with store.get_messages("Out", qid, 0, 10) as got:
            found.update({r.body: r for r in got.decode()})
    first, second = found[b"k1"], found[b"k2"]
    assert first.properties["TAGS"] == "t" and first.properties["KEYS"] == "a b"
    assert first.properties["region"] == "eu" and first.properties["PGROUP"] == "pg"
    assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID", "__SINK_NAME", "__SINK_BATCH",
                "__SINK_TXN"} & (set(first.properties) | set(second.properties))
    for record in (first, second):
        half = store.look_message_by_offset(record.prepared_transaction_offset)
        assert half.topic == TRANS_HALF_TOPIC and half.body == record.body
        assert half.properties["UNIQ_KEY"] == record.properties["UNIQ_KEY"]


def test_halves_sent_one_by_one_and_halves_before_a_restart_are_found_by_reading(st):
    # A body of compress_over (4 KiB) or more goes alone, as a single half message.
    large = b"L" * 5000
    a = prepare(st, "b10", "0.0.x", b"small", large)
    assert a.count == 2
    st.stop_broker(st.brokers[0])
    st.start_broker(transactionCheckInterval=200)  # its index is rebuilt by reading
    assert open_halves(st, "b10") == {"0.0.x": 2}
    b = prepare(st, "b10", "1.0.y", b"after")  # indexed as stored, beside the read ones
    commit(st, "b10", {"0.0.x": a.counts, "1.0.y": b.counts})
    assert visible(st) == sorted([b"small", large, b"after"])
    assert open_halves(st, "b10") == {}


def test_halves_for_a_topic_the_broker_lacks_go_one_by_one(st):
    a = prepare(st, "b11", "0.0.x", b"n1", b"n2", topic="Created")  # created by the sends
    sink_commits.commit_sink(st.namesrv, ["Created"], a.addrs, SINK, "b11", {"0.0.x": a.counts})
    assert visible(st, "Created") == [b"n1", b"n2"]


def test_halves_past_the_cache_budget_are_read_back_to_commit(st, monkeypatch):
    from rocketq.broker.transactions import sink_state

    monkeypatch.setattr(sink_state, "CACHE_BYTES", 200_000)  # a run of 128 KiB kept, no more
    bodies = [b"%04d" % i + b"c" * 1000 for i in range(400)]
    a = prepare(st, "b12", "0.0.x", *bodies[:300])
    b = prepare(st, "b12", "1.0.y", *bodies[300:])
    assert open_halves(st, "b12") == {"0.0.x": 300, "1.0.y": 100}
    runs = [run for txn in st.brokers[0].sinks.halves[(SINK, "b12")].values()
            for run in txn.runs]
    assert {run.body is None for run in runs} == {True, False}
    commit(st, "b12", {"0.0.x": a.counts, "1.0.y": b.counts})
    assert wait_for(lambda: len(visible(st)) >= 400)
    assert visible(st) == bodies
    assert st.brokers[0].sinks._cached == 0


def test_halves_read_back_past_the_cache_budget_are_read_again_to_commit(st, monkeypatch):
    from rocketq.broker.transactions import sink_state

    bodies = [b"%04d" % i + b"r" * 1000 for i in range(50)]
    a = prepare(st, "b13", "0.0.x", *bodies)
    st.stop_broker(st.brokers[0])
    monkeypatch.setattr(sink_state, "CACHE_BYTES", 10_000)  # a few records kept, the rest not
    st.start_broker(transactionCheckInterval=200)
    assert open_halves(st, "b13") == {"0.0.x": 50}
    singles = st.brokers[0].sinks.halves[(SINK, "b13")]["0.0.x"].single
    assert {entry is None for entry in singles.values()} == {True, False}
    commit(st, "b13", {"0.0.x": a.counts})
    assert visible(st) == bodies
    assert st.brokers[0].sinks._cached == 0


def test_a_truncated_log_is_read_again_not_remembered(st):
    """A demoted master's tail is cut (controller mode): halves and resolved records past the
    cut are gone and their queue offsets will be reused, so the index forgets them."""
    from rocketq.protocol import TRANS_HALF_TOPIC

    broker = st.brokers[0]
    store = broker.store
    prepare(st, "kept", "t", b"k1")
    commit(st, "kept", {"t": {"broker-a": 1}})
    assert visible(st) == [b"k1"]
    store.wait_dispatched()
    cut_at, halves_before = store.commitlog.max_offset, store.get_max_offset(TRANS_HALF_TOPIC, 0)
    prepare(st, "gone", "t", b"g1", b"g2")
    prepare(st, "done", "t", b"d1")
    commit(st, "done", {"t": {"broker-a": 1}})
    assert open_halves(st, "gone") == {"t": 2}
    done_halves = set(range(halves_before, store.get_max_offset(TRANS_HALF_TOPIC, 0)))
    assert done_halves & broker.transactions.resolved  # "done"'s half was resolved

    async def cut():
        return store.truncate(cut_at)

    assert st.call(cut()) == cut_at
    assert open_halves(st, "gone") == {}
    assert not done_halves & broker.transactions.resolved
    assert visible(st) == [b"k1"]
    # The broker goes on: a new batch prepared where the cut ones were commits whole.
    prepare(st, "after", "t", b"a1", b"a2")
    assert open_halves(st, "after") == {"t": 2}
    commit(st, "after", {"t": {"broker-a": 2}})
    assert visible(st) == [b"a1", b"a2", b"k1"]
