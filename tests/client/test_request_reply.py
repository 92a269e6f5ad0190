"""Request-reply: a producer's request answered by a consumer through the broker."""

from __future__ import annotations

import pytest

from rocketq import (
    ClientError,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
    create_reply,
)


def test_request_reply_round_trip(servers):
    servers.create_topic("Rpc", 2)
    responder = Producer("responder", namesrv=servers.namesrv).start()

    def serve(msgs):
        for m in msgs:
            responder.send(create_reply(m, b"pong:" + m.body))
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("rpc-server", namesrv=servers.namesrv, from_where="last")
    consumer.subscribe("Rpc")
    consumer.register(serve)
    consumer.start()
    try:
        with Producer("requester", namesrv=servers.namesrv) as requester:
            import time
            time.sleep(0.3)  # the server takes its queues
            for i in range(3):
                reply = requester.request(Message("Rpc", b"ping%d" % i), timeout=5)
                assert reply.body == b"pong:ping%d" % i
                assert reply.properties["MSG_TYPE"] == "reply"
                assert reply.topic == "DefaultCluster_REPLY_TOPIC"
            with pytest.raises(ClientError, match="no reply"):
                requester.request(Message("NobodyListens", b"?"), timeout=0.5)
        plain = ReceivedMessage("T", b"", 0, 0, 0, "b", {}, "", "", 0, 0, ("", 0), ("", 0), 0)
        with pytest.raises(ValueError, match="not a request"):
            create_reply(plain, b"no")
    finally:
        consumer.shutdown()
        responder.shutdown()
