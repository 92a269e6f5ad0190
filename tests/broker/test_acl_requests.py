"""RocketMQ's ACL admin requests (50-54) on a real broker with aclEnable: accounts created,
changed and deleted through the admin client and ``rocketq admin acl``, written to
plain_acl.yml, and in force for the next request; only for a signed admin account, white
lists notwithstanding; a file broken by hand reported without quoting it."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import yaml

from rocketq import Admin, BrokerError, Message, Producer
from rocketq.acl import Credentials
from rocketq.aio import Admin as AsyncAdmin
from rocketq.cli import main
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient, run

ADMIN = ("rocketq-admin", "admin-secret-1")
USER = ("app-user", "app-secret-1")
NEW = ("new-user-1", "new-secret-1")
ACL = """# the accounts of this broker
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: rocketq-admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: app-user
    secretKey: app-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Orders=PUB|SUB
"""


@pytest.fixture
def acl_broker(st, tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    broker = st.start_broker(aclEnable="true", aclFile=str(path))
    with Admin(st.namesrv, credentials=ADMIN) as admin:
        admin.create_topic("Orders", 1)
        admin.create_topic("Audit", 1)
    return st, broker, path


def _send(namesrv: str, credentials: tuple[str, str], topic: str) -> str:
    """SEND_OK, or the refusal's text."""
    with Producer("acl-producer", namesrv=namesrv, credentials=credentials, retries=0) as p:
        try:
            return p.send(Message(topic, b"x")).status.name
        except BrokerError as exc:
            return str(exc)


def test_accounts_changed_over_the_wire_are_in_force_at_once(acl_broker):
    st, broker, path = acl_broker
    ns = st.namesrv
    with Admin(ns, credentials=ADMIN) as admin:
        users = {u.access_key: u for u in admin.acl_users()}
        assert set(users) == {"rocketq-admin", "app-user"}
        app = users["app-user"]
        assert (app.secret_key, app.admin, app.default_topic_perm, app.default_group_perm,
                app.topic_perms, app.brokers) == ("app-secret-1", False, "DENY", "SUB",
                                                  {"Orders": "PUB|SUB"}, [broker.address])

        assert "No acl config" in _send(ns, NEW, "Audit")
        assert admin.update_acl_user(NEW[0], secret_key=NEW[1],
                                     topic_perms={"Audit": "PUB"}) == [broker.address]
        assert _send(ns, NEW, "Audit") == "SEND_OK"
        assert "No PUB permission for topic Orders" in _send(ns, NEW, "Orders")
        data = yaml.safe_load(path.read_text())
        [written] = [a for a in data["accounts"] if a["accessKey"] == NEW[0]]
        assert written == {"accessKey": NEW[0], "secretKey": NEW[1], "topicPerms": ["Audit=PUB"]}
        assert data["dataVersion"][0]["counter"] == 1

        # A change of the fields given; the others (the secret) stay.
        admin.update_acl_user(NEW[0], topic_perms={"Audit": "SUB"}, default_group_perm="SUB")
        assert "No PUB permission for topic Audit" in _send(ns, NEW, "Audit")
        account = broker.acl.acl.accounts[NEW[0]]
        assert account.secret_key == NEW[1] and not account.admin
        assert yaml.safe_load(path.read_text())["dataVersion"][0]["counter"] == 2

        # Refused, and the file is left as it was.
        before = path.read_text()
        with pytest.raises(BrokerError, match="accessKey 'short'"):
            admin.update_acl_user("short", secret_key="long-enough-1")
        with pytest.raises(BrokerError, match="needs its secretKey"):
            admin.update_acl_user("brand-new-2")
        with pytest.raises(ValueError, match="default_topic_perm"):
            admin.update_acl_user(NEW[0], default_topic_perm="ALL")
        assert path.read_text() == before

        admin.update_acl_white_list(["10.1.2.*", "192.168.0.1"])
        config = admin.acl_config()
        assert config.global_white_addresses == ["10.1.2.*", "192.168.0.1"]
        assert [p.text for p in broker.acl.acl.global_white] == ["10.1.2.*", "192.168.0.1"]

        r = _ask(broker.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO))
        assert r.code == ResponseCode.SUCCESS
        assert r.ext_fields["brokerName"] == "broker-a"
        assert r.ext_fields["brokerAddr"] == broker.address
        assert orjson.loads(r.ext_fields["version"])["counter"] == 3  # three changes

        assert admin.delete_acl_user(NEW[0]) == [broker.address]
        assert NEW[0] not in broker.acl.acl.accounts
        assert "No acl config" in _send(ns, NEW, "Audit")
        with pytest.raises(BrokerError, match="not in the ACL file"):
            admin.delete_acl_user(NEW[0])

    # Reading the accounts shows secrets: admins only.
    with Admin(ns, credentials=USER) as admin, \
            pytest.raises(BrokerError, match="Need admin permission"):
        admin.acl_users()


