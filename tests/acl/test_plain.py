"""plain_acl.yml parsing, address patterns, permissions and signatures, without servers."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from rocketq.acl import AclConfigError, Credentials, needed_perms, parse_plain_acl, verify
from rocketq.acl.plain import DENY, PUB, SUB, AddressPattern, allows, parse_perm
from rocketq.acl.signature import signed_text
from rocketq.protocol import RemotingCommand, RequestCode


@pytest.mark.parametrize("pattern, inside, outside", [
    ("*", ["127.0.0.1", "10.1.2.3"], []),
    ("192.168.0.*", ["192.168.0.1", "192.168.0.255"], ["192.168.1.1", "127.0.0.1"]),
    ("192.168.1.1-10", ["192.168.1.1", "192.168.1.10"], ["192.168.1.11", "192.168.2.5"]),
    ("10.0.0.{1,3}", ["10.0.0.1", "10.0.0.3"], ["10.0.0.2"]),
    ("10.0.0.1,10.0.0.7", ["10.0.0.7"], ["10.0.0.2"]),
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
    ("", [], ["127.0.0.1"]),
])
def test_address_patterns_match_as_rocketmqs_strategies(pattern, inside, outside):
    p = AddressPattern(pattern)
    assert all(p.matches(h) for h in inside)
    assert not any(p.matches(h) for h in outside)


@pytest.mark.parametrize("bad", ["192.168.1", "300.1.1.1", "1.2.3.x", "1.2.3.{4"])
def test_a_bad_address_pattern_is_refused_with_its_text(bad):
    with pytest.raises(AclConfigError, match="bad address pattern"):
        AddressPattern(bad)


def test_permissions_follow_rocketmqs_bits():
    assert parse_perm("PUB|SUB") == parse_perm("SUB|PUB") == PUB | SUB
    assert parse_perm("nonsense") == parse_perm(None) == DENY
    assert allows(PUB, PUB | SUB) and allows(SUB, SUB)
    assert not allows(PUB, SUB) and not allows(SUB, DENY) and not allows(PUB, DENY | PUB)


def test_the_file_is_checked_and_names_the_faulty_entry():
    acl = parse_plain_acl({
        "globalWhiteRemoteAddresses": ["10.10.103.*"],
        "accounts": [
            {"accessKey": "RocketMQ", "secretKey": "12345678", "defaultTopicPerm": "DENY",
             "defaultGroupPerm": "SUB", "topicPerms": ["topicA=DENY", "topicB=PUB|SUB"],
             "groupPerms": ["groupA=DENY"]},
            {"accessKey": "rocketmq2", "secretKey": "12345678", "admin": True,
             "whiteRemoteAddress": "192.168.1.*"}]})
    user = acl.accounts["RocketMQ"]
    assert user.perm("topicB", False) == PUB | SUB and user.perm("other", False) == DENY
    assert user.perm("groupA", True) == DENY and user.perm("groupZ", True) == SUB
    admin = acl.first_admin()
    assert admin is not None and admin.perm("anything", False) is None  # no rules: all
    assert acl.global_white[0].matches("10.10.103.4")
    with pytest.raises(AclConfigError, match=r"accounts\[0\].*at least 6"):
        parse_plain_acl({"accounts": [{"accessKey": "ab", "secretKey": "12345678"}]})
    with pytest.raises(AclConfigError, match=r"accounts\[1\].*listed twice"):
        parse_plain_acl({"accounts": [{"accessKey": "abcdef", "secretKey": "12345678"}] * 2})
    with pytest.raises(AclConfigError, match="cannot parse topic permission 'topicA'"):
        parse_plain_acl({"accounts": [{"accessKey": "abcdef", "secretKey": "12345678",
                                       "topicPerms": ["topicA"]}]})


def test_the_signature_is_hmac_sha1_over_sorted_values_then_body():
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T", "b": "2",
                                                              "a": "1"}, b"body")
    Credentials("ak-000001", "sk-000001").sign(cmd)
    # Keys sorted: AccessKey, a, b, topic; Signature itself is not signed.
    content = b"ak-000001" + b"1" + b"2" + b"T" + b"body"
    expected = base64.b64encode(hmac.new(b"sk-000001", content, hashlib.sha1).digest())
    assert cmd.ext_fields["Signature"] == expected.decode()
    assert signed_text(cmd.ext_fields) + b"body" == content
    assert verify("sk-000001", cmd)
    assert not verify("sk-000002", cmd)
    cmd.body = b"bodY"
    assert not verify("sk-000001", cmd)
    assert "sk-000001" not in repr(Credentials("ak-000001", "sk-000001"))


def test_retry_topics_stand_for_their_group():
    pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "topic": "%RETRY%cg", "consumerGroup": "cg"})
    assert list(needed_perms(pull)) == [("cg", True, SUB), ("cg", True, SUB)]
    back = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%cg", "a": "cg"})
    assert list(needed_perms(back)) == [("cg", True, SUB)]
    heartbeat = RemotingCommand.request(RequestCode.HEART_BEAT, None, (
        b'{"consumerDataSet":[{"groupName":"cg","subscriptionDataSet":'
        b'[{"topic":"Orders"},{"topic":"%RETRY%cg"}]}]}'))
    assert list(needed_perms(heartbeat)) == [("cg", True, SUB), ("Orders", False, SUB),
                                            ("cg", True, SUB)]
