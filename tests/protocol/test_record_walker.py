"""The one record layout, encoder and checked walker (``protocol.message``)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketq.protocol.message import (
    MAGIC_V2,
    RECORD_FIELD_POS,
    RECORD_FIELDS,
    RECORD_FIXED_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    STORE_TIMESTAMP_POS,
    MessageFormatError,
    MessageRecord,
    SysFlag,
    decode_record,
    decode_records,
    encode_record,
    record_layout,
    record_parts,
    record_properties,
    record_struct,
    topic_field,
    walk_records,
)


def record(i: int = 0, body: bytes = b"hello", **props: str) -> MessageRecord:
    return MessageRecord(topic=f"Topic{i}", body=body, queue_id=i % 4, queue_offset=i,
                         commitlog_offset=1000 + i, born_timestamp=17, store_timestamp=42 + i,
                         properties={"TAGS": f"t{i}", "UNIQ_KEY": f"K{i}", **props})


def test_layout_is_described_once():
    assert RECORD_HEADER_SIZE == 88 == sum(struct.calcsize(">" + c) for _, c in RECORD_FIELDS)
    assert STORE_TIMESTAMP_POS == RECORD_FIELD_POS["store_timestamp"] == 56
    assert RECORD_FIELD_POS["body_length"] == 84
    raw = encode_record(record(3))
    for name, code in RECORD_FIELDS:
        if code != "4s":
            value = struct.unpack_from(">" + code, raw, RECORD_FIELD_POS[name])[0]
            assert value == RECORD_HEADER.unpack_from(raw)[RECORD_HEADER.names.index(name)]


def test_narrow_header_reads_the_same_values():
    raw = encode_record(record(5))
    narrow = record_struct("queue_offset", "store_timestamp")
    assert narrow.size == RECORD_HEADER_SIZE
    assert narrow.names == ("total_size", "magic", "queue_offset", "sysflag",
                            "store_timestamp", "body_length")
    full = RECORD_HEADER.unpack_from(raw)
    got = narrow.unpack_from(raw)
    for name in narrow.names:
        assert got[narrow.index(name)] == full[RECORD_HEADER.index(name)]
    with pytest.raises(ValueError, match="not record fields"):
        record_struct("queue_offest")


def test_one_encoder_for_single_records_and_batch_elements():
    r = record(1)
    single = encode_record(r)
    # A batch element's properties and the broker's suffix, written as two parts.
    props = b"TAGS\x01t1\x02UNIQ_KEY\x01K1\x02"
    parts = record_parts(len(single), r.queue_id, r.flag, r.queue_offset, r.commitlog_offset,
                         r.sysflag, r.born_timestamp, b"\x7f\x00\x00\x01", 0,
                         r.store_timestamp, b"\x7f\x00\x00\x01", 0, 0, 0, r.body,
                         topic_field(b"Topic1"), props[:8], props[8:])
    assert b"".join(parts) == single
    assert len(single) == RECORD_FIXED_SIZE + len(r.body) + len(topic_field(b"Topic1")) + len(
        props)
    with pytest.raises(MessageFormatError):
        topic_field(b"x" * 128)


VALUES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
                 max_size=20)


@given(st.lists(st.tuples(st.binary(max_size=64), VALUES), max_size=6))
def test_walker_and_decode_agree_with_the_encoder(items):
    records = [record(i, body, X=text) for i, (body, text) in enumerate(items)]
    raw = b"".join(encode_record(r) for r in records)
    walked = list(walk_records(memoryview(raw), check_crc=True))
    assert [fields[0] for _, fields, *_ in walked] == [len(encode_record(r)) for r in records]
    decoded = decode_records(raw)
    assert [(d.topic, d.body, d.properties, d.queue_offset) for d in decoded] == [
        (r.topic, r.body, r.properties, r.queue_offset) for r in records]
    assert [record_properties(encode_record(r)) for r in records] == [
        r.properties for r in records]


def test_every_truncation_stops_at_the_cut_record():
    first, second = encode_record(record(1)), encode_record(record(2, b"x" * 40))
    raw = first + second
    assert [pos for pos, *_ in walk_records(memoryview(raw[:len(first)]))] == [0]
    for cut in range(1, len(raw)):
        if cut == len(first):
            continue  # a whole record: checked above
        buf = memoryview(raw[:cut])
        seen = []
        with pytest.raises(MessageFormatError):
            for pos, *_ in walk_records(buf):
                seen.append(pos)
        # Whatever was whole before the cut was yielded; the cut record never is.
        assert seen == ([0] if cut >= len(first) else [])


@pytest.mark.parametrize("field", ["total_size", "body_length"])
def test_a_length_that_lies_is_refused(field):
    raw = bytearray(encode_record(record(1)) + encode_record(record(2)))
    at = RECORD_FIELD_POS[field]
    for delta in (-1, 1, 1000, -(1 << 20)):
        bad = bytearray(raw)
        value = struct.unpack_from(">i", bad, at)[0] + delta
        struct.pack_into(">i", bad, at, value)
        with pytest.raises(MessageFormatError):
            list(walk_records(memoryview(bad)))


def test_topic_and_properties_lengths_that_lie_are_refused():
    r = record(1)
    raw = encode_record(r)
    topic_len_at = RECORD_HEADER_SIZE + len(r.body)
    props_len_at = topic_len_at + 1 + len(r.topic)
    for at, width in ((topic_len_at, 1), (props_len_at, 2)):
        for value in (0, (1 << (8 * width)) - 1):
            bad = bytearray(raw)
            bad[at:at + width] = value.to_bytes(width, "big")
            with pytest.raises(MessageFormatError):
                record_layout(memoryview(bad))


def test_magic_ipv6_and_crc_are_checked():
    raw = encode_record(record(1))
    bad = bytearray(raw)
    struct.pack_into(">i", bad, RECORD_FIELD_POS["magic"], 0x12345678)
    with pytest.raises(MessageFormatError, match="magic"):
        decode_record(bad)
    bad = bytearray(raw)
    struct.pack_into(">i", bad, RECORD_FIELD_POS["sysflag"], SysFlag.BORNHOST_V6)
    with pytest.raises(MessageFormatError, match="IPv6"):
        decode_record(bad)
    bad = bytearray(raw)
    bad[RECORD_HEADER_SIZE] ^= 0xFF  # a body byte
    assert decode_record(bad).body != record(1).body  # lengths are sound: decodes
    with pytest.raises(MessageFormatError, match="CRC"):
        decode_record(bad, check_crc=True)
    with pytest.raises(MessageFormatError, match="CRC"):
        list(walk_records(memoryview(bad), check_crc=True))
    with pytest.raises(ValueError, match="full RECORD_HEADER"):
        list(walk_records(raw, header=record_struct("queue_id"), check_crc=True))


def test_v2_records_carry_a_two_byte_topic_length():
    r = record(1)
    v1 = encode_record(r)
    at = RECORD_HEADER_SIZE + len(r.body)
    v2 = bytearray(v1[:at] + len(r.topic).to_bytes(2, "big") + v1[at + 1:])
    struct.pack_into(">ii", v2, 0, len(v2), MAGIC_V2)
    got = decode_record(v2)
    assert (got.topic, got.body, got.properties) == (r.topic, r.body, r.properties)


def test_walk_stops_at_end_and_starts_at_pos():
    a, b, c = (encode_record(record(i)) for i in range(3))
    raw = memoryview(a + b + c)
    assert [pos for pos, *_ in walk_records(raw, len(a))] == [len(a), len(a) + len(b)]
    assert [pos for pos, *_ in walk_records(raw, 0, len(a) + len(b))] == [0, len(a)]
    with pytest.raises(MessageFormatError, match="total size"):
        list(walk_records(raw, 0, len(a) + 100))
    with pytest.raises(MessageFormatError, match="no record"):
        record_layout(raw, len(raw))
