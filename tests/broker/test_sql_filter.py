"""SQL92 filtering on the broker, end to end."""

from __future__ import annotations

import threading
import time

import orjson

from rocketq import ConsumeResult, Message, MessageSelector, Producer, PushConsumer
from rocketq.protocol.codes import RequestCode
from rocketq.protocol.command import RemotingCommand
from rocketq.protocol.sql92 import compile_selector
from rocketq.remoting import RemotingClient

from ..conftest import wait_for

ORDERS = [{"region": "eu", "amount": "150"}, {"region": "eu", "amount": "50"},
          {"region": "us", "amount": "500"}, {"amount": "1000"}, {"region": "eu"}]


def test_sql92_subscription_delivers_exactly_the_matching_messages(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        st.start_broker(enablePropertyFilter="true")
        st.create_topic("Orders", 2)
        expression = "region = 'eu' AND amount > 100 OR amount BETWEEN 400 AND 600"
        got = []
        lock = threading.Lock()

        def listener(msgs):
            with lock:
                got.extend(msgs)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("sqlg", namesrv=st.namesrv, from_where="first")
        consumer.subscribe("Orders", MessageSelector.by_sql(expression))
        consumer.register(listener)
        consumer.start()
        with Producer("pg", namesrv=st.namesrv) as producer:
            for i, props in enumerate(ORDERS * 4):
                producer.send(Message("Orders", b"%d" % i, properties=props))
        selector = compile_selector(expression)
        expected = sorted(b"%d" % i for i, p in enumerate(ORDERS * 4) if selector(p))
        assert len(expected) == 8
        assert wait_for(lambda: len(got) >= len(expected), 10)
        time.sleep(0.3)
        assert sorted(m.body for m in got) == expected
        consumer.shutdown()

        async def raw_pull(expr):
            c = RemotingClient()
            try:
                return await c.invoke(st.brokers[0].address, RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, {
                        "consumerGroup": "raw", "topic": "Orders", "queueId": 0,
                        "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                        "suspendTimeoutMillis": 0, "subscription": expr, "subVersion": 0,
                        "expressionType": "SQL92"}))
            finally:
                await c.close()

        r = st.call(raw_pull("region = "))
        assert r.code == 23 and "SQL92" in r.remark  # SUBSCRIPTION_PARSE_FAILED

        async def check(expr):
            c = RemotingClient()
            try:
                return await c.invoke(st.brokers[0].address, RemotingCommand.request(
                    RequestCode.CHECK_CLIENT_CONFIG, None, orjson.dumps({
                        "group": "g", "subscriptionData": {
                            "topic": "Orders", "subString": expr, "expressionType": "SQL92"}})))
            finally:
                await c.close()

        assert st.call(check("a > 1")).code == 0
        assert st.call(check("a >")).code == 23
    finally:
        st.stop()


def test_sql92_without_property_filter_is_refused(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        broker = st.start_broker()
        st.create_topic("Orders", 1)

        async def go():
            c = RemotingClient()
            try:
                return await c.invoke(broker.address, RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, {
                        "consumerGroup": "raw", "topic": "Orders", "queueId": 0,
                        "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                        "suspendTimeoutMillis": 0, "subscription": "a = 1", "subVersion": 0,
                        "expressionType": "SQL92"}))
            finally:
                await c.close()

        r = st.call(go())
        assert r.code == 1 and "SQL92" in r.remark
    finally:
        st.stop()


