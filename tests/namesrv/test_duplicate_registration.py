"""Two brokers under one name and id: the NameServer keeps the one registered and alive, and
refuses the other, unless the newcomer brings a higher master epoch (controller-mode
failover) or the holder is gone (connection closed, heartbeat expired)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import orjson
import pytest

from rocketq import Message, Producer, PullConsumer, SendStatus
from rocketq.broker.replication.registration import DuplicateBrokerError
from rocketq.namesrv import NameServer
from rocketq.protocol import RequestCode, ResponseCode
from rocketq.protocol.command import RemotingCommand
from rocketq.remoting import RemotingClient

from ..cli.test_cli import SMALL_FILES, free_port, start, stop
from ..conftest import fetch_route, wait_for
from ..servers import ServerThread
from .test_namesrv import register_cmd


def with_state_version(cmd: RemotingCommand, version: int) -> RemotingCommand:
    """``cmd`` (a REGISTER_BROKER) with its dataVersion's stateVersion set to ``version``."""
    body = orjson.loads(cmd.body)
    body["topicConfigSerializeWrapper"]["dataVersion"]["stateVersion"] = version
    cmd.body = orjson.dumps(body)
    cmd.ext_fields["bodyCrc32"] = "0"
    return cmd


async def master_of(client: RemotingClient, ns: NameServer) -> str | None:
    r = await client.invoke(ns.address, RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}))
    if r.code != ResponseCode.SUCCESS:
        return None
    return orjson.loads(r.body)["brokerDatas"][0]["brokerAddrs"].get("0")


def test_a_second_address_for_a_live_name_and_id_is_refused(caplog):
    async def main():
        ns = NameServer("127.0.0.1", 0, scan_interval=0.1)
        await ns.start()
        real, stray, asker = RemotingClient(), RemotingClient(), RemotingClient()
        try:
            assert (await real.invoke(ns.address, register_cmd(addr="127.0.0.1:10911"))
                    ).code == ResponseCode.SUCCESS
            with caplog.at_level(logging.ERROR, "rocketq.namesrv"):
                r = await stray.invoke(ns.address, register_cmd(addr="127.0.0.1:20911"))
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert r.ext_fields["conflictBrokerAddr"] == "127.0.0.1:10911"
            assert "127.0.0.1:10911" in r.remark and "127.0.0.1:20911 refused" in r.remark
            assert "registered from 127.0.0.1:10911" in caplog.text
            assert await master_of(asker, ns) == "127.0.0.1:10911"
            info = ns.routes.cluster_info()["brokerAddrTable"]["broker-a"]["brokerAddrs"]
            assert info == {"0": "127.0.0.1:10911"}  # nothing of the stray kept
            # Another id of the same name is a slave, not a conflict.
            r = await stray.invoke(ns.address, register_cmd(addr="127.0.0.1:20911",
                                                            broker_id=1))
            assert r.code == ResponseCode.SUCCESS
            assert r.ext_fields["masterAddr"] == "127.0.0.1:10911"
            # The holder re-registering is fine, and so is the same connection moving.
            assert (await real.invoke(ns.address, register_cmd(addr="127.0.0.1:10911",
                                                               counter=2))).code == 0
            assert (await real.invoke(ns.address, register_cmd(addr="127.0.0.1:10912",
                                                               counter=3))).code == 0
            assert await master_of(asker, ns) == "127.0.0.1:10912"
        finally:
            for c in (real, stray, asker):
                await c.close()
            await ns.stop()

    asyncio.run(main())


