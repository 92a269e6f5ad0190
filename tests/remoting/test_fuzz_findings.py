"""Requests the network fuzzer (benchmarks/fuzz_servers.py) found to break a server, each
sent as the literal frame it sent, to a real server on 127.0.0.1: every one is answered with
an error (no traceback in the log), and the server goes on serving what came after it."""

from __future__ import annotations

import asyncio
import logging
import struct
import time

import orjson

from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.protocol.command import encode
from rocketq.remoting import RemotingClient

from ..conftest import run_async
from ..controller.conftest import start_controllers
from ..raw_peer import RawPeer


def frame(code: int, fields: dict[str, str], body: bytes = b"", opaque: int = 7) -> bytes:
    """A JSON-header request frame, written out byte for byte."""
    header = orjson.dumps({"code": code, "extFields": fields, "flag": 0, "language": "JAVA",
                           "opaque": opaque, "serializeTypeCurrentRPC": "JSON",
                           "version": 479})
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def no_tracebacks(caplog) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]


async def ask(peer: RawPeer, data: bytes, opaque: int = 7) -> RemotingCommand:
    peer.write(data)
    return await peer.answer(opaque)


def test_a_send_flagged_with_ipv6_hosts_is_stored_readable(cluster, caplog):
    """sysFlag 0x30 (IPv6 born and store hosts) on a send over IPv4 used to be stored as
    such: the record could not be walked, the dispatcher stopped there for good and every
    queue's later messages could no longer be pulled."""
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            send = {"a": "fuzz-g1", "b": "TBW102", "c": "TBW102", "d": "4", "e": "0",
                    "f": "48", "g": "0", "h": "0", "i": "", "j": "0", "k": "false"}
            r = await ask(peer, frame(RequestCode.SEND_MESSAGE_V2, send, b"poison"))
            assert r.code == ResponseCode.SUCCESS, r.remark
            send["f"], send["e"] = "0", "1"
            r = await ask(peer, frame(RequestCode.SEND_MESSAGE_V2, send, b"after", 8), 8)
            assert r.code == ResponseCode.SUCCESS, r.remark
            for queue_id, body in (("0", b"poison"), ("1", b"after")):
                pull = {"consumerGroup": "g", "topic": "TBW102", "queueId": queue_id,
                        "queueOffset": "0", "maxMsgNums": "8", "sysFlag": "4",
                        "commitOffset": "0", "suspendTimeoutMillis": "0",
                        "subscription": "*", "subVersion": "0"}
                for _ in range(50):  # dispatched just after the answer
                    r = await ask(peer, frame(RequestCode.PULL_MESSAGE, pull, opaque=9), 9)
                    if r.code == ResponseCode.SUCCESS:
                        break
                    await asyncio.sleep(0.05)
                assert r.code == ResponseCode.SUCCESS, (queue_id, r.code, r.remark)
                assert body in r.body
        finally:
            await peer.close()
            await cluster.stop()

    run_async(main())
    no_tracebacks(caplog)


def test_hostile_broker_requests_are_refused_and_the_broker_serves_on(cluster, caplog):
    """Numbers past Java's long (kept, they broke GET_ALL_CONSUMER_OFFSET and the consumer
    connection list for good), heartbeat and lock bodies of the wrong shape, JSON nested past
    the recursion limit."""
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        huge = "99999999999999999999999999999"
        try:
            hostile = [
                (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "fuzz-g1", "topic":
                                                      "TBW102", "queueId": "0",
                                                      "commitOffset": huge}, b""),
                (RequestCode.HEART_BEAT, {}, orjson.dumps({
                    "clientID": "fuzz", "producerDataSet": [], "consumerDataSet": [{
                        "groupName": "fuzz-g1", "consumeType": "CONSUME_PASSIVELY",
                        "messageModel": "CLUSTERING", "subscriptionDataSet": [{
                            "topic": "TBW102", "subString": "*", "expressionType": 5,
                            "subVersion": 1}]}]}).replace(b'"subVersion":1',
                                                          b'"subVersion":' + huge.encode())),
                (RequestCode.HEART_BEAT, {}, b'{"producerDataSet": ["x"]}'),
                (RequestCode.HEART_BEAT, {}, b'{"consumerDataSet": [{"groupName": "g", '
                                             b'"subscriptionDataSet": "x"}]}'),
                (RequestCode.HEART_BEAT, {}, b"[" * 5000 + b"]" * 5000),
                (RequestCode.LOCK_BATCH_MQ, {}, b'{"consumerGroup": "g", "mqSet": '
                                                b'[{"topic": "T", "queueId": "x"}]}'),
                (RequestCode.UNLOCK_BATCH_MQ, {}, b'{"consumerGroup": "g", "mqSet": [1]}'),
                (RequestCode.LOCK_BATCH_MQ, {}, b'"x"'),
                (RequestCode.CHECK_CLIENT_CONFIG, {}, b"[]"),
                (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                 b'{"a":' * 2000 + b"1" + b"}" * 2000),
            ]
            for n, (code, fields, body) in enumerate(hostile, 100):
                r = await ask(peer, frame(code, fields, body, n), n)
                assert r.code != ResponseCode.SUCCESS or code in (
                    RequestCode.HEART_BEAT, RequestCode.CHECK_CLIENT_CONFIG), (code, r.remark)
            # What used to fail for good afterwards.
            for n, code in enumerate((RequestCode.GET_ALL_CONSUMER_OFFSET,
                                      RequestCode.GET_CONSUMER_CONNECTION_LIST), 200):
                r = await ask(peer, frame(code, {"consumerGroup": "fuzz-g1"}, opaque=n), n)
                assert r.code == ResponseCode.SUCCESS, (code, r.remark)
        finally:
            await peer.close()
            await cluster.stop()

    run_async(main())
    no_tracebacks(caplog)


