"""NameServer over real sockets: registration, routes, expiry, several NameServers."""

from __future__ import annotations

import asyncio
import logging
import zlib

import orjson
import pytest

from rocketq.namesrv import NameServer
from rocketq.namesrv.routes import RouteTable
from rocketq.protocol.codes import RequestCode
from rocketq.protocol.command import RemotingCommand
from rocketq.remoting import RemotingClient


def register_cmd(name="broker-a", addr="127.0.0.1:10911", topics=None, counter=1,
                 cluster="DefaultCluster", broker_id=0, crc=True, timeout=None):
    topics = topics if topics is not None else {
        "TopicA": {"topicName": "TopicA", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}
    body = orjson.dumps({"topicConfigSerializeWrapper": {
        "topicConfigTable": topics,
        "dataVersion": {"counter": counter, "stateVersion": 0, "timestamp": 1}},
        "filterServerList": []})
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": cluster,
           "haServerAddr": "127.0.0.1:10912", "brokerId": broker_id, "compressed": False,
           "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF if crc else 0}
    if timeout:
        ext["heartbeatTimeoutMillis"] = timeout
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body)


async def call(client, ns, code, ext=None, body=b""):
    return await client.invoke(ns.address, RemotingCommand.request(code, ext, body))


def run(coro):
    return asyncio.run(coro)


async def started(**kw):
    ns = NameServer("127.0.0.1", 0, **kw)
    await ns.start()
    return ns


def test_register_and_route_lookup():
    async def main():
        ns = await started()
        client = RemotingClient()
        try:
            r = await client.invoke(ns.address, register_cmd())
            assert r.code == 0
            r = await call(client, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"})
            assert r.code == 0
            route = orjson.loads(r.body)
            assert route["queueDatas"] == [{"brokerName": "broker-a", "readQueueNums": 4,
                                            "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}]
            assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
            r = await call(client, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
            assert r.code == 17 and "Nope" in r.remark
            r = await call(client, ns, RequestCode.GET_BROKER_CLUSTER_INFO)
            info = orjson.loads(r.body)
            assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
            r = await call(client, ns, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            assert orjson.loads(r.body)["topicList"] == ["TopicA"]
            r = await call(client, ns, RequestCode.GET_TOPICS_BY_CLUSTER,
                           {"cluster": "DefaultCluster"})
            assert orjson.loads(r.body)["topicList"] == ["TopicA"]
            r = await call(client, ns, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicA"})
            assert r.code == 0
            r = await call(client, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"})
            assert r.code == 17
            r = await call(client, ns, 9999)
            assert r.code == 3
        finally:
            await client.close()
            await ns.stop()

    run(main())


def test_topics_reread_only_when_data_version_changes():
    routes = RouteTable()
    t1 = {"A": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}
    t2 = {"A": {"readQueueNums": 8, "writeQueueNums": 8, "perm": 6},
          "B": {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}
    v1 = {"counter": 1, "stateVersion": 0, "timestamp": 5}
    routes.register_broker("c", "h:1", "b", 0, "", t1, v1)
    routes.register_broker("c", "h:1", "b", 0, "", t2, dict(v1))  # same version: ignored
    assert routes.route("A")["queueDatas"][0]["readQueueNums"] == 4
    assert routes.route("B") is None
    routes.register_broker("c", "h:1", "b", 0, "", t2, {**v1, "counter": 2})
    assert routes.route("A")["queueDatas"][0]["readQueueNums"] == 8
    assert routes.route("B") is not None
    routes.register_broker("c", "h:1", "b", 0, "", {"B": t2["B"]}, {**v1, "counter": 3})
    assert routes.route("A") is None  # the broker dropped topic A


def test_routes_spread_over_two_brokers_and_crc_check():
    async def main():
        ns = await started()
        client = RemotingClient()
        try:
            await client.invoke(ns.address, register_cmd("broker-a", "127.0.0.1:10911"))
            await client.invoke(ns.address, register_cmd("broker-b", "127.0.0.1:10921"))
            r = await call(client, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"})
            route = orjson.loads(r.body)
            assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a", "broker-b"]
            assert len(route["brokerDatas"]) == 2
            bad = register_cmd("broker-c")
            bad.ext_fields["bodyCrc32"] = "12345"
            r = await client.invoke(ns.address, bad)
            assert r.code == 1 and r.remark == "crc32 not match"
        finally:
            await client.close()
            await ns.stop()

    run(main())


def test_silent_broker_expires_and_closed_connection_drops_it():
    async def main():
        ns = await started(scan_interval=0.1)
        keeper = RemotingClient()
        other = RemotingClient()
        try:
            await keeper.invoke(ns.address, register_cmd("broker-a", timeout=300))
            await other.invoke(ns.address, register_cmd("broker-b", "127.0.0.1:10921"))
            route = orjson.loads((await call(keeper, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                             {"topic": "TopicA"})).body)
            assert len(route["brokerDatas"]) == 2
            await asyncio.sleep(0.6)  # broker-a's 300 ms timeout passes
            route = orjson.loads((await call(keeper, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                             {"topic": "TopicA"})).body)
            assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-b"]
            await other.close()  # broker-b's connection goes away
            for _ in range(50):
                r = await call(keeper, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                               {"topic": "TopicA"})
                if r.code == 17:
                    break
                await asyncio.sleep(0.02)
            assert r.code == 17
        finally:
            await keeper.close()
            await ns.stop()

    run(main())


def test_slave_learns_master_and_kv_config():
    async def main():
        ns = await started()
        client = RemotingClient()
        try:
            await client.invoke(ns.address, register_cmd())
            r = await client.invoke(ns.address, register_cmd(addr="127.0.0.1:10931",
                                                             broker_id=1))
            assert r.ext_fields["masterAddr"] == "127.0.0.1:10911"
            assert r.ext_fields["haServerAddr"] == "127.0.0.1:10912"
            route = orjson.loads((await call(client, ns, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                             {"topic": "TopicA"})).body)
            assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911",
                                                              "1": "127.0.0.1:10931"}
            kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}
            assert (await call(client, ns, RequestCode.GET_KV_CONFIG, kv)).code == 22
            await call(client, ns, RequestCode.PUT_KV_CONFIG, {**kv, "value": "broker-a:4"})
            r = await call(client, ns, RequestCode.GET_KV_CONFIG, kv)
            assert r.ext_fields["value"] == "broker-a:4"
            r = await call(client, ns, RequestCode.GET_KVLIST_BY_NAMESPACE,
                           {"namespace": "ORDER_TOPIC_CONFIG"})
            assert orjson.loads(r.body) == {"table": {"T": "broker-a:4"}}
        finally:
            await client.close()
            await ns.stop()

    run(main())


@pytest.mark.parametrize("body", [
    b"not json", b"[1,2]", b'{"topicConfigSerializeWrapper": [1]}',
    b'{"topicConfigSerializeWrapper": {"topicConfigTable": [1]}}',
    b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": 5}}}',
    b'{"topicConfigSerializeWrapper": {"topicConfigTable": {}, "dataVersion": "x"}}'])
def test_bad_register_body_is_an_error_not_a_crash(body, caplog):
    async def main():
        ns = await started()
        client = RemotingClient()
        try:
            cmd = register_cmd(crc=False)
            cmd.body = body
            r = await client.invoke(ns.address, cmd)
            assert r.code == 1 and "Error" not in r.remark  # a message, not an exception
            assert (await client.invoke(ns.address, register_cmd())).code == 0
        finally:
            await client.close()
            await ns.stop()

    with caplog.at_level(logging.ERROR):
        run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
