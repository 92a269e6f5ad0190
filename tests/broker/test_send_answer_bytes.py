"""A send's answer, byte for byte as it leaves the broker: RocketMQ clients parse the header,
so its fields, their order and their JSON form are held here, for a single send (answered
at once, or with others read together), a send whose UNIQ_KEY needs JSON escaping, and a
batch."""

from __future__ import annotations

import asyncio
import re

import orjson

from rocketq.protocol.codes import CURRENT_VERSION
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.command import FrameDecoder, RemotingCommand, encode
from rocketq.protocol.message import decode_offset_msg_id, encode_batch

from ..conftest import run_async
from .test_broker import send_v2

MSG_ID = re.compile(r"[0-9A-F]{32}")


def expected_header(opaque: int, msg_id: str, queue_id: int, queue_offset: int,
                    transaction_id: str) -> bytes:
    """The header a SUCCESS answer has, written out field by field in RocketMQ's order."""
    return (b'{"code":0,"extFields":{"msgId":' + orjson.dumps(msg_id)
            + b',"queueId":"%d","queueOffset":"%d","transactionId":' % (queue_id, queue_offset)
            + orjson.dumps(transaction_id)
            + b',"MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,"language":"PYTHON",'
            + b'"opaque":%d,"serializeTypeCurrentRPC":"JSON","version":%d}'
            % (opaque, CURRENT_VERSION))


async def raw_answers(address: str, frames: list[bytes], count: int) -> list[bytes]:
    """Write ``frames`` in one write; the raw frames of the first ``count`` answers."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"".join(frames))
        data = b""
        out: list[bytes] = []
        while len(out) < count:
            data += await asyncio.wait_for(reader.read(1 << 16), 5)
            while len(data) >= 4 and len(data) - 4 >= (n := int.from_bytes(data[:4], "big")):
                out.append(data[:4 + n])
                data = data[4 + n:]
        return out
    finally:
        writer.close()


def header_of(frame: bytes) -> bytes:
    return frame[8:8 + int.from_bytes(frame[4:8], "big")]


def test_single_and_batch_answers_byte_for_byte(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        create = RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": "Bytes", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6})
        assert (await raw_answers(broker.address, [encode(create)], 1))[0]

        # One send alone in its read, then three read together (appended as one).
        alone = send_v2("Bytes", b"a", 1, {"UNIQ_KEY": "U0", "WAIT": "true"})
        [frame] = await raw_answers(broker.address, [encode(alone)], 1)
        together = [send_v2("Bytes", b"t%d" % i, 1, {"UNIQ_KEY": f"U{i + 1}"})
                    for i in range(3)]
        frames = await raw_answers(broker.address, [encode(c) for c in together], 3)
        # A UNIQ_KEY that JSON must escape, and one past ASCII, come back as sent.
        odd = 'q"uote\\back\tslash-\u00e9\u4e2d'
        weird = send_v2("Bytes", b"w", 0, {"UNIQ_KEY": odd})
        [odd_frame] = await raw_answers(broker.address, [encode(weird)], 1)

        offsets = []
        for n, (cmd, answer) in enumerate(zip([alone, *together], [frame, *frames],
                                              strict=True)):
            msg_id = FrameDecoder().feed(answer)[0].ext_fields["msgId"]
            assert MSG_ID.fullmatch(msg_id)
            offsets.append(decode_offset_msg_id(msg_id)[2])
            assert header_of(answer) == expected_header(cmd.opaque, msg_id, 1, n, f"U{n}")
            assert answer[8 + len(header_of(answer)):] == b""  # no body
        assert offsets == sorted(offsets) and len(set(offsets)) == 4
        msg_id = FrameDecoder().feed(odd_frame)[0].ext_fields["msgId"]
        assert header_of(odd_frame) == expected_header(weird.opaque, msg_id, 0, 0, odd)

        # A batch answers its elements' ids, comma-separated, and its first queue offset.
        body = encode_batch([(0, b"b%d" % i, f"UNIQ_KEY\x01B{i}\x02") for i in range(3)])
        batch = send_v2("Bytes", body, 0, {"UNIQ_KEY": "BATCH"})
        batch.code = RC.SEND_BATCH_MESSAGE
        [batch_frame] = await raw_answers(broker.address, [encode(batch)], 1)
        ids = FrameDecoder().feed(batch_frame)[0].ext_fields["msgId"]
        assert [MSG_ID.fullmatch(i) is not None for i in ids.split(",")] == [True] * 3
        assert header_of(batch_frame) == expected_header(batch.opaque, ids, 0, 1, "BATCH")

    run_async(main())
