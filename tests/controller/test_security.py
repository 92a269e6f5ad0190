"""The controller's port takes the ACL and TLS as the NameServer's and the broker's do: a
stranger can neither elect a master nor change a SyncStateSet, brokers sign their requests
with their own credentials, a TLS controller serves TLS brokers and turns plain clients away,
and Raft between controller nodes is encrypted with a shared secret."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import orjson
import pytest

from rocketq.acl import CONTROLLER_ADMIN_CODES, AccessControl, Credentials
from rocketq.controller import Controller, ControllerConfig, RaftEngine
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient, TlsSettings

from ..certs import make_pki
from ..conftest import run_async, until, wait_for
from ..remoting.test_tls import client_ctx, tls_connections
from ..servers import ServerThread
from .conftest import port_pair

ADMIN = ("broker-admin", "broker-secret-1")
USER = ("app-user", "app-secret-1")
ACL = """
globalWhiteRemoteAddresses:
accounts:
  - accessKey: broker-admin
    secretKey: broker-secret-1
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: app-user
    secretKey: app-secret-1
    admin: false
"""
FAST = ControllerConfig(scanNotActiveBrokerInterval=50, masterLeaseMillis=1000)
GROUP = {"clusterName": "c", "brokerName": "g"}


@pytest.fixture
def acl_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_settings(pki) -> TlsSettings:
    return TlsSettings(mode="enforcing", cert_path=pki.server_cert, key_path=pki.server_key)


async def ask(client: RemotingClient, addr: str, code: int, fields: dict, body: bytes = b"",
              credentials: tuple[str, str] | None = None) -> RemotingCommand:
    cmd = RemotingCommand.request(code, fields, body=body)
    if credentials is not None:
        Credentials(*credentials).sign(cmd)
    return await client.invoke(addr, cmd, 5)


def snapshot(controller: Controller) -> dict:
    """What a request could change: every group as the state machine holds it, and the
    liveness table."""
    groups = controller.engine.state.groups
    return {"groups": {name: g.info() for name, g in groups.items()},
            "live": {name: sorted(by_id) for name, by_id in controller.live.items()}}


def test_a_stranger_can_neither_elect_a_master_nor_change_the_sync_state_set(acl_file):
    async def main():
        port = port_pair()
        addr = f"127.0.0.1:{port}"
        acl = AccessControl(acl_file, CONTROLLER_ADMIN_CODES)
        controller = Controller(RaftEngine(addr, [addr]), "127.0.0.1", port, FAST, acl=acl)
        await controller.start()
        client = RemotingClient()
        try:
            await until(controller.engine.is_leader, 15)
            # Brokers 1 and 2 join with the admin account; 1 is master, the set is {1}.
            for broker in ("127.0.0.1:1001", "127.0.0.1:1002"):
                r = await ask(client, addr, RequestCode.CONTROLLER_REGISTER_BROKER, {
                    **GROUP, "brokerAddress": broker, "brokerId": -1}, credentials=ADMIN)
                assert r.code == ResponseCode.SUCCESS, r.remark
            r = await ask(client, addr, RequestCode.CONTROLLER_ELECT_MASTER,
                          {**GROUP, "brokerId": 1}, credentials=ADMIN)
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["masterEpoch"] == "1"
            # A second group registered, without a master yet.
            r = await ask(client, addr, RequestCode.CONTROLLER_REGISTER_BROKER, {
                "clusterName": "c", "brokerName": "h", "brokerAddress": "127.0.0.1:1003",
                "brokerId": -1}, credentials=ADMIN)
            assert r.code == ResponseCode.SUCCESS
            before = snapshot(controller)
            alter = (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                     {"brokerName": "g", "masterBrokerId": 1, "masterEpoch": 1},
                     orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1}))
            elect = (RequestCode.CONTROLLER_ELECT_MASTER,
                     {"clusterName": "c", "brokerName": "h", "brokerId": 1}, b"")
            stranger = [
                (alter, None, "not signed"), (alter, ("broker-admin", "guessed"),
                                              "Check signature failed"),
                (alter, USER, "Need admin permission"), (elect, None, "not signed"),
                (elect, ("nobody", "x"), "unknown AccessKey"),
                (elect, USER, "Need admin permission"),
                ((RequestCode.CONTROLLER_REGISTER_BROKER, {
                    "clusterName": "c", "brokerName": "evil", "brokerAddress": "10.0.0.9:1",
                    "brokerId": -1}, b""), None, "not signed"),
                ((RequestCode.BROKER_HEARTBEAT, {
                    **GROUP, "brokerAddr": "10.0.0.9:1", "brokerId": 7, "epoch": 1,
                    "maxOffset": 1 << 40}, b""), USER, "Need admin permission"),
                ((RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "g"}, b""), None,
                 "not signed"),
                ((RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, b""), None, "not signed"),
            ]
            for (code, fields, body), credentials, why in stranger:
                r = await ask(client, addr, code, fields, body, credentials)
                assert r.code == ResponseCode.NO_PERMISSION, (code, credentials, r.code)
                assert r.remark.startswith("access denied: ") and why in r.remark, r.remark
            await asyncio.sleep(0.3)  # anything committed would be applied by now
            assert snapshot(controller) == before
            assert controller.engine.state.groups["h"].master_id is None
            assert controller.engine.state.groups["g"].sync_state_set == {1}
            # Reads need a signed account, not an admin one; changes need the admin.
            r = await ask(client, addr, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                          {"brokerName": "g"}, credentials=USER)
            assert r.code == ResponseCode.SUCCESS
            r = await ask(client, addr, *alter, credentials=ADMIN)
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert controller.engine.state.groups["g"].sync_state_set == {1, 2}
            assert acl.refused == {"unsigned": 5, "bad_signature": 1, "not_admin": 3,
                                   "unknown_access_key": 1}
        finally:
            await client.close()
            await controller.stop()
    run_async(main())


def start_controller(st: ServerThread, **security) -> tuple[Controller, dict]:
    """A Raft controller node in the server thread, and the settings of a broker group that
    follows it."""
    port = port_pair()
    addr = f"127.0.0.1:{port}"

    async def go():
        node = Controller(RaftEngine(addr, [addr]), "127.0.0.1", port, FAST, **security)
        await node.start()
        return node
    controller = st.call(go())
    assert wait_for(controller.engine.is_leader, 15)
    return controller, dict(
        brokerName="broker-a", enableControllerMode=True, controllerAddr=addr,
        brokerHeartbeatInterval=200, controllerHeartBeatTimeoutMills=1000,
        checkSyncStateSetPeriod=200, syncBrokerMetadataPeriod=300)


def fail_over(st: ServerThread, controller: Controller, conf: dict) -> None:
    """Two brokers of a group: the first is elected, the second follows and is in sync; the
    master stops and the second takes over."""
    a = st.start_broker("a", **conf)
    b = st.start_broker("b", **conf)
    group = controller.engine.state.groups["broker-a"]
    assert a.replicas.is_master and not b.replicas.is_master
    assert wait_for(lambda: group.sync_state_set == {1, 2}, 10)
    assert wait_for(lambda: b.ha_client is not None and b.ha_client.connected_to, 10)
    st.stop_broker(a)
    assert wait_for(lambda: b.replicas.is_master, 10)
    assert group.master_epoch == 2 and group.master_id == 2


def test_a_group_with_the_acl_on_elects_and_fails_over(tmp_path, acl_file):
    st = ServerThread(tmp_path)
    controller = None
    try:
        st.start_namesrv(acl_file=acl_file)
        controller, conf = start_controller(
            st, acl=AccessControl(acl_file, CONTROLLER_ADMIN_CODES),
            signer=Credentials(*ADMIN).sign)
        # The brokers sign with the first admin account of their own ACL file.
        conf.update(aclEnable=True, aclFile=acl_file)
        fail_over(st, controller, conf)
        assert controller.acl.refused == {}
        b = st.brokers[0]
        assert b.acl.refused == {}  # the controller's notices were signed too
    finally:
        if controller is not None:
            st.call(controller.stop())
        st.stop()


def test_unsigned_brokers_cannot_join_a_controller_with_the_acl_on(tmp_path, acl_file):
    st = ServerThread(tmp_path)
    controller = None
    try:
        st.start_namesrv()
        controller, conf = start_controller(
            st, acl=AccessControl(acl_file, CONTROLLER_ADMIN_CODES))
        a = st.start_broker("a", **conf)  # no credentials of its own
        assert a.replicas.role is None and not a.replicas.is_master
        assert "broker-a" not in controller.engine.state.groups
        assert controller.acl.refused.get("unsigned", 0) > 0
    finally:
        if controller is not None:
            st.call(controller.stop())
        st.stop()


def test_a_tls_controller_serves_tls_brokers_and_turns_plain_clients_away(tmp_path, pki):
    st = ServerThread(tmp_path)
    controller = None
    try:
        st.start_namesrv(tls=tls_settings(pki))
        controller, conf = start_controller(st, tls=tls_settings(pki), ssl=client_ctx(pki))
        conf.update({"tlsMode": "enforcing", "tls.server.certPath": pki.server_cert,
                     "tls.server.keyPath": pki.server_key,
                     "tls.client.trustCertPath": pki.ca})
        fail_over(st, controller, conf)
        served = tls_connections(controller.server)
        assert served and all(served)

        async def plain_and_tls():
            results = []
            for ssl in (None, client_ctx(pki)):
                client = RemotingClient(ssl=ssl)
                try:
                    results.append(await client.invoke(controller.address, RemotingCommand
                                                       .request(RequestCode.CONTROLLER_ELECT_MASTER,
                                                                {**GROUP, "brokerId": 1}), 5))
                finally:
                    await client.close()
            return results
        before = snapshot(controller)
        plain, tls = st.call(plain_and_tls())
        assert plain.code == ResponseCode.SYSTEM_ERROR and "tlsMode=enforcing" in plain.remark
        assert tls.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED  # served
        assert snapshot(controller)["groups"] == before["groups"]
    finally:
        if controller is not None:
            st.call(controller.stop())
        st.stop()


def test_raft_between_controllers_is_encrypted_with_their_shared_secret():
    async def main():
        ports = [port_pair() for _ in range(3)]
        peers = [f"127.0.0.1:{p}" for p in ports]
        secrets = ["shared-secret", "shared-secret", "another-secret"]
        nodes = [Controller(RaftEngine(addr, peers, password=secret), "127.0.0.1", p, FAST)
                 for addr, p, secret in zip(peers, ports, secrets, strict=True)]
        for node in nodes:
            await node.start()
        try:
            good, outsider = nodes[:2], nodes[2]
            leader = await until(lambda: next((n for n in good if n.engine.is_leader()),
                                              None), 20)
            await leader.engine.propose({"op": "register", "cluster": "c", "group": "g",
                                         "broker_id": -1, "addr": "127.0.0.1:1",
                                         "ha_addr": ""})
            follower = next(n for n in good if n is not leader)
            await until(lambda: "g" in follower.engine.state.groups, 10)
            # The node without the secret reads nothing of the log and leads nobody.
            await asyncio.sleep(1.5)
            assert "g" not in outsider.engine.state.groups
            assert not outsider.engine.is_leader() and outsider.engine.leader() is None
            assert leader.engine.is_leader()
        finally:
            for node in nodes:
                await node.stop()
    run_async(main(), 90)


# ---------------------------------------------------------------- the command line


def _start(argv: list[str], marker: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "rocketq.cli", "--log-level", "WARNING",
                             *argv], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if marker in line:
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait(10)
    raise AssertionError(f"{argv[0]} did not start")


@pytest.mark.parametrize("how", ["controller", "namesrv"])
def test_the_command_line_gives_the_controller_its_acl_tls_and_secret(tmp_path, acl_file, pki,
                                                                      how):
    tls = tmp_path / "tls.properties"
    tls.write_text(f"tlsMode=enforcing\ntls.server.certPath={pki.server_cert}\n"
                   f"tls.server.keyPath={pki.server_key}\n")
    secret = tmp_path / "secret"
    secret.write_text("cluster-secret\n")
    port = port_pair()
    common = ["--acl-file", acl_file, "--tls-config", str(tls)]
    if how == "controller":
        argv = ["controller", "--port", str(port), "--secret-file", str(secret), *common]
        marker = "Controller listening"
    else:
        argv = ["namesrv", "--port", str(port_pair()), "--enable-controller",
                "--controller-port", str(port), "--controller-secret-file", str(secret),
                *common]
        marker = "NameServer listening"
    proc = _start(argv, marker)
    addr = f"127.0.0.1:{port}"

    async def main():
        results = []
        for ssl, credentials in ((None, ADMIN), (client_ctx(pki), None),
                                 (client_ctx(pki), ADMIN)):
            client = RemotingClient(ssl=ssl)
            try:
                results.append(await until(lambda c=client, k=credentials: _try(ask(
                    c, addr, RequestCode.CONTROLLER_GET_METADATA_INFO, {}, credentials=k)),
                    20))
            finally:
                await client.close()
        return results
    try:
        plain, unsigned, signed = run_async(main())
        assert plain.code == ResponseCode.SYSTEM_ERROR and "tlsMode=enforcing" in plain.remark
        assert unsigned.code == ResponseCode.NO_PERMISSION and "not signed" in unsigned.remark
        assert signed.code == ResponseCode.SUCCESS
    finally:
        proc.terminate()
        proc.wait(15)


async def _try(request):
    """The answer, or None while the node is not serving yet (its Raft is electing)."""
    try:
        r = await request
    except OSError:
        return None
    if r.code == ResponseCode.SUCCESS and not r.ext_fields.get("controllerLeaderAddress"):
        return None  # no leader yet
    return r


def test_a_controller_secret_file_must_hold_a_secret(tmp_path):
    empty = tmp_path / "secret"
    empty.write_text("\n")
    done = subprocess.run([sys.executable, "-m", "rocketq.cli", "controller", "--port",
                           str(port_pair()), "--secret-file", str(empty)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 1
    assert "the controller secret file" in done.stderr and "is empty" in done.stderr
