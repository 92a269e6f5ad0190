"""Sizes are checked before sending, on the body as it will be sent: compression is kept only
when it makes the body smaller, and a request over the remoting frame limit (16 MiB) is
refused with that limit named instead of being sent, dropped by the broker and retried."""

from __future__ import annotations

import os
import time

import pytest

from rocketq import Message, MessageValidationError, Producer, SendStatus

from ..conftest import wait_for

MiB = 1 << 20


def stored(st, topic):
    broker = st.brokers[0]
    assert broker.store.wait_dispatched()
    with broker.store.get_messages(topic, 0, 0, 100) as found:
        return found.decode(decompress=False)


def test_a_body_that_compression_would_grow_is_sent_as_it_is(tmp_path):
    from ..servers import ServerThread

    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        st.start_broker(maxMessageSize=1000)  # the broker's limit is the client's
        st.create_topic("Noise", 1)
        noise = os.urandom(1000)  # zlib makes random bytes longer, over the limit
        with Producer("pg", namesrv=st.namesrv, max_message_size=1000,
                      compress_over=100) as producer:
            assert producer.send(Message("Noise", noise)).status is SendStatus.SEND_OK
            assert producer.send(Message("Noise", b"a" * 1000)).status is SendStatus.SEND_OK
        first, second = stored(st, "Noise")
        assert not first.sysflag & 1 and first.body == noise
        assert second.sysflag & 1 and len(second.body) < 100  # compressible: compressed
    finally:
        st.stop()


def test_a_body_over_the_frame_limit_is_refused_before_sending(servers):
    servers.create_topic("Huge", 1)
    with Producer("pg", namesrv=servers.namesrv, max_message_size=64 * MiB,
                  compress_over=64 * MiB) as producer:
        began = time.monotonic()
        with pytest.raises(MessageValidationError, match=r"16777216-byte \(16 MiB\) frame limit"):
            producer.send(Message("Huge", bytes(17 * MiB)))
        with pytest.raises(MessageValidationError, match="16 MiB"):
            producer.send_oneway(Message("Huge", bytes(17 * MiB)))
        assert time.monotonic() - began < 5  # no connection dropped, no retries
        producer.send(Message("Huge", b"small"))  # the connection is still fine
    assert servers.brokers[0].stats.put_total == 1
    # The limit applies to the body as sent: one that compresses under it goes.
    with Producer("pg", namesrv=servers.namesrv, max_message_size=64 * MiB) as producer:
        assert producer.send(Message("Huge", bytes(17 * MiB))).status is SendStatus.SEND_OK
    assert wait_for(lambda: len(stored(servers, "Huge")) == 2)


def test_a_batch_over_the_frame_limit_is_refused_before_sending(servers):
    servers.create_topic("Huge", 1)
    with Producer("pg", namesrv=servers.namesrv, max_message_size=64 * MiB) as producer:
        began = time.monotonic()
        with pytest.raises(MessageValidationError, match=r"the batch is \d+ bytes.*16 MiB"):
            producer.send_batch([Message("Huge", bytes(4 * MiB)) for _ in range(5)])
        assert time.monotonic() - began < 5
        batch = producer.send_batch([Message("Huge", bytes(MiB)) for _ in range(3)])
        assert batch.status is SendStatus.SEND_OK
    assert servers.brokers[0].stats.put_total == 3
