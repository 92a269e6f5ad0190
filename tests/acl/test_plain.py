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
    with pytest.raises(AclConfigError, match=r"accounts\[0\].*longer than 6"):
        parse_plain_acl({"accounts": [{"accessKey": "ab", "secretKey": "12345678"}]})
    with pytest.raises(AclConfigError, match=r"accounts\[1\].*listed twice"):
        parse_plain_acl({"accounts": [{"accessKey": "abcdefg", "secretKey": "12345678"}] * 2})
    with pytest.raises(AclConfigError, match="cannot parse topic permission 'topicA'"):
        parse_plain_acl({"accounts": [{"accessKey": "abcdefg", "secretKey": "12345678",
                                       "topicPerms": ["topicA"]}]})


@pytest.mark.parametrize("access_key, secret_key, says", [
    ("abcdef", "1234567", "accessKey 'abcdef' has 6 characters"),
    ("abcdefg", "123456", "the secretKey of accessKey 'abcdefg' has 6 characters"),
    ("", "1234567", "accessKey '' has 0 characters"),
    ("abcdefg", None, "the secretKey of accessKey 'abcdefg' has 0 characters"),
])
def test_keys_of_six_characters_or_fewer_are_refused_as_rocketmq_refuses_them(
        access_key, secret_key, says):
    """PlainPermissionManager.checkPlainAccessConfig: ``length() <= 6`` is refused."""
    with pytest.raises(AclConfigError) as caught:
        parse_plain_acl({"accounts": [{"accessKey": access_key, "secretKey": secret_key}]})
    message = str(caught.value)
    assert says in message and "longer than 6 characters" in message
    assert "123456" not in message  # a secret is never shown


def test_keys_of_seven_characters_are_accepted():
    acl = parse_plain_acl({"accounts": [{"accessKey": "abcdefg", "secretKey": "1234567"}]})
    assert acl.accounts["abcdefg"].secret_key == "1234567"


def test_unknown_keys_are_warned_about_with_the_nearest_known_one(caplog):
    with caplog.at_level("WARNING", logger="rocketq.acl"):
        acl = parse_plain_acl({
            "globalWhiteRemoteAdresses": ["10.0.0.*"],
            "dataVersion": [{"counter": 1, "timestamp": 0}],  # RocketMQ writes it back
            "accounts": [{"accessKey": "abcdefg", "secretKey": "1234567",
                          "defaultTopicPem": "PUB", "Admin": True, "colour": "blue"}]},
            "conf/plain_acl.yml")
    assert acl.warnings == [
        "unknown key globalWhiteRemoteAdresses in conf/plain_acl.yml, ignored: did you mean "
        "globalWhiteRemoteAddresses?",
        "unknown key defaultTopicPem in accounts[0] of conf/plain_acl.yml, ignored: did you "
        "mean defaultTopicPerm?",
        "unknown key Admin in accounts[0] of conf/plain_acl.yml, ignored: did you mean admin?",
        "unknown key colour in accounts[0] of conf/plain_acl.yml, ignored"]
    assert [r.getMessage() for r in caplog.records] == acl.warnings
    # Ignored, as RocketMQ ignores them: the account keeps its defaults.
    assert acl.accounts["abcdefg"].default_topic_perm == DENY
    assert not acl.accounts["abcdefg"].admin and not acl.global_white


def test_a_misspelt_access_key_is_explained_before_it_is_refused(caplog):
    with caplog.at_level("WARNING", logger="rocketq.acl"), \
            pytest.raises(AclConfigError, match="accessKey '' has 0 characters"):
        parse_plain_acl({"accounts": [{"AccessKey": "abcdefg", "secretKey": "1234567"}]})
    assert "unknown key AccessKey in accounts[0] of plain_acl.yml, ignored: did you mean " \
           "accessKey?" in caplog.text


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
