"""Delivery at an arbitrary time: TIMER_DELAY_MS / TIMER_DELAY_SEC / TIMER_DELIVER_MS."""

from __future__ import annotations

import threading
import time

import pytest

from rocketq import BrokerError, ConsumeResult, Message, Producer, PushConsumer

from ..conftest import wait_for


def start(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    st.start_namesrv()
    st.start_broker()
    st.create_topic("Timed", 2)
    return st


def consume(st, group):
    seen = []
    lock = threading.Lock()

    def listener(msgs):
        with lock:
            seen.extend((time.time(), m) for m in msgs)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv=st.namesrv, from_where="first")
    consumer.subscribe("Timed")
    consumer.register(listener)
    consumer.start()
    return consumer, seen


def test_arbitrary_delays_are_not_early_and_not_late(tmp_path):
    st = start(tmp_path)
    try:
        consumer, seen = consume(st, "tg")
        with Producer("pg", namesrv=st.namesrv) as producer:
            began = time.time()
            now_ms = int(began * 1000)
            producer.send(Message("Timed", b"ms", properties={"TIMER_DELAY_MS": "1300"}))
            producer.send(Message("Timed", b"sec", properties={"TIMER_DELAY_SEC": "2"}))
            producer.send(Message("Timed", b"at",
                                  properties={"TIMER_DELIVER_MS": str(now_ms + 2600)}))
            producer.send(Message("Timed", b"now"))
        due = {b"now": 0, b"ms": 1.3, b"sec": 2.0, b"at": 2.6}
        assert wait_for(lambda: len(seen) >= 4, 10)
        for t, m in seen:
            assert t >= began + due[m.body] - 0.05, m.body
            assert t <= began + due[m.body] + 1.0, (m.body, t - began)
            assert "TIMER_OUT_MS" not in m.properties and m.topic == "Timed"
        consumer.shutdown()
    finally:
        st.stop()


def test_timer_messages_survive_a_clean_restart_exactly_once(tmp_path):
    st = start(tmp_path)
    try:
        with Producer("pg", namesrv=st.namesrv) as producer:
            began = time.time()
            producer.send(Message("Timed", b"early", properties={"TIMER_DELAY_MS": "500"}))
            producer.send(Message("Timed", b"late", properties={"TIMER_DELAY_MS": "2500"}))
        time.sleep(1.0)  # "early" is delivered before the restart
        broker = st.brokers[0]
        port = broker.config.listenPort
        st.stop_broker(broker)
        st.start_broker("broker-a", listenPort=port)
        consumer, seen = consume(st, "tr")
        assert wait_for(lambda: len(seen) >= 2, 10)
        time.sleep(0.5)
        assert sorted(m.body for _, m in seen) == [b"early", b"late"]
        late = next(t for t, m in seen if m.body == b"late")
        assert late >= began + 2.5 - 0.05
        consumer.shutdown()
    finally:
        st.stop()


def test_too_long_or_bad_timers_are_refused(tmp_path):
    st = start(tmp_path)
    try:
        with Producer("pg", namesrv=st.namesrv) as producer:
            with pytest.raises(BrokerError, match="at most"):
                producer.send(Message("Timed", b"x",
                                      properties={"TIMER_DELAY_SEC": str(4 * 24 * 3600)}))
            with pytest.raises(BrokerError, match="integers"):
                producer.send(Message("Timed", b"x", properties={"TIMER_DELAY_MS": "soon"}))
    finally:
        st.stop()
