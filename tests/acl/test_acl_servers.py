"""The ACL on real NameServer and Broker ports: signed clients served, every kind of bad
request refused with a remark that says why, other connections untouched, the file reloaded
while the servers run."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import pytest

from rocketq.acl import Credentials
from rocketq.client.admin import AsyncAdmin
from rocketq.client.errors import BrokerError, NameServerError
from rocketq.client.message import Message
from rocketq.client.producer import AsyncProducer
from rocketq.client.pull import AsyncPullConsumer
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient

from ..conftest import run_async

ADMIN = ("rocketq-admin", "admin-secret-1")
USER = ("app-user", "app-secret-1")
ACL = """
globalWhiteRemoteAddresses:
accounts:
  - accessKey: rocketq-admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: app-user
    secretKey: app-secret-1
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Orders=PUB|SUB
      - ReadOnly=SUB
      - Audit={audit}
    groupPerms:
      - cg-orders=SUB
  - accessKey: trusted-host
    secretKey: trusted-secret
    whiteRemoteAddress: {trusted}
"""


def write_acl(path, *, audit="SUB", trusted="192.168.77.*"):
    path.write_text(ACL.format(audit=audit, trusted=trusted))
    # A rewrite within the same clock tick and size must still be seen as a change.
    os.utime(path, ns=(time.time_ns(), time.time_ns()))


async def start(cluster, tmp_path):
    acl = tmp_path / "plain_acl.yml"
    write_acl(acl)
    await cluster.start_namesrv(acl_file=str(acl))
    broker = await cluster.start_broker(aclEnable="true", aclFile=str(acl))
    async with AsyncAdmin(cluster.namesrv, credentials=ADMIN) as admin:
        for topic in ("Orders", "ReadOnly", "Audit"):
            await admin.create_topic(topic, queues=2)
    return acl, broker


def send_request(topic: str, body: bytes = b"payload") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
        "a": "pg-acl", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false",
        "m": "false"}, body)


async def ask(addr: str, cmd: RemotingCommand, credentials=None) -> RemotingCommand:
    client = RemotingClient()
    try:
        if credentials is not None:
            Credentials(*credentials).sign(cmd)
        return await client.invoke(addr, cmd, 3)
    finally:
        await client.close()


def test_a_signed_producer_and_consumer_are_served(cluster, tmp_path):
    async def main():
        await start(cluster, tmp_path)
        try:
            async with AsyncProducer("pg-acl", cluster.namesrv, credentials=USER) as producer:
                sent = [await producer.send(Message("Orders", f"o{i}".encode()))
                        for i in range(5)]
            assert all(r.status.value == "SEND_OK" for r in sent)
            consumer = AsyncPullConsumer("cg-orders", cluster.namesrv, credentials=USER,
                                         from_where="first")
            consumer.subscribe("Orders")
            await consumer.start()
            got: list[bytes] = []
            try:
                deadline = time.monotonic() + 15
                while len(got) < 5 and time.monotonic() < deadline:
                    got += [m.body for m in await consumer.poll(1)]
            finally:
                await consumer.shutdown()
            assert sorted(got) == [f"o{i}".encode() for i in range(5)]
        finally:
            await cluster.stop()
    run_async(main())


def test_each_bad_request_is_refused_with_its_reason_and_others_carry_on(cluster, tmp_path,
                                                                        caplog):
    async def main():
        _, broker = await start(cluster, tmp_path)
        addr = broker.address
        # A good producer keeps sending on its own connection throughout.
        producer = AsyncProducer("pg-good", cluster.namesrv, credentials=USER)
        await producer.start()
        try:
            cases = {
                "wrong secret": (send_request("Orders"), ("app-user", "not-the-secret")),
                "unknown key": (send_request("Orders"), ("nobody-at-all", "whatever-1")),
                "no PUB on topic": (send_request("ReadOnly"), USER),
                "admin code": (RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": "Sneaky", "readQueueNums": "1", "writeQueueNums": "1",
                    "perm": "6"}), USER),
                "no SUB on group": (RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "cg-other", "topic": "Orders", "queueId": "0",
                    "queueOffset": "0", "maxMsgNums": "1", "sysFlag": "0",
                    "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}),
                    USER),
                "unsigned": (send_request("Orders"), None),
            }
            expected = {
                "wrong secret": "Check signature failed for accessKey=app-user",
                "unknown key": "No acl config for nobody-at-all",
                "no PUB on topic": "No PUB permission for topic ReadOnly",
                "admin code": "Need admin permission for request code=17",
                "no SUB on group": "No SUB permission for group cg-other",
                "unsigned": "not signed",
            }
            for name, (cmd, creds) in cases.items():
                r = await ask(addr, cmd, creds)
                assert r.code == ResponseCode.NO_PERMISSION, (name, r.remark)
                assert expected[name] in r.remark, (name, r.remark)
                assert (await producer.send(Message("Orders", name.encode()))).status \
                    .value == "SEND_OK"

            # A signature without AccessKey's companion, and a body changed after signing.
            cmd = send_request("Orders")
            Credentials(*USER).sign(cmd)
            del cmd.ext_fields["Signature"]
            r = await ask(addr, cmd)
            assert r.code == ResponseCode.NO_PERMISSION and "no Signature" in r.remark
            cmd = send_request("Orders", b"original")
            Credentials(*USER).sign(cmd)
            cmd.body = b"tampered"
            r = await ask(addr, cmd)
            assert r.code == ResponseCode.NO_PERMISSION and "Check signature failed" in r.remark
            def stored() -> int:
                return sum(broker.store.get_max_offset("Orders", q) for q in (0, 1))
            deadline = time.monotonic() + 5
            while stored() < 6 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert stored() == 6  # the good producer's messages, nothing refused

            # The NameServer checks too: an unsigned route query, a non-admin registration.
            ns = cluster.namesrvs[0].address
            r = await ask(ns, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                      {"topic": "Orders"}))
            assert r.code == ResponseCode.NO_PERMISSION and "not signed" in r.remark
            r = await ask(ns, RemotingCommand.request(RequestCode.REGISTER_BROKER, {
                "brokerName": "evil", "brokerAddr": "127.0.0.1:1", "clusterName": "c",
                "brokerId": "0", "haServerAddr": ""}), USER)
            assert r.code == ResponseCode.NO_PERMISSION and "Need admin permission" in r.remark
            r = await ask(ns, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                      {"topic": "Orders"}), USER)
            assert r.code == ResponseCode.SUCCESS
        finally:
            await producer.shutdown()
            await cluster.stop()

    with caplog.at_level(logging.WARNING, logger="rocketq.acl"):
        run_async(main())
    refusals = [r.getMessage() for r in caplog.records if "refused request" in r.getMessage()]
    assert len(refusals) == len(set(refusals))


def test_a_refusal_is_logged_once_per_client_and_reason(cluster, tmp_path, caplog):
    async def main():
        _, broker = await start(cluster, tmp_path)
        try:
            for _ in range(5):
                r = await ask(broker.address, send_request("ReadOnly"), USER)
                assert r.code == ResponseCode.NO_PERMISSION
        finally:
            await cluster.stop()
    with caplog.at_level(logging.WARNING, logger="rocketq.acl"):
        run_async(main())
    assert sum("No PUB permission for topic ReadOnly" in r.getMessage()
               for r in caplog.records) == 1


def test_white_listed_addresses_need_no_signature_and_others_do(cluster, tmp_path):
    async def main():
        acl, broker = await start(cluster, tmp_path)
        try:
            unsigned = send_request("Orders")
            unsigned.ext_fields["AccessKey"] = "trusted-host"  # named, but not signed
            r = await ask(broker.address, unsigned)
            assert r.code == ResponseCode.NO_PERMISSION  # 127.0.0.1 is outside 192.168.77.*
            assert "no Signature" in r.remark
            write_acl(acl, trusted="127.0.0.1")
            assert broker.acl.reload_if_changed()
            unsigned = send_request("Orders")
            unsigned.ext_fields["AccessKey"] = "trusted-host"
            r = await ask(broker.address, unsigned)
            assert r.code == ResponseCode.SUCCESS, r.remark
        finally:
            await cluster.stop()
    run_async(main())


def test_the_acl_file_is_reloaded_while_the_servers_run(cluster, tmp_path):
    async def main():
        acl, broker = await start(cluster, tmp_path)
        producer = AsyncProducer("pg-acl", cluster.namesrv, credentials=USER, retries=0)
        await producer.start()
        try:
            with pytest.raises(BrokerError, match="No PUB permission for topic Audit"):
                await producer.send(Message("Audit", b"early"))
            write_acl(acl, audit="PUB")  # no restart: the watcher picks it up
            deadline = time.monotonic() + 10
            while True:
                try:
                    r = await producer.send(Message("Audit", b"late"))
                    break
                except BrokerError:
                    assert time.monotonic() < deadline, "the new permission never applied"
                    await asyncio.sleep(0.2)
            assert r.status.value == "SEND_OK"
            # A broken file is reported and the accounts in force stay.
            acl.write_text("accounts: [ {accessKey: x")
            await asyncio.sleep(3 * broker.acl.WATCH_INTERVAL)
            assert (await producer.send(Message("Audit", b"still"))).status.value == "SEND_OK"
        finally:
            await producer.shutdown()
            await cluster.stop()
    run_async(main())


def test_clients_without_credentials_get_a_clear_error(cluster, tmp_path):
    async def main():
        await start(cluster, tmp_path)
        try:
            producer = AsyncProducer("pg-acl", cluster.namesrv)
            await producer.start()
            try:
                with pytest.raises(NameServerError, match="access denied: the request is "
                                                          "not signed"):
                    await producer.send(Message("Orders", b"x"))
            finally:
                await producer.shutdown()
        finally:
            await cluster.stop()
    run_async(main())
