"""Frames real clients sent (``vectors.py``): decoded field by field, then encoded back."""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from rocketq.protocol.command import FrameDecoder, RemotingCommand, decode_frame, encode
from rocketq.protocol.message import (
    SysFlag,
    decode_properties,
    encode_batch,
    encode_properties,
    plain_body,
    split_batch,
)

from . import vectors as v

CPP_AUTH = ("AccessKey", "OnsChannel", "Signature")


def decode(frame: bytes) -> RemotingCommand:
    """The one command in ``frame``, which must be exactly one whole frame."""
    decoder = FrameDecoder()
    (cmd,) = decoder.feed(frame)
    assert decoder.buffered == 0
    return cmd


def fields(cmd: RemotingCommand) -> tuple:
    return (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version, cmd.remark,
            cmd.serialize_type, cmd.ext_fields, cmd.body)


class Expected(NamedTuple):
    name: str
    code: int
    opaque: int
    flag: int
    ext: dict[str, str]
    body: bytes | dict | None = b""  # dict: JSON that loads to it; None: tested on its own

    @property
    def frame(self) -> bytes:
        return getattr(v, self.name)


def cpp_send(**ext: str) -> dict[str, str]:
    """extFields of a C++ SEND_MESSAGE: the fields every send shares, then ``ext``."""
    return {"batch": "0", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "flag": "0",
            "queueId": "0", "reconsumeTimes": "0", "sysFlag": "0", "topic": "TopicTest",
            "unitMode": "0", **ext}


def java_send(**ext: str) -> dict[str, str]:
    """extFields of a Java SEND_MESSAGE_V2 (short keys), in the order the client writes them."""
    out = {"a": "CPG_P", "b": "CT_P", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "",
           "h": "0", "i": "", "j": "0", "k": "false", "m": "false", "n": "broker-a"}
    out.update(ext)
    return out


