"""The compiled codec and its pure-Python reference give the same answers, errors included,
for the same frames, batches, records, properties and keys."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketq.protocol import _codec as pure
from rocketq.protocol import codec
from rocketq.protocol.message import RECORD_HEADER, MessageRecord, encode_record
from rocketq.store.index_hash import index_key_hash

try:
    from rocketq.protocol import _ccodec as compiled
except ImportError:  # built without a C compiler: only the reference is there
    compiled = None

needs_compiled = pytest.mark.skipif(compiled is None, reason="the compiled codec is not built")


def test_the_compiled_codec_is_the_one_in_use_unless_switched_off():
    if os.environ.get("ROCKETQ_NO_EXTENSIONS") or compiled is None:
        # Switched off, or built without a C compiler: the pure module, and nothing else.
        assert not codec.COMPILED and codec.impl is pure
        assert not os.environ.get("ROCKETQ_REQUIRE_COMPILED") or os.environ.get(
            "ROCKETQ_NO_EXTENSIONS"), "a C compiler is here, yet the codec was not compiled"
    else:
        assert codec.COMPILED and codec.impl is compiled


def same(name: str, *args):
    """Call ``name`` in both modules: equal results, or CodecErrors with equal messages."""
    outcomes = []
    for module in (pure, compiled):
        try:
            result = getattr(module, name)(*args)
            if name == "walk":
                result = list(result)
            outcomes.append(("ok", result))
        except module.CodecError as exc:
            outcomes.append(("error", str(exc)))
    assert outcomes[0] == outcomes[1]
    return outcomes[0]


names = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=12)
values = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                 max_size=40)
property_maps = st.dictionaries(names, values, max_size=6)


def mutated(data: bytes, cuts: list[tuple[int, int]]) -> bytes:
    """``data`` with some bytes overwritten and maybe its tail cut."""
    raw = bytearray(data)
    for at, value in cuts:
        if raw:
            raw[at % len(raw)] = value
    return bytes(raw)


damage = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=3)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(property_maps, st.text(max_size=60), st.binary(max_size=60), st.binary(max_size=8))
def test_properties(props, text, data, name):
    same("encode_properties", props)
    assert same("decode_properties", pure.encode_properties(props))[1] == props
    same("decode_properties", text)
    same("property_value", data, name)
    encoded = pure.encode_properties(props).encode()
    for key in props:
        assert same("property_value", encoded, key.encode())[1] == props[key].encode()


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=40), st.text(max_size=20).map(str.encode)),
                max_size=20))
def test_index_hashes(keys):
    hashes = same("index_hashes", keys)[1]
    assert hashes == [index_key_hash(k.decode("utf-8", "replace")) for k in keys]


def test_index_hashes_of_known_keys():
    # "polygenelubricants" hashes to Integer.MIN_VALUE in Java: RocketMQ's abs keeps it 0.
    keys = [b"", b"a", b"TopicTest#k1", "é中".encode(), b"polygenelubricants"]
    assert codec.index_hashes(keys) == [0, 97, index_key_hash("TopicTest#k1"),
                                        index_key_hash("é中"), 0]


batch_elements = st.lists(st.tuples(st.integers(-(1 << 31), (1 << 31) - 1),
                                    st.binary(max_size=50), st.binary(max_size=30)),
                          min_size=1, max_size=6)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(batch_elements, damage, st.integers(0, 400))
def test_batches(elements, cuts, cut_at):
    body = same("encode_batch", elements)[1]
    split = same("split_batch", body)[1]
    assert [(f, body[s:s + n], body[p:p + m]) for f, s, n, p, m in split] == elements
    same("split_batch", mutated(body, cuts))
    same("split_batch", body[:cut_at])


records = st.lists(st.tuples(st.sampled_from(["T", "TopicTest", "%RETRY%g", "t" * 127]),
                             st.binary(max_size=60), property_maps,
                             st.integers(0, 1 << 40), st.integers(0, 255)),
                   min_size=1, max_size=5)


def record_bytes(spec) -> bytes:
    return b"".join(encode_record(MessageRecord(
        topic, body, queue_id=7, queue_offset=offset, commitlog_offset=offset * 3,
        sysflag=sysflag & 0x0F, properties=props, born_host=("10.0.0.1", 5),
        store_host=("127.0.0.1", 10911), flag=offset & 0xFF, reconsume_times=2))
        for topic, body, props, offset, sysflag in spec)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(records, damage, st.integers(0, 2000), st.booleans())
def test_records(spec, cuts, cut_at, check_crc):
    data = record_bytes(spec)
    args = (RECORD_HEADER.unpack_from, RECORD_HEADER.index("sysflag"), check_crc)
    walked = same("walk", data, 0, len(data), *args)[1]
    assert len(walked) == len(spec)
    got = same("pulled", data)[1]
    assert [(t.decode(), body, offset) for t, body, _q, _f, offset, *_ in got] == \
        [(topic, body, offset) for topic, body, _p, offset, _s in spec]
    for bad in (mutated(data, cuts), data[:cut_at]):
        same("walk", bad, 0, len(bad), *args)
        same("pulled", bad)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=5), st.binary(max_size=7),
       st.integers(4, 64), damage)
def test_frames(payloads, tail, max_frame, cuts):
    data = b"".join(len(p).to_bytes(4, "big") + p for p in payloads) + tail
    same("frame_spans", data, max_frame)
    same("frame_spans", mutated(data, cuts), max_frame)


def test_the_codec_reads_the_record_layout_the_message_module_describes():
    # _codec imports nothing of rocketq, so it states the layout's sizes itself.
    from rocketq.protocol import message

    assert (pure.RECORD_HEADER_SIZE, pure.RECORD_OVERHEAD) == (message.RECORD_HEADER_SIZE,
                                                               message.RECORD_OVERHEAD)
    assert pure._PULLED.size == message.RECORD_HEADER_SIZE