def test_namesrv_refuses_a_registration_with_numbers_of_the_wrong_type(cluster, caplog):
    async def main():
        ns = await cluster.start_namesrv()
        peer = await RawPeer.open(ns.address)
        try:
            body = (b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": {"topicName":'
                    b' "T", "readQueueNums": "x", "writeQueueNums": 4, "perm": 6}}}}')
            r = await ask(peer, frame(RequestCode.REGISTER_BROKER, {
                "brokerName": "fuzz-broker-1", "brokerAddr": "127.0.0.1:1", "clusterName":
                "FuzzCluster", "brokerId": "0", "haServerAddr": "x"}, body))
            assert r.code == ResponseCode.SYSTEM_ERROR, r.remark
            r = await ask(peer, frame(RequestCode.GET_BROKER_CLUSTER_INFO, {}, opaque=8), 8)
            assert r.code == ResponseCode.SUCCESS
        finally:
            await peer.close()
            await cluster.stop()

    run_async(main())
    no_tracebacks(caplog)


def test_controller_refuses_a_sync_state_query_that_is_not_a_list_of_names(caplog):
    async def main():
        (node,) = await start_controllers(1)
        client = RemotingClient()
        try:
            peer = await RawPeer.open(node.address)
            for n, body in enumerate((b'[{"a": 1}]', b"5", b'{"x": 1}'), 10):
                r = await ask(peer, frame(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {},
                                          body, n), n)
                assert r.code == ResponseCode.CONTROLLER_INVALID_REQUEST, (body, r.remark)
            await peer.close()
            r = await client.invoke(node.address, RemotingCommand.request(
                RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["broker-a"]'), 5)
            assert r.code == ResponseCode.SUCCESS
        finally:
            await client.close()
            await node.stop()

    run_async(main())
    no_tracebacks(caplog)


def test_encode_of_the_fuzz_frames_is_what_the_client_sends():
    """The literal frame builder above writes what ``encode`` writes for the same header."""
    cmd = RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=7, language="JAVA")
    cmd.version = 479
    assert len(frame(RequestCode.GET_BROKER_CLUSTER_INFO, {})) == len(encode(cmd))


def test_a_table_saved_from_two_threads_at_once_stays_whole(tmp_path):
    """The broker saves a table from its loop (a deleted subscription group, a slave's copy)
    while housekeeping saves it on a thread: with one shared temporary file, one rename took
    the other's file away (ENOENT) or wrote into the file already renamed."""
    import threading

    from rocketq.broker.files import write_atomically

    path = str(tmp_path / "config" / "consumerOffset.json")
    payloads = [b"a" * 100_000, b"b" * 10]
    errors: list[BaseException] = []

    def save(data: bytes) -> None:
        try:
            for _ in range(200):
                write_atomically(path, data)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with open(path, "rb") as fh:
        assert fh.read() in payloads
    assert sorted(p.name for p in (tmp_path / "config").iterdir()) == ["consumerOffset.json"]


def test_deleting_a_topic_while_the_housekeeper_flushes_its_queues(tmp_path):
    """DELETE_TOPIC_IN_BROKER closes the topic's ConsumeQueue files on the broker's loop;
    the housekeeper flushing them at that moment fsynced a closed descriptor (EBADF) and
    logged a traceback."""
    import threading

    from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage

    store = MessageStore(MessageStoreConfig(
        storePathRootDir=str(tmp_path), mappedFileSizeCommitLog=4 << 20,
        mappedFileSizeConsumeQueue=6000))
    errors: list[BaseException] = []
    stop = threading.Event()

    def housekeeper() -> None:
        while not stop.is_set():
            try:
                store._flush_logics()
            except BaseException as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=housekeeper)
    thread.start()
    try:
        for _ in range(200):
            for queue_id in range(4):
                store.put_messages([StoreMessage("Doomed", b"x" * 64, queue_id)])
            time.sleep(0.002)  # dispatched: the queues' files exist
            store.delete_topics(["Doomed"])
            if errors:
                break
    finally:
        stop.set()
        thread.join()
        store.close()
    assert not errors, errors
