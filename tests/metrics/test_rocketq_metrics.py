"""rocketq's own metrics (``rocketq_*``) against real servers: ACL refusals by reason on a
broker and a NameServer, a slave's replication lag on its master, and the legacy series a
slave leaves to its master."""

from __future__ import annotations

import asyncio
import socket
import time

from rocketq.acl import Credentials
from rocketq.aio import Message, Producer
from rocketq.ha.protocol import encode_report
from rocketq.metrics import Exporter
from rocketq.metrics.lag import LagTable
from rocketq.metrics.legacy import LegacyCollector
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient

from ..acl.test_acl_servers import ADMIN, write_acl
from ..conftest import run_async, until
from .scrape import value
from .test_broker_metrics import create_topic, get, until_scraped


def test_acl_refusals_are_counted_by_reason(cluster, tmp_path):
    async def main():
        acl = tmp_path / "plain_acl.yml"
        write_acl(acl)
        ns = await cluster.start_namesrv(acl_file=str(acl))
        broker = await cluster.start_broker(aclEnable="true", aclFile=str(acl))
        exporter = Exporter()
        exporter.add_broker(broker)
        exporter.add_namesrv(ns)
        await exporter.start()
        client = RemotingClient()
        try:
            route = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                            {"topic": "TBW102"})
            r = await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.GET_BROKER_RUNTIME_INFO))
            assert r.code == ResponseCode.NO_PERMISSION  # unsigned
            bad = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
            Credentials(ADMIN[0], "not-the-secret").sign(bad)
            assert (await client.invoke(broker.address, bad)).code == ResponseCode.NO_PERMISSION
            assert (await client.invoke(ns.address, route)).code == ResponseCode.NO_PERMISSION
            signed = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                             {"topic": "TBW102"})
            Credentials(*ADMIN).sign(signed)
            assert (await client.invoke(ns.address, signed)).code == ResponseCode.SUCCESS
            s = await get(exporter.url)
            broker_node = {"node_type": "broker", "node_id": "broker-a"}
            assert value(s, "rocketq_acl_refusals_total", reason="unsigned", **broker_node) == 1
            assert value(s, "rocketq_acl_refusals_total", reason="bad_signature",
                         **broker_node) == 1
            assert value(s, "rocketq_acl_refusals_total", reason="unsigned",
                         node_type="nameserver") == 1
            assert value(s, "rocketq_acl_refusals_total", reason="bad_signature",
                         node_type="nameserver") is None
        finally:
            await client.close()
            await exporter.stop()
            await cluster.stop()
    run_async(main())


def test_a_slave_behind_shows_its_lag_in_bytes_and_seconds(cluster):
    """A slave link that reports an offset and then nothing more: what the master appends
    after it is the lag, and it ages; a report of everything brings both to 0."""
    async def main():
        await cluster.start_namesrv()
        master = await cluster.start_broker(haListenPort=0)
        exporter = Exporter()
        exporter.add_broker(master)
        await exporter.start()
        client = RemotingClient()
        link = socket.socket()
        try:
            await create_topic(client, master, "Replicated")
            async with Producer("pg-ha", namesrv=cluster.namesrv) as producer:
                await producer.send(Message("Replicated", b"before"))
            held = master.store.commitlog.max_offset
            host, _, port = master.ha_server.address.rpartition(":")
            await asyncio.to_thread(link.connect, (host, int(port)))
            link.sendall(encode_report(held))  # a slave that holds all there is
            s = await until_scraped(exporter.url, lambda s: value(
                s, "rocketq_replication_slaves") == 1)
            assert value(s, "rocketq_replication_lag_bytes") == 0
            assert value(s, "rocketq_replication_lag_seconds") == 0
            async with Producer("pg-ha", namesrv=cluster.namesrv) as producer:
                for i in range(5):
                    await producer.send(Message("Replicated", b"after-%d" % i))
            behind = master.store.commitlog.max_offset - held
            await asyncio.sleep(0.5)
            s = await get(exporter.url)
            (sample,) = s["rocketq_replication_lag_bytes"]
            assert sample.value == behind > 0
            assert sample.labels["slave_addr"].startswith("127.0.0.1:")
            assert sample.labels["slave_id"] == ""
            lag = value(s, "rocketq_replication_lag_seconds")
            assert 0.4 <= lag < 10, lag
            link.sendall(encode_report(master.store.commitlog.max_offset))
            s = await until_scraped(exporter.url, lambda s: value(
                s, "rocketq_replication_lag_bytes") == 0)
            assert value(s, "rocketq_replication_lag_seconds") == 0
        finally:
            link.close()
            await client.close()
            await exporter.stop()
            await cluster.stop()
    run_async(main())


