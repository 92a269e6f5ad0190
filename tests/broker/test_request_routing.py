"""The broker's one door for requests (``broker/processors.py``): each request code goes to
the part that serves it, an unknown code is refused, and nothing is served before the store
is open."""

from __future__ import annotations

from rocketq.broker import Broker
from rocketq.broker.config import BrokerConfig
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.store import MessageStoreConfig


def test_a_broker_not_started_refuses_unknown_codes_and_is_busy_for_known_ones(tmp_path):
    broker = Broker(BrokerConfig(brokerIP1="127.0.0.1", listenPort=0),
                    MessageStoreConfig(storePathRootDir=str(tmp_path)))
    try:
        unknown = broker.handle(None, RemotingCommand.request(9999))  # type: ignore[arg-type]
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "9999" in (unknown.remark or "")
        busy = broker.handle(None, RemotingCommand.request(  # type: ignore[arg-type]
            RequestCode.GET_ALL_DELAY_OFFSET))
        assert busy.code == ResponseCode.SYSTEM_BUSY
        assert broker.store is None
    finally:
        broker.store_lock.release()  # type: ignore[union-attr]


def test_every_part_is_reached_by_its_request_codes(tmp_path):
    broker = Broker(BrokerConfig(brokerIP1="127.0.0.1", listenPort=0),
                    MessageStoreConfig(storePathRootDir=str(tmp_path)))
    try:
        handlers = broker._handlers
        for part in (broker.roles, broker.client_requests, broker.send_back,
                     broker.offset_requests, broker.message_queries, broker.admin,
                     broker.consumer_calls, broker.sinks, broker.pop_requests,
                     broker.acl_requests):
            assert set(part.handlers()) <= set(handlers), part
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                     RequestCode.SEND_BATCH_MESSAGE, RequestCode.PULL_MESSAGE,
                     RequestCode.LITE_PULL_MESSAGE, RequestCode.END_TRANSACTION,
                     RequestCode.GET_ALL_DELAY_OFFSET):
            assert code in handlers, code
    finally:
        broker.store_lock.release()  # type: ignore[union-attr]
