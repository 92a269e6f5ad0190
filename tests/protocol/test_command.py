"""Remoting frames: real client captures, both header serializations, hostile input."""

from __future__ import annotations

import json
import pathlib
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
from rocketq.protocol.message import decode_properties

CAPTURES = pathlib.Path(__file__).resolve().parents[3] / "shared" / "docs" / "captures"


def capture_frames():
    frames = []
    for name in ("frames.jsonl", "frames2.jsonl", "frames3.jsonl"):
        path = CAPTURES / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "body" not in row:
                continue  # frames the test server sent, not the client
            header = row["headerRaw"].encode()
            body = row["body"].encode("latin-1")
            frame = struct.pack(">ii", 4 + len(header) + len(body),
                                (row["serType"] << 24) | len(header)) + header + body
            frames.append((name, row, frame))
    return frames


FRAMES = capture_frames()


@pytest.mark.skipif(not FRAMES, reason="captures not found beside the repository")
def test_every_captured_frame_decodes():
    assert len(FRAMES) >= 400
    decoder = FrameDecoder()
    codes = set()
    for name, row, frame in FRAMES:
        # Fed in awkward pieces, as TCP may deliver it.
        out = []
        for i in range(0, len(frame), 7):
            out.extend(decoder.feed(frame[i:i + 7]))
        assert len(out) == 1, name
        cmd = out[0]
        assert cmd.body == row["body"].encode("latin-1")
        assert cmd.language == "CPP" and cmd.version == 63
        assert all(isinstance(v, str) for v in cmd.ext_fields.values())
        codes.add(cmd.code)
    assert decoder.buffered == 0
    assert {10, 11, 14, 15, 34, 35, 36, 37, 38, 105} <= codes


@pytest.mark.skipif(not FRAMES, reason="captures not found beside the repository")
def test_captured_send_header_values():
    send = next(decode_frame(f[4:]) for _, _, f in FRAMES if b'"code":10,' in f)
    # C++ mixes JSON numbers and strings in extFields; both come out as strings.
    assert send.ext_fields["queueId"] == "0" and send.ext_fields["reconsumeTimes"] == "0"
    assert send.int_field("defaultTopicQueueNums") == 4
    assert send.bool_field("batch") is False
    props = decode_properties(send.ext_fields["properties"])
    assert props["TAGS"] == "TagA" and props["KEYS"] == "KEY1 KEY2"


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
