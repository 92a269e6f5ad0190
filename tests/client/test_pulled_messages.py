"""Pulled messages made in one pass, their fields made on first use, read as the record-by-record
decoder reads them: every field, compressed bodies, retried messages, fields set later."""

from __future__ import annotations

import dataclasses
import zlib

import pytest

from rocketq.client.message import ReceivedMessage
from rocketq.client.pulled import pulled_messages
from rocketq.protocol.message import (
    MessageFormatError,
    MessageRecord,
    SysFlag,
    decode_records,
    encode_record,
)

FIELDS = [f.name for f in dataclasses.fields(ReceivedMessage) if f.name != "_record"]


def records() -> bytes:
    plain = MessageRecord("Orders", b"o1", queue_id=3, flag=7, queue_offset=41,
                          commitlog_offset=9000, born_timestamp=111, store_timestamp=222,
                          born_host=("10.0.0.1", 555), store_host=("10.1.2.3", 10911),
                          reconsume_times=2, properties={"UNIQ_KEY": "U1", "TAGS": "paid",
                                                         "KEYS": "k1 k2"})
    no_uniq = dataclasses.replace(plain, body=b"o2", properties={"TAGS": "x"},
                                  commitlog_offset=9100)
    packed = dataclasses.replace(plain, body=zlib.compress(b"z" * 500),
                                 sysflag=SysFlag.COMPRESSED, properties={"UNIQ_KEY": "U3"})
    retried = dataclasses.replace(plain, topic="%RETRY%group", body=b"again", properties={
        "UNIQ_KEY": "U4", "RETRY_TOPIC": "Orders", "RECONSUME_TIME": "1"})
    return b"".join(encode_record(r) for r in (plain, no_uniq, packed, retried))


def test_pulled_messages_read_as_the_record_decoder_reads_them():
    data = records()
    fast = pulled_messages(data, "broker-a")
    slow = [ReceivedMessage.from_record(r, "broker-a") for r in decode_records(data)]
    assert [[getattr(m, n) for n in FIELDS] for m in fast] == \
        [[getattr(m, n) for n in FIELDS] for m in slow]
    assert fast[0].tags == "paid" and fast[0].keys == ["k1", "k2"] and fast[0].msg_id == "U1"
    assert fast[1].msg_id == fast[1].offset_msg_id  # no UNIQ_KEY: the offset id
    assert fast[2].body == b"z" * 500
    assert fast[3].topic == "Orders"  # a retried message shows its original topic


def test_fields_of_a_pulled_message_can_be_set():
    m = pulled_messages(records(), "broker-a")[0]
    m.queue_offset = 5
    m.properties = {"TAGS": "new"}
    m.store_host = ("127.0.0.1", 1)
    m.topic = "Other"
    assert (m.queue_offset, m.tags, m.store_host, m.topic) == (5, "new", ("127.0.0.1", 1),
                                                               "Other")
    assert m.commitlog_offset == 9000 and m.flag == 7  # the rest as read


def test_a_bad_record_in_a_pull_answer_is_a_format_error():
    data = records()
    with pytest.raises(MessageFormatError):
        pulled_messages(data[:-3], "broker-a")