def test_the_id_moves_once_the_holder_is_gone_or_with_a_higher_master_epoch():
    async def main():
        ns = NameServer("127.0.0.1", 0, scan_interval=60)
        await ns.start()
        old, new, asker = RemotingClient(), RemotingClient(), RemotingClient()
        try:
            # Controller mode: the elected master brings its epoch as stateVersion, above
            # the old master's, which still looks alive (paused, or cut off).
            await old.invoke(ns.address, with_state_version(register_cmd(addr="h:1"), 1))
            r = await new.invoke(ns.address, with_state_version(register_cmd(addr="h:2"), 1))
            assert r.code == ResponseCode.SYSTEM_ERROR  # same epoch: refused
            r = await new.invoke(ns.address, with_state_version(register_cmd(addr="h:2"), 2))
            assert r.code == ResponseCode.SUCCESS
            assert await master_of(asker, ns) == "h:2"
            # The old master, back on its stale epoch, cannot take id 0 back.
            r = await old.invoke(ns.address, with_state_version(register_cmd(addr="h:1"), 1))
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert r.ext_fields["conflictBrokerAddr"] == "h:2"
            # The holder's connection closes: the id is free for the next one.
            await new.close()
            assert await asyncio.wait_for(_until(lambda: master_of(asker, ns), None), 5)
            r = await old.invoke(ns.address, register_cmd(addr="h:1"))
            assert r.code == ResponseCode.SUCCESS
            # A holder silent past its heartbeat timeout no longer holds it either.
            await old.invoke(ns.address, register_cmd(addr="h:1", timeout=200, counter=2))
            third = RemotingClient()
            try:
                assert (await third.invoke(ns.address, register_cmd(addr="h:3"))).code != 0
                await asyncio.sleep(0.3)
                assert (await third.invoke(ns.address, register_cmd(addr="h:3"))).code == 0
                assert await master_of(asker, ns) == "h:3"
            finally:
                await third.close()
        finally:
            for c in (old, new, asker):
                await c.close()
            await ns.stop()

    asyncio.run(main())


async def _until(get, wanted) -> bool:
    while await get() != wanted:
        await asyncio.sleep(0.02)
    return True


def test_a_second_broker_with_the_same_name_and_id_is_refused_and_sends_stay(tmp_path,
                                                                              caplog):
    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        first = st.start_broker("broker-a", storePathRootDir=str(tmp_path / "first"))
        st.create_topic("Dup", 2)
        with caplog.at_level(logging.ERROR):
            with pytest.raises(DuplicateBrokerError) as refused:
                st.start_broker("broker-a", storePathRootDir=str(tmp_path / "second"))
        assert first.address in str(refused.value) and "not started" in str(refused.value)
        assert f"{first.address} is registered under the same name and id" in caplog.text
        assert len(st.brokers) == 1
        route = fetch_route(st.namesrv, "Dup")
        assert route.broker_addrs["broker-a"] in ({0: first.address}, {"0": first.address})
        with Producer("pg", namesrv=st.namesrv) as producer:
            sent = [producer.send(Message("Dup", b"m%d" % i)) for i in range(6)]
        assert {r.status for r in sent} == {SendStatus.SEND_OK}
        assert sum(first.store.get_max_offset("Dup", q) for q in (0, 1)) == 6
        with PullConsumer("dup-reader", namesrv=st.namesrv, from_where="first") as consumer:
            consumer.subscribe("Dup")
            consumer.start()
            got: list = []
            assert wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 6, 15)
        assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)
    finally:
        st.stop()


def test_rocketq_broker_exits_when_its_name_and_id_are_taken(tmp_path):
    ns_port = free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    ns = start(["namesrv", "--port", str(ns_port)], "listening")
    confs = []
    for name in ("first", "second"):
        conf = tmp_path / f"{name}.conf"
        conf.write_text(f"brokerName=broker-a\nnamesrvAddr={namesrv}\nlistenPort={free_port()}\n"
                        f"storePathRootDir={tmp_path / name}\n{SMALL_FILES}")
        confs.append(conf)
    first = start(["broker", "-c", str(confs[0])], "listening")
    try:
        first_addr = fetch_route(namesrv, "TBW102").broker_addrs["broker-a"]
        second = subprocess_run(["broker", "-c", str(confs[1])])
        assert second.returncode != 0
        last = second.stderr.strip().splitlines()[-1]
        assert last.startswith("rocketq: broker broker-a at ") and "not started" in last
        assert str(list(first_addr.values())[0]) in last
        assert "Traceback" not in second.stderr
        assert fetch_route(namesrv, "TBW102").broker_addrs["broker-a"] == first_addr
        with Producer("pg", namesrv=namesrv) as producer:
            assert producer.send(Message("Taken", b"hi")).status is SendStatus.SEND_OK
    finally:
        stop(first)
        stop(ns)


def subprocess_run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``rocketq <args>`` to its end (bounded)."""
    return subprocess.run([sys.executable, "-m", "rocketq.cli", *args], capture_output=True,
                          text=True, timeout=60)
