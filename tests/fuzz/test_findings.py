"""Inputs the decoder fuzzing found (or that the fix of one led to), each as the literal
bytes, reduced by hand to what triggers it, and the clear error it now meets. Before the fix
each escaped its decoder as another exception (UnicodeDecodeError, struct.error,
AttributeError, TypeError, RecursionError), which callers that catch the documented kind let
through: a traceback in the log and, on a connection, no answer."""

from __future__ import annotations

import pytest

from rocketq.acl.plain import AclConfigError, load_plain_acl
from rocketq.broker.config import load_broker_conf
from rocketq.protocol import fastjson
from rocketq.protocol.message import (
    MessageFormatError,
    decode_offset_msg_id,
    decode_record,
    decode_records,
)
from rocketq.protocol.sql92 import SqlError, compile_selector

from .targets import TARGETS

#: A sound record (v1, no body, no properties) whose one-byte topic is 0xFF, not UTF-8.
RECORD_WITH_NON_UTF8_TOPIC = bytes.fromhex(
    "0000005cdaa320a7000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000007f0000010000000100000000000000007f"
    "000001000000020000000000000000000000000000000001ff0000")


def test_a_record_whose_topic_is_not_utf8_is_a_format_error():
    """records: decode_records raised UnicodeDecodeError from the topic."""
    with pytest.raises(MessageFormatError, match="topic of the record at 0 is not UTF-8"):
        decode_records(RECORD_WITH_NON_UTF8_TOPIC)
    with pytest.raises(MessageFormatError):
        decode_record(RECORD_WITH_NON_UTF8_TOPIC)
    TARGETS["records"](RECORD_WITH_NON_UTF8_TOPIC)


@pytest.mark.parametrize("msg_id", [
    "7F00000100002A9F 0000000000 0000",  # the fuzzer's: 32 characters, 14 bytes of hex
    "7F000001 00002A9F00000000000000 ",
])
def test_an_offset_message_id_with_blanks_is_a_format_error(msg_id):
    """properties: bytes.fromhex skips blanks, and struct.unpack then failed on 14 bytes."""
    assert len(msg_id) == 32
    with pytest.raises(MessageFormatError, match="not a hex message id"):
        decode_offset_msg_id(msg_id)


def test_a_plain_acl_file_that_is_not_utf8_is_an_acl_error(tmp_path):
    """plain_acl: the YAML reader raised UnicodeDecodeError."""
    path = tmp_path / "plain_acl.yml"
    path.write_bytes(b"accounts:\n  - accessKey: RocketMQ\xff\n")
    with pytest.raises(AclConfigError, match="is not UTF-8 text"):
        load_plain_acl(path)


@pytest.mark.parametrize("text,message", [
    # The fuzzer's: whiteRemoteAddress given as a list (AttributeError: no .strip).
    (b"accounts:\n  - accessKey: RocketMQ\n    secretKey: \"12345678\"\n"
     b"    whiteRemoteAddress:\n       - topicC=SUB\n",
     "whiteRemoteAddress must be one address pattern"),
    # The same code read the file's two lists without checking them (TypeError).
    (b"globalWhiteRemoteAddresses: 5\n", "globalWhiteRemoteAddresses must be a list"),
    (b"accounts: 5\n", "accounts must be a list"),
    # PyYAML composes nested collections recursively (RecursionError).
    (b"accounts: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nests too deeply"),
])
def test_a_plain_acl_file_of_the_wrong_shape_is_an_acl_error(tmp_path, text, message):
    path = tmp_path / "plain_acl.yml"
    path.write_bytes(text)
    with pytest.raises(AclConfigError, match=message):
        load_plain_acl(path)