CPP_EXPECTED = [
    Expected("CPP_ROUTE_QUERY", 105, 0, 0, {"topic": "TopicTest"}),
    Expected("CPP_SEND_SYNC", 10, 1, 0, cpp_send(
        bornTimestamp="1795358562618", producerGroup="PG_TEST",
        properties="KEYS\x01KEY1 KEY2\x02TAGS\x01TagA\x02"
                   "UNIQ_KEY\x010100007F000066360000BAFBAA740100\x02WAIT\x01true\x02"
                   "userprop\x01v1\x02"), b"hello world"),
    Expected("CPP_SEND_COMPRESSED", 10, 2, 0, cpp_send(
        bornTimestamp="1795358562619", producerGroup="PG_TEST", queueId="1", sysFlag="1",
        properties="TAGS\x01TagB\x02UNIQ_KEY\x010100007F000066360000BBFBAA740200\x02"
                   "WAIT\x01true\x02"),
        b"x^\xed\xc11\x01\x00\x00\x00\xc2\xa0\xda\x8bo\n?\xa0\x00\x00\x00\x00\x80\xb7\x01"
        b"\x14\x16(H"),
    Expected("CPP_SEND_ONEWAY", 10, 3, 0, cpp_send(
        bornTimestamp="1795358562620", producerGroup="PG_TEST", queueId="2",
        properties="TAGS\x01TagA\x02UNIQ_KEY\x010100007F000066360000BCFBAA740300\x02"
                   "WAIT\x01true\x02"), b"oneway"),
    Expected("CPP_SEND_BATCH", 10, 4, 0, cpp_send(
        batch="1", bornTimestamp="1795358562621", producerGroup="PG_TEST", queueId="3",
        properties="WAIT\x01true\x02"),
        b"\x00\x00\x00L\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02b1"
        b"\x004UNIQ_KEY\x010100007F000066360000BDFBAA740400\x02WAIT\x01true\x02"
        b"\x00\x00\x00L\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02b2"
        b"\x004UNIQ_KEY\x010100007F000066360000BDFBAA740500\x02WAIT\x01true\x02"),
    Expected("CPP_HEARTBEAT_CONSUMER", 34, 7, 0, {}, {
        "clientID": "17447-127.0.0.1@DEFAULT",
        "consumerDataSet": [{
            "consumeFromWhere": 0, "consumeType": 1, "groupName": "CG_TEST", "messageModel": 1,
            "subscriptionDataSet": [
                {"subString": "*", "subVersion": "1795358563649", "topic": "%RETRY%CG_TEST"},
                {"codeSet": [0, 0], "subString": "TagA || TagB", "subVersion": "1795358563648",
                 "tagsSet": ["TagA", "TagB"], "topic": "TopicTest"}]}],
        "producerDataSet": [{"groupName": "PG_TEST"}]}),
    Expected("CPP_CONSUMER_LIST", 38, 8, 0, {"consumerGroup": "CG_TEST"}),
    Expected("CPP_QUERY_OFFSET", 14, 9, 0,
             {"consumerGroup": "CG_TEST", "queueId": "0", "topic": "%RETRY%CG_TEST"}),
    Expected("CPP_PULL_FIRST", 11, 35, 0, {
        "commitOffset": "0", "consumerGroup": "CG_TEST", "maxMsgNums": "32", "queueId": "0",
        "queueOffset": "0", "subVersion": "1795358563648", "subscription": "TagA || TagB",
        "suspendTimeoutMillis": "15000", "sysFlag": "6", "topic": "TopicTest"}),
    Expected("CPP_PULL_COMMIT", 11, 43, 0, {
        "commitOffset": "1", "consumerGroup": "CG_TEST", "maxMsgNums": "32", "queueId": "2",
        "queueOffset": "1", "subVersion": "1795358563648", "subscription": "TagA || TagB",
        "suspendTimeoutMillis": "15000", "sysFlag": "7", "topic": "TopicTest"}),
    Expected("CPP_SEND_HALF", 10, 1, 0, cpp_send(
        bornTimestamp="1795358780513", producerGroup="PG_TX", sysFlag="4", topic="TopicTx",
        properties="PGROUP\x01PG_TX\x02TAGS\x01T\x02TRAN_MSG\x01true\x02"
                   "UNIQ_KEY\x010100007F0000063B0000E14EAE740100\x02WAIT\x01true\x02"),
        b"tx-commit"),
    Expected("CPP_END_TRANSACTION_COMMIT", 37, 2, 0, {
        "commitLogOffset": "0", "commitOrRollback": "8", "fromTransactionCheck": "0",
        "msgId": "0100007F0000063B0000E14EAE740100", "producerGroup": "PG_TX",
        "tranStateTableOffset": "0", "transactionId": ""}),
    Expected("CPP_END_TRANSACTION_UNKNOWN", 37, 4, 0, {
        "commitLogOffset": "193", "commitOrRollback": "0", "fromTransactionCheck": "0",
        "msgId": "0100007F0000063B0000E24EAE740200", "producerGroup": "PG_TX",
        "tranStateTableOffset": "0", "transactionId": ""}),
    Expected("CPP_HEARTBEAT_PRODUCER", 34, 5, 0, {}, {
        "clientID": "22876-127.0.0.1@DEFAULT", "producerDataSet": [{"groupName": "PG_TX"}]}),
    Expected("CPP_END_TRANSACTION_CHECKED", 37, 6, 0, {
        "commitLogOffset": "0", "commitOrRollback": "8", "fromTransactionCheck": "1",
        "msgId": "0100007F0000063B0000E14EAE740100", "producerGroup": "PG_TX",
        "tranStateTableOffset": "0", "transactionId": "0100007F0000063B0000E14EAE740100"}),
    Expected("CPP_MAX_OFFSET", 30, 27, 0, {"queueId": "0", "topic": "TopicFail"}),
    Expected("CPP_UPDATE_OFFSET", 15, 54, 0, {
        "commitOffset": "1", "consumerGroup": "CG_FAIL", "queueId": "0", "topic": "TopicFail"}),
    Expected("CPP_UNREGISTER_CONSUMER", 35, 64, 0, {
        "clientID": "22876-127.0.0.1@DEFAULT", "consumerGroup": "CG_FAIL",
        "producerGroup": ""}),
    Expected("CPP_UNREGISTER_PRODUCER", 35, 66, 0, {
        "clientID": "22876-127.0.0.1@DEFAULT", "consumerGroup": "", "producerGroup": "PG_TX"}),
    Expected("CPP_SEND_DELAYED", 10, 1, 0, cpp_send(
        bornTimestamp="1795358812694", producerGroup="PG3", topic="TopicFail",
        properties="DELAY\x012\x02KEYS\x01K9\x02TAGS\x01X\x02"
                   "UNIQ_KEY\x010100007F0000CFDD000096CCAE740100\x02WAIT\x01true\x02"),
        b"will-fail"),
    Expected("CPP_SEND_BACK", 36, 24, 0, {"delayLevel": "0", "group": "CG_FAIL", "offset": "0"}),
]

