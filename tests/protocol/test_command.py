"""Remoting frames: both header serializations, hostile input. Frames real clients sent are
tested in test_vectors.py."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketq.protocol.codes import RequestCode
from rocketq.protocol.command import (
    SERIALIZE_ROCKETMQ,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    decode_frame,
    encode,
)


def test_json_round_trip_and_string_ext_fields():
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                  {"queueId": 3, "commitOffset": -1, "flag": True, "no": None},
                                  b"\x00body")
    frame = encode(req)
    (out,) = FrameDecoder().feed(frame)
    assert out.code == 11 and out.opaque == req.opaque and out.body == b"\x00body"
    assert out.ext_fields == {"queueId": "3", "commitOffset": "-1", "flag": "true"}
    resp = out.response(0, {"nextBeginOffset": 5}, remark="FOUND")
    decoded = decode_frame(encode(resp)[4:])
    assert decoded.is_response and decoded.opaque == req.opaque
    assert decoded.ext_fields == {"nextBeginOffset": "5"} and decoded.remark == "FOUND"
    header = json.loads(encode(resp)[8:8 + (len(encode(resp)) - 8)])
    assert header["extFields"]["nextBeginOffset"] == "5"


def test_rocketmq_binary_header_round_trip():
    cmd = RemotingCommand(310, {"a": "pg", "b": "Topic", "e": 2}, b"xyz", remark="hi",
                          serialize_type=SERIALIZE_ROCKETMQ, language="JAVA")
    frame = encode(cmd)
    assert frame[4] == 1  # type byte
    (out,) = FrameDecoder().feed(frame)
    assert (out.code, out.language, out.remark, out.body) == (310, "JAVA", "hi", b"xyz")
    assert out.ext_fields == {"a": "pg", "b": "Topic", "e": "2"}


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 16 * 1024 * 1024 + 1) + b"\0" * 8,   # over the frame limit
    struct.pack(">i", -5) + b"\0" * 8,                     # negative length
    struct.pack(">i", 2) + b"\0\0",                        # shorter than its own header field
    struct.pack(">ii", 8, 100) + b"{}\0\0",                # header longer than the frame
    struct.pack(">ii", 7, 3) + b"{x}",                     # not JSON
    struct.pack(">ii", 6, 2) + b"[]",                      # JSON but not an object
    struct.pack(">ii", 6, (7 << 24) | 2) + b"{}",          # unknown serialize type
    struct.pack(">ii", 17, 13) + b'{"code":"x"}\n',        # code not an integer
])
def test_malformed_frames_raise_protocol_error(frame):
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(frame)


def test_truncated_frame_waits_for_more():
    frame = encode(RemotingCommand.request(34, {"a": "b"}, b"x" * 100))
    decoder = FrameDecoder()
    assert decoder.feed(frame[:50]) == []
    assert [c.code for c in decoder.feed(frame[50:] + frame)] == [34, 34]


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_the_decoder(data):
    try:
        FrameDecoder(max_frame=1 << 16).feed(data)
    except ProtocolError:
        pass


@settings(max_examples=200)
@given(st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=50), max_size=8),
       st.binary(max_size=200), st.sampled_from([0, 1]))
def test_any_command_round_trips(ext, body, serialize_type):
    cmd = RemotingCommand(12, ext, body, serialize_type=serialize_type)
    (out,) = FrameDecoder().feed(encode(cmd))
    expected = ext if serialize_type == 0 else {k: v for k, v in ext.items() if v}
    assert out.ext_fields == expected and out.body == body
