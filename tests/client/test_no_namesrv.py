"""Consumers pointed at a NameServer address nothing listens on: they say so, loudly and
again with a growing interval, and ``poll`` raises rather than look like an empty topic."""

from __future__ import annotations

import logging
import re
import socket
import time

import pytest

from rocketq import ConsumeResult, PullConsumer, PushConsumer
from rocketq.client.errors import NameServerError

from ..conftest import wait_for


@pytest.fixture
def dead_namesrv() -> str:
    """An address on 127.0.0.1 nothing listens on (a port just bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def warnings_naming(caplog, addr: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.levelno == logging.WARNING and addr in r.getMessage()
            and "Trying again in" in r.getMessage()]


def test_poll_raises_a_name_server_error_naming_the_address(dead_namesrv):
    with PullConsumer("lonely-pull", namesrv=dead_namesrv) as consumer:
        consumer.subscribe("Orders")
        began = time.monotonic()
        with pytest.raises(NameServerError, match=re.escape(dead_namesrv)) as caught:
            consumer.poll(1.0)
        assert time.monotonic() - began < 5
        assert "no queue to read" in str(caught.value)


def test_a_push_consumer_warns_at_each_retry_with_a_growing_interval(dead_namesrv, caplog):
    caplog.set_level(logging.WARNING, logger="rocketq.client")
    with PushConsumer("lonely-push", namesrv=dead_namesrv) as consumer:
        consumer.subscribe("Orders")
        consumer.register(lambda messages: ConsumeResult.SUCCESS)
        assert wait_for(lambda: len(warnings_naming(caplog, dead_namesrv)) >= 4, timeout=20)
    records = warnings_naming(caplog, dead_namesrv)
    waits = [float(re.search(r"Trying again in (\d+) s", r.getMessage()).group(1))
             for r in records]
    assert waits[:4] == [1, 2, 4, 8]
    # Nothing woke the consumer between the third warning and the fourth: 4 s apart.
    assert records[3].created - records[2].created >= 3.5