JAVA_EXPECTED = [
    Expected("JAVA_HEARTBEAT_PRODUCER", 34, 2, 0, {}, {
        "clientID": "192.0.2.2@24815#2767633469406", "consumerDataSet": [],
        "producerDataSet": [{"groupName": "CPG_P"}, {"groupName": "CLIENT_INNER_PRODUCER"}]}),
    Expected("JAVA_SEND_SYNC", 310, 6, 0, java_send(
        e="1", g="1795410297950",
        i="color\x01red\x02size\x0142\x02KEYS\x01KEY1 KEY2\x02"
          "UNIQ_KEY\x01FD00000000000000000000000000000260EF30946E0972631C5E0000\x02"
          "WAIT\x01true\x02TAGS\x01TagA"), b"hello sync"),
    Expected("JAVA_SEND_ONEWAY", 310, 10, 2, java_send(
        e="2", g="1795410298568",
        i="UNIQ_KEY\x01FD00000000000000000000000000000260EF30946E0972631EC80002\x02"
          "WAIT\x01true\x02TAGS\x01TagC"), b"hello oneway"),
    Expected("JAVA_SEND_BATCH", 320, 11, 0, java_send(
        e="3", g="1795410298871", i="WAIT\x01true", m="true"),
        b"".join(b"\x00\x00\x00~" + b"\x00" * 12 + b"\x00\x00\x00\x07batch %d\x00a" % n
                 + b"KEYS\x01bkey-%d\x02UNIQ_KEY\x01FD00000000000000000000000000000260EF3094"
                   b"6E0972631FF7000%d\x02WAIT\x01true\x02TAGS\x01TagB" % (n, 3 + n)
                 for n in range(3))),
    Expected("JAVA_SEND_COMPRESSED", 310, 17, 0, java_send(
        e="1", f="769", g="1795410299785",
        i="UNIQ_KEY\x01FD00000000000000000000000000000260EF30946E09726323880008\x02"
          "WAIT\x01true\x02TAGS\x01TagZ"), None),  # see test_compressed_bodies
    Expected("JAVA_LITE_PULL", 11, 19, 0, {
        "queueId": "1", "maxMsgNums": "10", "sysFlag": "22", "commitOffset": "0",
        "subscription": "*", "ReqT": "0", "suspendTimeoutMillis": "20000",
        "bname": "broker-a", "topic": "CT_L", "queueOffset": "0", "expressionType": "TAG",
        "subVersion": "0", "consumerGroup": "CCG_LITE_SUB"}),
    Expected("JAVA_END_TRANSACTION_CHECKED", 37, 16, 2, {
        "producerGroup": "CPG_TX", "commitLogOffset": "11106",
        "msgId": "FD0000000000000000000000000000026A7C30946E0972652EC00002",
        "tranStateTableOffset": "2", "commitOrRollback": "8",
        "transactionId": "FD0000000000000000000000000000026A7C30946E0972652EC00002",
        "fromTransactionCheck": "true"}),
    Expected("JAVA_SEND_REPLY", 325, 52, 0, java_send(
        a="CPG_REPLIER", b="DefaultCluster_REPLY_TOPIC", g="1795410413149",
        i="MSG_TYPE\x01reply\x02REPLY_TO_CLIENT\x01192.0.2.2@requester\x02"
          "UNIQ_KEY\x01FD00000000000000000000000000000269F130946E097264DE5D0001\x02"
          "TTL\x018000\x02CORRELATION_ID\x012adea8be-8b32-47f2-b6e9-524c652bafbb"),
        b"reply to question 1"),
    Expected("JAVA_RESPONSE", 0, 28, 1, {}),
    Expected("JAVA_UPDATE_BROKER_CONFIG", 25, 0, 0, {},
             b"flushConsumerOffsetInterval=6000\n"),
]