def _ask(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    """``cmd`` signed by the admin account, sent on a connection of its own."""
    async def go() -> RemotingCommand:
        client = RemotingClient()
        try:
            Credentials(*ADMIN).sign(cmd)
            return await client.invoke(addr, cmd, 3)
        finally:
            await client.close()
    return run(go())


def test_a_broker_without_acl_refuses_the_requests(servers):
    with Admin(servers.namesrv) as admin:
        with pytest.raises(BrokerError, match="aclEnable=false"):
            admin.acl_users()
        with pytest.raises(BrokerError, match="aclEnable=false"):
            admin.update_acl_user(*NEW[:1], secret_key=NEW[1])


def test_the_acl_commands(acl_broker, capsys):
    st, broker, path = acl_broker
    acl = ["admin", "--namesrv", st.namesrv, "--access-key", ADMIN[0], "--secret-key",
           ADMIN[1], "acl"]
    assert main([*acl, "update", NEW[0], "--user-secret", NEW[1], "--topic-perm",
                 "Audit=PUB", "--topic-perm", "Orders=sub", "--default-group-perm",
                 "SUB"]) == 0
    assert f"{broker.address}: updated {NEW[0]}" in capsys.readouterr().out
    account = broker.acl.acl.accounts[NEW[0]]
    assert account.topic_perms == {"Audit": 4, "Orders": 8}  # PUB, SUB
    assert _send(st.namesrv, NEW, "Audit") == "SEND_OK"

    assert main([*acl, "list"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert rows[NEW[0]][1] == "********" and "Audit=PUB" in rows[NEW[0]]
    assert main([*acl, "list", "--secrets", "--json"]) == 0
    assert NEW[1] in capsys.readouterr().out

    assert main([*acl, "white-list", "10.9.9.*"]) == 0
    capsys.readouterr()
    assert yaml.safe_load(path.read_text())["globalWhiteRemoteAddresses"] == ["10.9.9.*"]
    assert main([*acl, "update", "tiny", "--user-secret", "long-enough-1"]) == 1
    assert "accessKey 'tiny'" in capsys.readouterr().err
    assert main([*acl, "delete", NEW[0]]) == 0
    assert NEW[0] not in broker.acl.acl.accounts
    # Unsigned: refused, as any admin request.
    assert main(["admin", "--namesrv", st.namesrv, "acl", "list"]) == 1
    assert "not signed" in capsys.readouterr().err


def _unsigned(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    """``cmd`` sent unsigned, on a connection of its own."""
    async def go() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, cmd, 3)
        finally:
            await client.close()
    return run(go())


def test_white_lists_do_not_pass_the_acl_requests(st, tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL.replace("globalWhiteRemoteAddresses: []",
                                "globalWhiteRemoteAddresses: ['127.0.0.1']")
                    + "  - accessKey: trusted-host\n    secretKey: trusted-secret-1\n"
                      "    whiteRemoteAddress: 127.0.0.1\n    admin: true\n")
    broker = st.start_broker(aclEnable="true", aclFile=str(path))
    # Any other request from a white-listed address needs no signature, as in RocketMQ...
    r = _unsigned(broker.address, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert r.code == ResponseCode.SUCCESS
    with Admin(st.namesrv) as admin:
        admin.create_topic("Whitelisted", 1)
        # ...but the ACL's own need a signed admin account from anywhere.
        with pytest.raises(BrokerError, match="not signed"):
            admin.acl_users()
        with pytest.raises(BrokerError, match="not signed"):
            admin.update_acl_user("intruder-1", secret_key="intruder-secret", admin=True)
    for code in (RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG,
                 RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
                 RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                 RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG):
        r = _unsigned(broker.address, RemotingCommand.request(code, {"accessKey": "x"}))
        assert r.code == ResponseCode.NO_PERMISSION, (code, r.remark)
    # An account white-listed for this address: its name alone, or a wrong signature, is
    # not enough either; a non-admin account signed right is refused as not an admin.
    named = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
                                    {"AccessKey": "trusted-host"})
    assert "no Signature" in _unsigned(broker.address, named).remark
    forged = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
    Credentials("trusted-host", "not-the-secret").sign(forged)
    assert "Check signature failed" in _unsigned(broker.address, forged).remark
    with Admin(st.namesrv, credentials=USER) as admin, \
            pytest.raises(BrokerError, match="Need admin permission"):
        admin.acl_users()
    with Admin(st.namesrv, credentials=("trusted-host", "trusted-secret-1")) as admin:
        assert "intruder-1" not in {u.access_key for u in admin.acl_users()}
    assert "intruder-1" not in path.read_text()


def test_a_file_broken_by_hand_is_reported_by_line_and_column_only(acl_broker, caplog):
    st, broker, path = acl_broker
    secret = "hidden-secret-77"
    path.write_text(ACL + f"  - accessKey: leaky\n    secretKey: {secret}: [\n")
    with Admin(st.namesrv, credentials=ADMIN) as admin:
        with pytest.raises(BrokerError) as refused:
            admin.update_acl_user(NEW[0], secret_key=NEW[1])
        assert "plain_acl.yml is not valid YAML at line 14, column " in str(refused.value)
        with pytest.raises(BrokerError, match="not valid YAML at line 14"):
            admin.acl_users()
    assert secret not in str(refused.value)
    assert secret not in caplog.text and "not valid YAML at line 14" in caplog.text
    assert path.read_text().endswith(f"{secret}: [\n")  # left as it was


def test_changes_made_at_once_all_land(acl_broker):
    st, broker, path = acl_broker
    keys = [f"parallel-user-{i}" for i in range(6)]

    async def change_all() -> None:
        async with AsyncAdmin(st.namesrv, credentials=ADMIN) as admin:
            await asyncio.gather(*(admin.update_acl_user(k, secret_key=k + "-secret")
                                   for k in keys))
    run(change_all())
    written = {a["accessKey"] for a in yaml.safe_load(path.read_text())["accounts"]}
    assert set(keys) <= written and set(keys) <= set(broker.acl.acl.accounts)
    assert yaml.safe_load(path.read_text())["dataVersion"][0]["counter"] == len(keys)
