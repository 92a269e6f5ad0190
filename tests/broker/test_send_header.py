"""Send headers whose integers do not fit their Java type are refused before the store sees
them, with a remark naming the field, while the sends around them in the same read are stored
in the order they came."""

from __future__ import annotations

import asyncio
import logging
import time

from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand, encode
from rocketq.protocol.message import decode_records

from ..conftest import run_async
from ..raw_peer import RawPeer
from .test_broker import pull


def v2(body: bytes, **bad: str) -> RemotingCommand:
    ext = {"a": "pg", "b": "Checked", "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": "TAGS\x01t", "j": "0",
           "k": "false", "m": "false"}
    ext.update(bad)
    return RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, body)


def v1(body: bytes, **bad: str) -> RemotingCommand:
    ext = {"producerGroup": "pg", "topic": "Checked", "defaultTopic": "TBW102",
           "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
           "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": "TAGS\x01t\x02", "reconsumeTimes": "0"}
    ext.update(bad)
    return RemotingCommand.request(RC.SEND_MESSAGE, ext, body)


BAD = [
    (v2(b"x", h="99999999999"), "flag (h)"),
    (v2(b"x", g="99999999999999999999"), "bornTimestamp (g)"),
    (v2(b"x", e="4294967296"), "queueId (e)"),
    (v2(b"x", j="-2147483649"), "reconsumeTimes (j)"),
    (v2(b"x", f="1e3"), "sysFlag (f)"),
    (v1(b"x", flag="2147483648"), "flag"),
    (v1(b"x", sysFlag="9" * 30), "sysFlag"),
]


def test_out_of_range_header_integers(cluster, caplog):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            create = RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {
                "topic": "Checked", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6})
            peer.write(encode(create))
            assert (await peer.answer(create.opaque)).code == 0
            # good, bad, good, bad, ... in one write: they reach the broker in one read.
            good = [v2(b"g%d" % i) for i in range(len(BAD) + 1)]
            frames = [encode(good[0])]
            for i, (cmd, _) in enumerate(BAD):
                frames += [encode(cmd), encode(good[i + 1])]
            peer.write(*frames)
            for cmd, field in BAD:
                answer = await peer.answer(cmd.opaque)
                assert answer.code == ResponseCode.INVALID_PARAMETER, answer
                assert f"header field {field} " in answer.remark, answer.remark
            for cmd in good:
                answer = await peer.answer(cmd.opaque)
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            await asyncio.to_thread(broker.store.wait_dispatched)
            peer.write(encode(request := pull("Checked", 0, 0)))
            answer = await peer.answer(request.opaque)
            return [m.body for m in decode_records(answer.body)]
        finally:
            await peer.close()

    with caplog.at_level(logging.ERROR, logger="rocketq"):
        bodies = run_async(main())
    assert bodies == [b"g%d" % i for i in range(len(BAD) + 1)]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_value_the_record_cannot_hold_is_answered_not_raised():
    import struct

    from rocketq.broker.send import SendProcessor
    from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode

    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"})
    for exc in (struct.error("argument out of range"), OverflowError("too big"),
                ValueError("bad")):
        answer = SendProcessor._store_error(None, cmd, exc)  # type: ignore[arg-type]
        assert answer.code == ResponseCode.MESSAGE_ILLEGAL
        assert str(exc) in answer.remark
    try:
        SendProcessor._store_error(None, cmd, KeyError("a bug"))  # type: ignore[arg-type]
    except KeyError:
        pass  # a bug in the broker is still raised, to be logged with its traceback
    else:
        raise AssertionError("a KeyError was swallowed")
