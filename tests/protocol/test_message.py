from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketq.protocol.message import (
    MessageFormatError,
    MessageRecord,
    create_offset_msg_id,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    decode_records,
    encode_properties,
    encode_record,
    host_to_bytes,
    java_hash,
    join_properties,
    property_value,
    tags_code,
)
from rocketq.protocol.topic import IllegalTopicError, validate_topic


def reference_java_hash(text: str) -> int:
    raw = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def test_java_hash_known_values():
    # Values Java's String.hashCode gives (PROTOCOL.md section 4.3).
    assert java_hash("TagA") == 2598919
    assert java_hash("*") == 42
    assert java_hash("") == 0
    assert java_hash("hello") == 99162322
    assert tags_code(None) == 0 and tags_code("") == 0


@given(st.text(max_size=2000))
def test_java_hash_matches_reference(text):
    assert java_hash(text) == reference_java_hash(text)


def test_properties_round_trip_and_trailing_separator():
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}
    encoded = encode_properties(props)
    assert encoded == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02"
    assert decode_properties(encoded) == props
    assert decode_properties(encoded.encode()) == props
    # Malformed segments are skipped, as RocketMQ's parser does.
    assert decode_properties("junk\x02A\x01b\x02\x01x\x02") == {"A": "b"}
    assert property_value(encoded.encode(), b"KEYS") == b"k1 k2"
    assert property_value(b"XTAGS\x01no\x02TAGS\x01yes\x02", b"TAGS") == b"yes"
    assert property_value(encoded.encode(), b"DELAY") is None


def test_record_round_trip():
    body = zlib.compress(b"hello world" * 100, 5)
    rec = MessageRecord(
        topic="TopicTest", body=body, queue_id=3, flag=7, queue_offset=42,
        commitlog_offset=123456, sysflag=1, born_timestamp=1700000000000,
        born_host=("10.0.0.5", 5555), store_timestamp=1700000000100,
        store_host=("127.0.0.1", 10911), reconsume_times=2, prepared_transaction_offset=99,
        properties={"TAGS": "A", "UNIQ_KEY": "X"})
    data = encode_record(rec)
    assert len(data) == 91 + len(body) + len("TopicTest") + len(
        encode_properties(rec.properties))
    out = decode_record(data, check_crc=True)
    assert out.topic == "TopicTest" and out.queue_offset == 42 and out.flag == 7
    assert out.born_host == ("10.0.0.5", 5555) and out.store_host == ("127.0.0.1", 10911)
    assert out.properties == rec.properties and out.store_size == len(data)
    assert out.msg_id == "X"
    assert out.offset_msg_id == create_offset_msg_id(host_to_bytes("127.0.0.1"), 10911, 123456)
    assert decode_record(data, decompress=True).body == b"hello world" * 100
    assert [r.queue_offset for r in decode_records(data + data)] == [42, 42]


def test_decode_rejects_bad_records():
    data = bytearray(encode_record(MessageRecord(topic="T", body=b"abc")))
    with pytest.raises(MessageFormatError):
        decode_record(bytes(data[:50]))
    bad_magic = bytearray(data)
    bad_magic[4:8] = b"\0\0\0\0"
    with pytest.raises(MessageFormatError):
        decode_record(bytes(bad_magic))
    bad_len = bytearray(data)
    bad_len[84:88] = (10**6).to_bytes(4, "big")
    with pytest.raises(MessageFormatError):
        decode_record(bytes(bad_len))
    bad_crc = bytearray(data)
    bad_crc[88] ^= 0xFF
    with pytest.raises(MessageFormatError):
        decode_record(bytes(bad_crc), check_crc=True)


@given(st.binary(max_size=400))
def test_decode_random_bytes_fails_cleanly(data):
    try:
        decode_records(data)
    except MessageFormatError:
        pass


def test_offset_msg_id():
    msg_id = create_offset_msg_id(host_to_bytes("127.0.0.1"), 10911, 0)
    assert msg_id == "7F00000100002A9F0000000000000000"
    assert decode_offset_msg_id(msg_id) == ("127.0.0.1", 10911, 0)
    with pytest.raises(MessageFormatError):
        decode_offset_msg_id("XYZ")


@pytest.mark.parametrize("topic", ["", " ", "a b", "topic/1", "t" * 128, "tópico",
                                   "TopicTest\n"])
def test_illegal_topics(topic):
    with pytest.raises(IllegalTopicError):
        validate_topic(topic)


@pytest.mark.parametrize("topic", ["TopicTest", "a-b_c", "%RETRY%group", "%DLQ%" + "g" * 200])
def test_legal_topics(topic):
    validate_topic(topic)


_name = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=8)
_value = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                 max_size=8)


@given(st.dictionaries(_name, _value, max_size=5), st.booleans())
def test_join_properties_whatever_the_final_separator(props, java49):
    """Java 4.9.x leaves the final separator off, the C++ client and Java 5 keep it: joined
    with CLUSTER, both decode to the same properties plus CLUSTER, with no empty segment."""
    encoded = encode_properties(props).encode()
    if java49:
        encoded = encoded[:-1]  # what MessageDecoder.messageProperties2String sends in 4.9.x
    joined = join_properties(encoded, b"CLUSTER\x01c\x02")
    assert b"\x02\x02" not in joined and not joined.startswith(b"\x02")
    assert decode_properties(joined) == {**props, "CLUSTER": "c"}
    assert join_properties(encoded, b"") == encoded