def test_a_plain_acl_white_address_that_is_false_still_matches_nothing(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_bytes(b"accounts:\n  - accessKey: RocketMQ\n    secretKey: \"12345678\"\n"
                     b"    whiteRemoteAddress: false\n")
    account = load_plain_acl(path).accounts["RocketMQ"]
    assert not account.white_remote_address.matches("127.0.0.1")


def test_a_broker_conf_that_is_not_utf8_is_a_value_error_naming_the_file(tmp_path):
    """broker_conf: read_properties raised UnicodeDecodeError, which named no file."""
    path = tmp_path / "broker.conf"
    path.write_bytes(b"brokerPermission=6\ndiskMaxUsedSpaceRat\xebo=80\n")
    with pytest.raises(ValueError, match="not UTF-8 text") as raised:
        load_broker_conf(path)
    assert type(raised.value) is ValueError
    assert str(raised.value).startswith(str(path))


@pytest.mark.parametrize("body", [b"[" * 5000, b'{"a":' * 3000, b"{" * 3000])
def test_a_fastjson_body_nested_too_deeply_is_a_value_error(body):
    """fastjson: the recursive parser ended in RecursionError, which the ACL check of a
    heartbeat (catching ValueError only) let through."""
    with pytest.raises(ValueError, match="nested deeper than"):
        fastjson.loads(body)


def test_a_fastjson_body_nested_a_little_still_parses():
    depth = fastjson.MAX_DEPTH
    assert fastjson.loads("[" * depth + "]" * depth) is not None
    with pytest.raises(ValueError, match="nested deeper than"):
        fastjson.loads("[" * (depth + 1) + "]" * (depth + 1))


@pytest.mark.parametrize("expression", ["(" * 3000 + "a = 1" + ")" * 3000,
                                        "NOT " * 3000 + "a = 1"])
def test_a_selector_nested_too_deeply_is_an_sql_error(expression):
    """sql92: compiling recursed once per level and ended in RecursionError (and a selector
    just short of that would have failed the same way on every message it was matched
    against, from a deeper stack)."""
    with pytest.raises(SqlError, match="nests deeper than"):
        compile_selector(expression)


def test_a_selector_nested_a_little_still_compiles():
    assert compile_selector("(" * 20 + "a = 1" + ")" * 20)({"a": "1"})
    assert compile_selector("NOT " * 20 + "a = 1")({"a": "1"})


def _controller_answers(data: bytes) -> list:
    """The controller's answers to the requests ``data`` holds (the fuzz target's format)."""
    import asyncio

    from rocketq.controller import Controller, ControllerConfig

    from .targets import _MemoryEngine, controller_requests

    node = Controller(_MemoryEngine(), "127.0.0.1", 0,  # type: ignore[arg-type]
                      ControllerConfig(notifyBrokerRoleChanged=False, masterLeaseMillis=0))
    loop = asyncio.new_event_loop()
    try:
        answers = []
        for cmd in controller_requests(data):
            answer = node.handle(None, cmd)  # type: ignore[arg-type]
            answers.append(loop.run_until_complete(answer)
                           if asyncio.iscoroutine(answer) else answer)
        return answers
    finally:
        loop.close()


@pytest.mark.parametrize("data", [
    # register, heartbeat, then an election asked with epoch Long.MAX_VALUE: the new master's
    # epoch was 2^63, answered as masterEpoch and past what a broker reads.
    b"\x01clusterName=c\nbrokerName=b\nbrokerAddress=127.0.0.1:1\nbrokerId=1\x00\x1e"
    b"\x00brokerName=b\nbrokerId=1\nbrokerAddr=127.0.0.1:1\x00\x1e"
    b"\x02brokerName=b\nbrokerId=1\nepoch=9223372036854775807\x00",
    # a broker registered with id Long.MAX_VALUE: the next broker was given id 2^63.
    b"\x01clusterName=c\nbrokerName=b\nbrokerAddress=127.0.0.1:1\n"
    b"brokerId=9223372036854775807\x00\x1e"
    b"\x01clusterName=c\nbrokerName=b\nbrokerAddress=127.0.0.1:2\x00",
])
def test_controller_refuses_ids_and_epochs_that_leave_no_next_one(data):
    from rocketq.protocol import ResponseCode

    answers = _controller_answers(data)
    assert any(a.code == ResponseCode.CONTROLLER_INVALID_REQUEST
               and "leaves no" in (a.remark or "") for a in answers)
    TARGETS["controller"](data)


@pytest.mark.parametrize("expression", [
    "NOT' BETWEEN 28 ANa NOT' BETWEEN 28 AND 200",  # the fuzzer's: a string on the left
    "'abc' BETWEEN 1 AND 2",
    "TRUE NOT BETWEEN 1 AND 2",
])
def test_between_with_a_string_or_boolean_on_its_left_is_an_sql_error(expression):
    """sql92: the selector compiled, then raised TypeError (str <= int) on every message it
    was matched against."""
    with pytest.raises(SqlError, match="BETWEEN needs a property or a number on its left"):
        compile_selector(expression)


def test_between_with_a_number_on_its_left_still_compiles():
    assert compile_selector("3 BETWEEN 1 AND 5")({})
    assert not compile_selector("7 BETWEEN 1 AND 5")({})