def check_body(cmd: RemotingCommand, expected: Expected) -> None:
    if isinstance(expected.body, dict):
        assert json.loads(cmd.body) == expected.body
    elif expected.body is not None:
        assert cmd.body == expected.body


def ids(table: list[Expected]) -> list[str]:
    return [e.name for e in table]


def test_the_tables_cover_every_vector():
    names = {n for n in vars(v) if n.startswith(("CPP_", "JAVA_")) and n != "CPP_FRAMES"}
    assert names == set(ids(CPP_EXPECTED)) | set(ids(JAVA_EXPECTED))
    assert [e.frame for e in CPP_EXPECTED] == list(v.CPP_FRAMES)


# ------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("expected", CPP_EXPECTED, ids=ids(CPP_EXPECTED))
def test_cpp_frame_decodes(expected):
    cmd = decode(expected.frame)
    assert (cmd.code, cmd.opaque, cmd.flag) == (expected.code, expected.opaque, expected.flag)
    assert (cmd.language, cmd.version, cmd.remark, cmd.serialize_type) == ("CPP", 63, "", 0)
    assert not cmd.is_response
    # Every C++ request carries the (empty) ONS credentials; the rest are the request's own.
    assert cmd.ext_fields["AccessKey"] == "" and cmd.ext_fields["OnsChannel"] == "ALIYUN"
    assert len(cmd.ext_fields["Signature"]) == 28 and cmd.ext_fields["Signature"][-1] == "="
    assert {k: x for k, x in cmd.ext_fields.items() if k not in CPP_AUTH} == expected.ext
    check_body(cmd, expected)


@pytest.mark.parametrize("expected", JAVA_EXPECTED, ids=ids(JAVA_EXPECTED))
def test_java_frame_decodes(expected):
    cmd = decode(expected.frame)
    assert (cmd.code, cmd.opaque, cmd.flag) == (expected.code, expected.opaque, expected.flag)
    assert (cmd.language, cmd.version, cmd.remark, cmd.serialize_type) == ("JAVA", 409, None, 0)
    assert cmd.is_response == (expected.code == 0)
    assert cmd.is_oneway == (expected.flag == 2)
    # Equal as lists of pairs: the field order is kept too, which re-encoding relies on.
    assert list(cmd.ext_fields.items()) == list(expected.ext.items())
    check_body(cmd, expected)


def test_every_captured_frame_decodes():
    """All C++ vectors back to back, fed in awkward pieces as TCP may deliver them."""
    decoder = FrameDecoder()
    stream = b"".join(v.CPP_FRAMES)
    out = []
    for i in range(0, len(stream), 7):
        out.extend(decoder.feed(stream[i:i + 7]))
    assert decoder.buffered == 0
    assert len(out) == len(v.CPP_FRAMES) == 21
    for cmd, frame in zip(out, v.CPP_FRAMES, strict=True):
        assert fields(cmd) == fields(decode(frame))
        assert cmd.language == "CPP" and cmd.version == 63
        assert all(isinstance(x, str) for x in cmd.ext_fields.values())
    assert {cmd.code for cmd in out} == {10, 11, 14, 15, 30, 34, 35, 36, 37, 38, 105}


