"""Transactional messages end to end: half messages, commit, rollback, check-back, discard."""

from __future__ import annotations

import threading
import time

from rocketq import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    PushConsumer,
    TransactionProducer,
)

from ..conftest import wait_for

FAST_CHECKS = dict(transactionTimeOut=500, transactionCheckInterval=200, transactionCheckMax=2)


class Ledger:
    """A local transaction outcome per key, and the check-backs received."""

    def __init__(self, outcomes, check_answers=None):
        self.outcomes = outcomes
        self.check_answers = check_answers or {}
        self.checked = []
        self.lock = threading.Lock()

    def execute_local_transaction(self, message, arg):
        return self.outcomes[arg]

    def check_local_transaction(self, message):
        with self.lock:
            self.checked.append(message.keys[0])
        return self.check_answers.get(message.keys[0], LocalTransactionState.UNKNOWN)


def collector(st, topic, group):
    got = []
    lock = threading.Lock()

    def listener(msgs):
        with lock:
            got.extend(msgs)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv=st.namesrv, from_where="first")
    consumer.subscribe(topic)
    consumer.register(listener)
    consumer.start()
    return consumer, got


def start(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    st.start_namesrv()
    st.start_broker(**FAST_CHECKS)
    st.create_topic("Tx", 2)
    return st


def test_commit_rollback_and_check_back(tmp_path):
    st = start(tmp_path)
    try:
        consumer, got = collector(st, "Tx", "tx-consumer")
        ledger = Ledger({"c": LocalTransactionState.COMMIT, "r": LocalTransactionState.ROLLBACK,
                         "u": LocalTransactionState.UNKNOWN},
                        check_answers={"u": LocalTransactionState.COMMIT})
        with TransactionProducer("tx-group", ledger, namesrv=st.namesrv) as producer:
            results = {k: producer.send_message_in_transaction(
                Message("Tx", f"body-{k}".encode(), keys=[k]), arg=k) for k in "cru"}
            assert {k: r.local_state for k, r in results.items()} == ledger.outcomes
            assert wait_for(lambda: any(m.body == b"body-c" for m in got), 10)
            time.sleep(0.2)
            assert [m.body for m in got] == [b"body-c"]  # half messages are invisible
            # The UNKNOWN one is resolved by the broker asking back.
            assert wait_for(lambda: any(m.body == b"body-u" for m in got), 10)
            assert "u" in ledger.checked and "c" not in ledger.checked
            assert "r" not in ledger.checked
        time.sleep(0.8)
        bodies = sorted(m.body for m in got)
        assert bodies == [b"body-c", b"body-u"]  # rolled back never shows, nothing twice
        committed = next(m for m in got if m.body == b"body-c")
        assert committed.topic == "Tx" and committed.queue_id == results["c"].queue.queue_id
        assert "TRAN_MSG" not in committed.properties
        assert committed.msg_id == results["c"].msg_id
        consumer.shutdown()
    finally:
        st.stop()


def test_producer_that_never_answers_is_discarded_after_max_checks(tmp_path):
    st = start(tmp_path)
    try:
        consumer, got = collector(st, "Tx", "tx-consumer2")
        ledger = Ledger({"x": LocalTransactionState.UNKNOWN})  # checks answer UNKNOWN
        with TransactionProducer("silent-group", ledger, namesrv=st.namesrv) as producer:
            producer.send_message_in_transaction(Message("Tx", b"never", keys=["x"]), arg="x")
            broker = st.brokers[0]

            def discarded():
                broker.store.wait_dispatched()
                return broker.store.get_max_offset("TRANS_CHECK_MAX_TIME_TOPIC", 0) == 1

            assert wait_for(discarded, 15)
            assert ledger.checked.count("x") == FAST_CHECKS["transactionCheckMax"]
        time.sleep(0.5)
        assert got == []
        consumer.shutdown()
    finally:
        st.stop()


def test_open_transaction_survives_a_broker_restart(tmp_path):
    st = start(tmp_path)
    try:
        ledger = Ledger({"p": LocalTransactionState.UNKNOWN},
                        check_answers={"p": LocalTransactionState.COMMIT})
        producer = TransactionProducer("restart-group", ledger, namesrv=st.namesrv,
                                       send_timeout=5).start()
        try:
            producer.send_message_in_transaction(Message("Tx", b"pending", keys=["p"]), "p")
            broker = st.brokers[0]
            port = broker.config.listenPort
            st.stop_broker(broker)
            st.start_broker("broker-a", listenPort=port, **FAST_CHECKS)  # as configured
            # The producer's next heartbeat tells the new broker about its group.
            producer._loop.run(producer._async.instance.heartbeat_all())
            consumer, got = collector(st, "Tx", "tx-consumer3")
            assert wait_for(lambda: [m.body for m in got] == [b"pending"], 15)
            time.sleep(0.6)
            assert [m.body for m in got] == [b"pending"]
            consumer.shutdown()
        finally:
            producer.shutdown()
    finally:
        st.stop()


def test_first_check_back_comes_within_interval_plus_timeout_even_on_a_new_topic(tmp_path):
    """A half message is checked at the first scan (every transactionCheckInterval) after it
    is transactionTimeOut old: within interval + timeout of the send, as in RocketMQ. That
    holds for a producer whose first send creates the topic too: it tells the broker its
    group at once, not at its first periodic heartbeat 30 s after it started."""
    from ..servers import ServerThread

    interval, timeout = 1.0, 0.3
    st = ServerThread(tmp_path)
    sent: dict[str, float] = {}
    checked: dict[str, float] = {}

    class Timing:
        def execute_local_transaction(self, message, arg):
            sent[message.keys[0]] = time.monotonic()
            return LocalTransactionState.UNKNOWN

        def check_local_transaction(self, message):
            checked.setdefault(message.keys[0], time.monotonic())
            return LocalTransactionState.COMMIT

    try:
        st.start_namesrv()
        st.start_broker(transactionTimeOut=int(timeout * 1000),
                        transactionCheckInterval=int(interval * 1000), transactionCheckMax=50)
        with TransactionProducer("timing-group", Timing(), namesrv=st.namesrv) as producer:
            for i in range(5):  # at different points of the broker's check period
                producer.send_message_in_transaction(Message("TxNew", b"x", keys=[f"k{i}"]))
                time.sleep(0.37)
            assert wait_for(lambda: len(checked) == len(sent), 10), (sent, checked)
        delays = sorted(checked[k] - sent[k] for k in sent)
        assert delays[0] >= timeout - 0.05, delays
        assert delays[-1] <= interval + timeout + 0.7, delays  # + the scan, on a busy host
    finally:
        st.stop()
