"""A security setting of RocketMQ that rocketq does not implement, set to protect something,
stops the broker (or a NameServer's or controller's --tls-config) at start with an error
naming the key and what to do; set to its harmless value, the broker starts."""

from __future__ import annotations

import pytest

from rocketq.broker import load_broker_conf
from rocketq.broker.unheeded_security import UNHEEDED
from rocketq.cli import main

from .test_cli import small_conf, start, stop

#: (key, a value that protects something, a harmless one, a phrase of what to do).
CASES = [
    ("authenticationEnabled", "true", "false", "use aclEnable=true"),
    ("authorizationEnabled", "true", "false", "use aclEnable=true"),
    ("initAuthenticationUser", '{"username":"rocketmq","password":"12345678"}', "",
     "use aclEnable=true"),
    ("enableACL", "true", "false", "use aclEnable=true"),
    ("enableAclRpcHookForClusterMode", "true", "false", "rocketq has no cluster-mode proxy"),
    ("useTLS", "true", "false", "write tls.enable=true"),
    ("bindAddress", "10.1.2.3", "0.0.0.0", "set brokerIP1=127.0.0.1"),
    ("configBlackList", "configBlackList;brokerConfigPath;namesrvAddr",
     "configBlackList;brokerConfigPath", "take those out of configBlackList"),
    ("tls.config.file", "/etc/rocketmq/tls.properties", "", "copy them in"),
    ("tls.client.authServer", "true", "false", "give tls.client.trustCertPath"),
    ("tlsCertPath", "/etc/rocketmq/proxy.crt", "", "write tlsMode=enforcing"),
    ("tlsKeyPath", "/etc/rocketmq/proxy.key", "", "write tlsMode=enforcing"),
    ("tlsEnable", "true", "false", "write tls.enable instead"),
    ("tlsServerMode", "enforcing", "disabled", "write tls.server.mode instead"),
    ("tlsServerNeedClientAuth", "require", "none", "write tls.server.need.client.auth"),
    ("tlsServerAuthClient", "true", "false", "write tls.server.authClient instead"),
    ("tlsClientAuthServer", "true", "false", "write tls.client.authServer instead"),
    ("tlsConfigFile", "/etc/rocketmq/tls.properties", "", "write tls.config.file instead"),
]


def test_every_unheeded_key_is_tried():
    assert {key for key, *_ in CASES} == set(UNHEEDED)


@pytest.mark.parametrize("key, on, off, todo", CASES, ids=[c[0] for c in CASES])
def test_a_protecting_value_refuses_the_config_and_a_harmless_one_does_not(key, on, off,
                                                                            todo):
    with pytest.raises(ValueError) as exc:
        load_broker_conf({key: on})
    text = str(exc.value)
    assert f"\n  {key}: in RocketMQ, " in text and todo in text
    assert "refusing to start" in text
    config, _ = load_broker_conf({key: off})  # starts, with the "not used" warning
    assert config.unknown.get(key, config.tls.get(key)) == off


def test_harmless_variants_of_conditional_keys_start():
    load_broker_conf({"bindAddress": "127.0.0.1"})  # where rocketq listens anyway
    load_broker_conf({"tls.client.authServer": "true",
                      "tls.client.trustCertPath": "/etc/rocketmq/ca.pem"})
    load_broker_conf({"configBlackList": "brokerIP1;listenPort"})  # refused at runtime anyway


ACL2_CONF = ('authenticationEnabled=true\nauthorizationEnabled=true\n'
             'initAuthenticationUser={"username":"rocketmq","password":"12345678"}\n')


def test_a_rocketmq_53_acl2_broker_conf_does_not_start(tmp_path, capsys):
    conf = small_conf(tmp_path, ACL2_CONF)
    assert main(["broker", "-c", conf, "--namesrv", "127.0.0.1:1",
                 "--data-dir", str(tmp_path / "store")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"rocketq: {conf}: security settings rocketq does not have; "
                          "refusing to start")
    for key in ("authenticationEnabled", "authorizationEnabled", "initAuthenticationUser"):
        assert f"\n  {key}: in RocketMQ, " in err
    assert "12345678" not in err  # the super user's password is not printed
    assert not (tmp_path / "store").exists()  # stopped before the store was touched


@pytest.mark.slow
def test_the_same_keys_set_off_start(tmp_path):
    conf = small_conf(tmp_path, ACL2_CONF.replace("true", "false").replace(
        'initAuthenticationUser={"username":"rocketmq","password":"12345678"}', ""))
    proc = start(["broker", "-c", conf, "--namesrv", "127.0.0.1:1", "--broker-port", "0",
                  "--data-dir", str(tmp_path / "store")], "listening")
    assert stop(proc) == 0
    assert "authenticationEnabled in" in proc.stderr.read()  # warned about, not refused


def test_a_namesrv_tls_config_with_an_unheeded_key_does_not_start(tmp_path, capsys):
    tls = tmp_path / "tls.properties"
    tls.write_text("tls.config.file=/etc/rocketmq/tls.properties\n")
    for argv in (["namesrv", "--port", "0", "--tls-config", str(tls)],
                 ["controller", "--port", "0", "--tls-config", str(tls)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"rocketq: {tls}: security settings rocketq does not have")
        assert "\n  tls.config.file: in RocketMQ, " in err