def test_captured_send_header_values():
    send = decode_frame(v.CPP_SEND_SYNC[4:])
    # C++ mixes JSON numbers and strings in extFields; both come out as strings.
    assert b'"queueId":0,' in v.CPP_SEND_SYNC and b'"reconsumeTimes":"0"' in v.CPP_SEND_SYNC
    assert send.ext_fields["queueId"] == "0" and send.ext_fields["reconsumeTimes"] == "0"
    assert send.int_field("defaultTopicQueueNums") == 4
    assert send.bool_field("batch") is False
    assert decode(v.CPP_SEND_BATCH).bool_field("batch") is True
    props = decode_properties(send.ext_fields["properties"])
    assert props["TAGS"] == "TagA" and props["KEYS"] == "KEY1 KEY2"


# ------------------------------------------------------------------------------- encoding


@pytest.mark.parametrize("expected", CPP_EXPECTED, ids=ids(CPP_EXPECTED))
def test_cpp_frame_encodes_back(expected):
    """The C++ client writes its header differently from our encoder: ``"remark"`` before
    ``"version"``, no ``serializeTypeCurrentRPC``, bare numbers for some extFields, a trailing
    newline. So the bytes differ; the command must not: decode(encode(x)) == x, and both
    headers hold the same JSON once extField values are strings."""
    cmd = decode(expected.frame)
    again = encode(cmd)
    assert fields(decode(again)) == fields(cmd)
    header_length = int.from_bytes(expected.frame[4:8], "big")
    theirs = json.loads(expected.frame[8:8 + header_length])
    theirs["extFields"] = {k: str(x) for k, x in theirs["extFields"].items()}
    ours = json.loads(again[8:8 + int.from_bytes(again[4:8], "big")])
    assert ours.pop("serializeTypeCurrentRPC") == "JSON"
    assert ours == theirs


JAVA_WITH_FIELDS = [e for e in JAVA_EXPECTED if e.ext]
JAVA_WITHOUT_FIELDS = [e for e in JAVA_EXPECTED if not e.ext]


@pytest.mark.parametrize("expected", JAVA_WITH_FIELDS, ids=ids(JAVA_WITH_FIELDS))
def test_java_frame_encodes_back_byte_for_byte(expected):
    # The Java client's header has our key order and string-only extFields.
    assert encode(decode(expected.frame)) == expected.frame


@pytest.mark.parametrize("expected", JAVA_WITHOUT_FIELDS, ids=ids(JAVA_WITHOUT_FIELDS))
def test_java_frame_without_ext_fields_encodes_back(expected):
    """Java leaves ``extFields`` out when there are none; we write ``"extFields":{}``. That is
    the only difference, and it decodes to the same command."""
    cmd = decode(expected.frame)
    assert fields(decode(encode(cmd))) == fields(cmd)
    header_length = int.from_bytes(expected.frame[4:8], "big")
    header = expected.frame[8:8 + header_length]
    assert b"extFields" not in header
    header = header.replace(b',"flag":', b',"extFields":{},"flag":', 1)
    assert encode(cmd) == ((4 + len(header) + len(cmd.body)).to_bytes(4, "big")
                           + len(header).to_bytes(4, "big") + header + cmd.body)


# ------------------------------------------------------------------- messages in the frames


