"""Delayed messages by level and consumer retries with the dead-letter queue, end to end."""

from __future__ import annotations

import threading
import time

from rocketq import ConsumeResult, Message, Producer, PushConsumer

from ..conftest import wait_for

SHORT_LEVELS = "1s 2s 3s " + "200ms " * 15  # 18 levels; retries start at level 3 + n


def start(tmp_path, **conf):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    st.start_namesrv()
    st.start_broker(messageDelayLevel=SHORT_LEVELS, **conf)
    return st


class Recorder:
    def __init__(self, fail_until=0, always_fail=False):
        self.lock = threading.Lock()
        self.seen = []  # (receive time, message)
        self.fail_until = fail_until
        self.always_fail = always_fail

    def __call__(self, msgs):
        with self.lock:
            for m in msgs:
                self.seen.append((time.time(), m))
            if self.always_fail or any(m.reconsume_times < self.fail_until for m in msgs):
                return ConsumeResult.RECONSUME_LATER
            return ConsumeResult.SUCCESS


def test_delay_levels_are_not_early_and_not_late(tmp_path):
    st = start(tmp_path)
    try:
        st.create_topic("Later", 2)
        recorder = Recorder()
        consumer = PushConsumer("dg", namesrv=st.namesrv, from_where="first")
        consumer.subscribe("Later")
        consumer.register(recorder)
        consumer.start()
        sent = {}
        with Producer("pg", namesrv=st.namesrv) as producer:
            for level in (1, 2, 3):
                began = time.time()
                r = producer.send(Message("Later", b"level%d" % level, delay_level=level,
                                          tags="t"))
                sent[r.msg_id] = (level, began, time.time())
            producer.send(Message("Later", b"now"))
        assert wait_for(lambda: len(recorder.seen) >= 4, 15)
        by_body = {m.body: (t, m) for t, m in recorder.seen}
        assert by_body[b"now"][0] < min(s[1] for s in sent.values()) + 1.0
        for t, m in recorder.seen:
            if m.body == b"now":
                continue
            level, began, returned = sent[m.msg_id]
            assert t >= began + level - 0.05, f"level {level} early by {began + level - t:.3f}s"
            assert t <= returned + level + 1.0, f"level {level} late by {t - returned - level}s"
            assert m.topic == "Later" and m.tags == "t" and m.queue_id in (0, 1)
            assert "DELAY" not in m.properties
        consumer.shutdown()
    finally:
        st.stop()


def test_delayed_messages_survive_a_clean_restart_exactly_once(tmp_path):
    st = start(tmp_path)
    try:
        st.create_topic("Restart", 1)
        with Producer("pg", namesrv=st.namesrv) as producer:
            began = time.time()
            producer.send(Message("Restart", b"late", delay_level=3))   # due in 3 s
            producer.send(Message("Restart", b"soon", delay_level=1))   # due in 1 s
        time.sleep(1.6)  # "soon" is delivered before the restart, "late" is not
        broker = st.brokers[0]
        st.stop_broker(broker)
        st.start_broker("broker-a", messageDelayLevel=SHORT_LEVELS)
        recorder = Recorder()
        consumer = PushConsumer("rg", namesrv=st.namesrv, from_where="first")
        consumer.subscribe("Restart")
        consumer.register(recorder)
        consumer.start()
        assert wait_for(lambda: len(recorder.seen) >= 2, 15)
        time.sleep(1.0)
        bodies = sorted(m.body for _, m in recorder.seen)
        assert bodies == [b"late", b"soon"]  # nothing lost, nothing twice
        late_at = next(t for t, m in recorder.seen if m.body == b"late")
        assert late_at >= began + 3 - 0.05
        consumer.shutdown()
    finally:
        st.stop()


def test_failed_three_times_then_consumed_with_reconsume_times(tmp_path):
    st = start(tmp_path)
    try:
        st.create_topic("Flaky", 1)
        recorder = Recorder(fail_until=3)
        consumer = PushConsumer("fg", namesrv=st.namesrv, from_where="first")
        consumer.subscribe("Flaky")
        consumer.register(recorder)
        consumer.start()
        with Producer("pg", namesrv=st.namesrv) as producer:
            sent = producer.send(Message("Flaky", b"try me", keys=["k1"]))
        assert wait_for(lambda: any(m.reconsume_times == 3 for _, m in recorder.seen), 20)
        attempts = [m for _, m in recorder.seen]
        assert [m.reconsume_times for m in attempts] == [0, 1, 2, 3]
        assert all(m.topic == "Flaky" and m.body == b"try me" for m in attempts)
        assert all(m.msg_id == sent.msg_id for m in attempts)  # the same message each time
        # Retries wait for their delay level: 3 + n, i.e. the 200 ms levels here.
        times = [t for t, _ in recorder.seen]
        assert all(b - a >= 0.15 for a, b in zip(times, times[1:], strict=False))
        time.sleep(0.6)
        assert len(recorder.seen) == 4
        consumer.shutdown()
    finally:
        st.stop()


def test_always_failing_message_ends_in_the_dead_letter_queue(tmp_path):
    st = start(tmp_path)
    try:
        st.create_topic("Poison", 1)
        recorder = Recorder(always_fail=True)
        consumer = PushConsumer("pg-dlq", namesrv=st.namesrv, from_where="first",
                                max_reconsume_times=2)
        consumer.subscribe("Poison")
        consumer.register(recorder)
        consumer.start()
        with Producer("pg", namesrv=st.namesrv) as producer:
            producer.send(Message("Poison", b"poison", tags="bad"))
        broker = st.brokers[0]

        def in_dlq():
            store = broker.store
            store.wait_dispatched()
            return store.get_max_offset("%DLQ%pg-dlq", 0) >= 1

        assert wait_for(in_dlq, 20)
        time.sleep(0.5)
        assert [m.reconsume_times for _, m in recorder.seen] == [0, 1, 2]
        with broker.store.get_messages("%DLQ%pg-dlq", 0, 0, 10) as found:
            (dead,) = found.decode()
        assert dead.body == b"poison" and dead.reconsume_times == 3
        assert dead.properties["RETRY_TOPIC"] == "Poison"
        assert broker.topics.get("%DLQ%pg-dlq") is not None
        consumer.shutdown()
    finally:
        st.stop()