def test_the_ha_lag_clock_dates_what_a_slave_lacks(cluster):
    """HAServer.lag_seconds on its own: the first byte past an offset is dated by the append
    that wrote it, to within the mark interval."""
    async def main():
        await cluster.start_namesrv()
        master = await cluster.start_broker(haListenPort=0)
        try:
            ha = master.ha_server
            client = RemotingClient()
            await create_topic(client, master, "Dated")
            await client.close()
            async with Producer("pg-ha", namesrv=cluster.namesrv) as producer:
                await producer.send(Message("Dated", b"one"))
                first_end = master.store.commitlog.max_offset
                await asyncio.sleep(0.6)
                before_two = time.monotonic()
                await producer.send(Message("Dated", b"two"))
            assert ha.lag_seconds(master.store.commitlog.max_offset) == 0
            # The second message is as young as the time since it was sent (and the mark
            # interval); the first one is older.
            young = ha.lag_seconds(first_end)
            assert young < time.monotonic() - before_two + 0.1, young
            assert ha.lag_seconds(first_end - 1) >= 0.5
        finally:
            await cluster.stop()
    run_async(main())


def test_the_exporter_does_not_slow_time_when_stopped(cluster):
    """Stopping the exporter detaches the timers from every connection, old and new."""
    async def main():
        ns = await cluster.start_namesrv()
        exporter = Exporter()
        exporter.add_namesrv(ns)
        await exporter.start()
        client = RemotingClient()
        try:
            await client.invoke(ns.address, RemotingCommand.request(
                RequestCode.GET_BROKER_CLUSTER_INFO))
            assert all(c.observer is not None for c in ns.server.connections)
            await exporter.stop()
            assert ns.server.observer is None
            assert all(c.observer is None for c in ns.server.connections)
            started = time.monotonic()
            await client.invoke(ns.address, RemotingCommand.request(
                RequestCode.GET_BROKER_CLUSTER_INFO))
            assert time.monotonic() - started < 5
        finally:
            await client.close()
            await cluster.stop()
    run_async(main())


def test_a_slave_publishes_no_legacy_topic_or_group_series(cluster):
    """rocketmq-exporter reads masters only: a slave's legacy series would repeat its
    master's topics and groups under the same labels."""
    async def main():
        await cluster.start_namesrv()
        master = await cluster.start_broker(haListenPort=0)
        slave = await cluster.start_broker(
            "broker-a-slave", brokerName="broker-a", brokerId=1, brokerRole="SLAVE",
            haMasterAddress=master.ha_server.address, haSendHeartbeatInterval=200)
        client = RemotingClient()
        try:
            await create_topic(client, master, "Legacy")
            async with Producer("pg-legacy", namesrv=cluster.namesrv) as producer:
                await producer.send(Message("Legacy", b"one"))
            await until(lambda: slave.store.get_max_offset("Legacy", 0) == 1)

            def series(broker) -> dict[str, list]:
                families = LegacyCollector(broker, LagTable(broker)).collect()
                return {f.name: f.samples for f in families}
            mine, theirs = series(master), series(slave)
            assert mine.keys() == theirs.keys()
            assert [s.labels["topic"] for s in mine["rocketmq_producer_offset"]] == ["Legacy"]
            assert {name for name, samples in theirs.items() if samples} == {
                "rocketmq_broker_tps", "rocketmq_broker_qps"}
            assert theirs["rocketmq_broker_tps"][0].labels["brokerIP"] == slave.address
        finally:
            await client.close()
            await cluster.stop()
    run_async(main())
