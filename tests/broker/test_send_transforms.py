"""The send path parses a message's properties at most once, and only when the message must
be transformed (delayed, timed, half, dead-lettered); the transforms edit the parsed form."""

from __future__ import annotations

import rocketq.broker.send.transforms as send_module
from rocketq import Message, Producer
from rocketq.protocol import SCHEDULE_TOPIC, TIMER_TOPIC, Property

from ..servers import ServerThread


def test_each_send_parses_its_properties_at_most_once(tmp_path, monkeypatch):
    parsed = []
    real = send_module.decode_properties
    monkeypatch.setattr(send_module, "decode_properties",
                        lambda raw: parsed.append(raw) or real(raw))
    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        broker = st.start_broker()
        st.create_topic("Shaped", 1)
        with Producer("pg", namesrv=st.namesrv) as producer:
            producer.send(Message("Shaped", b"plain", tags="a"))
            assert parsed == []  # a plain send is stored as its properties came
            producer.send(Message("Shaped", b"delayed", delay_level=2))
            assert len(parsed) == 1
            producer.send(Message("Shaped", b"timed", properties={"TIMER_DELAY_MS": "60000"}))
            assert len(parsed) == 2
            producer.send(Message("Shaped", b"both", delay_level=1,
                                  properties={"TIMER_DELAY_MS": "60000"}))
            assert len(parsed) == 3
        store = broker.store
        store.wait_dispatched()
        delayed = store.get_messages(SCHEDULE_TOPIC, 1, 0, 8).decode()
        assert [m.body for m in delayed] == [b"delayed"]
        assert delayed[0].properties[Property.REAL_TOPIC] == "Shaped"
        assert delayed[0].properties[Property.DELAY] == "2"
        # A delay level wins over timer properties (RocketMQ drops those): one wait, not two.
        both = store.get_messages(SCHEDULE_TOPIC, 0, 0, 8).decode()
        assert [m.body for m in both] == [b"both"]
        assert both[0].properties[Property.REAL_TOPIC] == "Shaped"
        assert Property.TIMER_DELAY_MS not in both[0].properties
        timed = store.get_messages(TIMER_TOPIC, 0, 0, 8).decode()
        assert [m.body for m in timed] == [b"timed"]
        assert timed[0].properties[Property.REAL_TOPIC] == "Shaped"
        assert int(timed[0].properties[Property.TIMER_OUT_MS]) > timed[0].store_timestamp + 50_000
    finally:
        st.stop()