@pytest.mark.parametrize("name, key, expected", [
    ("CPP_SEND_SYNC", "properties", {
        "KEYS": "KEY1 KEY2", "TAGS": "TagA", "UNIQ_KEY": "0100007F000066360000BAFBAA740100",
        "WAIT": "true", "userprop": "v1"}),
    ("CPP_SEND_HALF", "properties", {
        "PGROUP": "PG_TX", "TAGS": "T", "TRAN_MSG": "true",
        "UNIQ_KEY": "0100007F0000063B0000E14EAE740100", "WAIT": "true"}),
    ("CPP_SEND_DELAYED", "properties", {
        "DELAY": "2", "KEYS": "K9", "TAGS": "X", "UNIQ_KEY": "0100007F0000CFDD000096CCAE740100",
        "WAIT": "true"}),
    ("JAVA_SEND_SYNC", "i", {
        "color": "red", "size": "42", "KEYS": "KEY1 KEY2",
        "UNIQ_KEY": "FD00000000000000000000000000000260EF30946E0972631C5E0000", "WAIT": "true",
        "TAGS": "TagA"}),
    ("JAVA_SEND_REPLY", "i", {
        "MSG_TYPE": "reply", "REPLY_TO_CLIENT": "192.0.2.2@requester",
        "UNIQ_KEY": "FD00000000000000000000000000000269F130946E097264DE5D0001", "TTL": "8000",
        "CORRELATION_ID": "2adea8be-8b32-47f2-b6e9-524c652bafbb"}),
])
def test_send_properties_decode_and_encode_back(name, key, expected):
    raw = decode(getattr(v, name)).ext_fields[key]
    props = decode_properties(raw)
    assert list(props.items()) == list(expected.items())
    if name.startswith("CPP_"):
        # The C++ client ends the string with the separator, as we do: byte for byte.
        assert encode_properties(props) == raw
    else:
        # Java 4.9.x leaves the final separator off; ours has it, and parses the same.
        assert encode_properties(props) == raw + "\x02"
        assert decode_properties(encode_properties(props)) == props


@pytest.mark.parametrize("name, bodies, properties", [
    ("CPP_SEND_BATCH", [b"b1", b"b2"],
     [{"UNIQ_KEY": "0100007F000066360000BDFBAA740400", "WAIT": "true"},
      {"UNIQ_KEY": "0100007F000066360000BDFBAA740500", "WAIT": "true"}]),
    ("JAVA_SEND_BATCH", [b"batch 0", b"batch 1", b"batch 2"],
     [{"KEYS": f"bkey-{n}",
       "UNIQ_KEY": f"FD00000000000000000000000000000260EF30946E0972631FF7000{n + 3}",
       "WAIT": "true", "TAGS": "TagB"} for n in range(3)]),
])
def test_batch_bodies_split_and_encode_back(name, bodies, properties):
    body = decode(getattr(v, name)).body
    elements = split_batch(body)
    assert [bytes(body[at:at + n]) for _, at, n, _, _ in elements] == bodies
    raw_props = [bytes(body[at:at + n]) for _, _, _, at, n in elements]
    assert [list(decode_properties(p).items()) for p in raw_props] == [
        list(p.items()) for p in properties]
    assert [flag for flag, *_ in elements] == [0] * len(bodies)
    # Magic and body CRC are 0 in a batch element, as encode_batch writes them.
    assert encode_batch([(0, b, p) for b, p in zip(bodies, raw_props, strict=True)]) == body


def test_compressed_bodies():
    cpp = decode(v.CPP_SEND_COMPRESSED)
    assert cpp.int_field("sysFlag") == SysFlag.COMPRESSED
    assert plain_body(cpp.body, SysFlag.COMPRESSED) == b"x" * 5000
    java = decode(v.JAVA_SEND_COMPRESSED)
    sysflag = java.int_field("f")
    assert sysflag == 769 and sysflag & SysFlag.COMPRESSED
    assert sysflag & SysFlag.COMPRESSION_MASK == 0x300  # the zlib compression type
    assert len(java.body) == 169
    plain = plain_body(java.body, sysflag)
    assert len(plain) == 5120 and plain.isalpha() and plain.islower()
    assert plain.startswith(b"ahovcjqxelszgnubipwdkryfmt")
    # Our encoder keeps the compressed body as it came.
    assert encode(java) == v.JAVA_SEND_COMPRESSED
