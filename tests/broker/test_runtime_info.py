"""GET_BROKER_RUNTIME_INFO: every key mqadmin's clusterList reads is there and parses the way
mqadmin parses it (ClusterListSubCommand), with values that follow what the broker does."""

from __future__ import annotations

import asyncio
import time

import orjson

from rocketq.broker.stats import Sample, Stats, human_bytes
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand
from rocketq.remoting import RemotingClient

from ..compat.java498_frames import frames
from ..conftest import run_async
from ..raw_peer import RawPeer
from .test_broker import dispatched, pull, send_v2

#: What ClusterListSubCommand (4.9.8) does with each key: printBaseInfo and -m's
#: printClusterMoreStats. A missing key is a null there: a NullPointerException or "null".
CLUSTER_LIST = {
    "brokerVersionDesc": str,
    "putTps": lambda v: float(v.split(" ")[0]),
    "getTransferedTps": lambda v: float(v.split(" ")[0]),
    "sendThreadPoolQueueSize": int,
    "pullThreadPoolQueueSize": int,
    "sendThreadPoolQueueHeadWaitTimeMills": int,
    "pullThreadPoolQueueHeadWaitTimeMills": int,
    "pageCacheLockTimeMills": int,
    "earliestMessageTimeStamp": int,
    "commitLogDiskRatio": float,
    "msgPutTotalYesterdayMorning": int,
    "msgPutTotalTodayMorning": int,
    "msgPutTotalTodayNow": int,
    "msgGetTotalYesterdayMorning": int,
    "msgGetTotalTodayMorning": int,
    "msgGetTotalTodayNow": int,
}
#: Rates RocketMQ writes as three numbers over 10 s, 1 min and 10 min.
RATES = ("putTps", "getTransferedTps", "getFoundTps", "getMissTps", "getTotalTps")


async def runtime_info(c: RemotingClient, broker) -> dict[str, str]:
    r = await c.invoke(broker.address, RemotingCommand.request(RC.GET_BROKER_RUNTIME_INFO))
    assert r.code == ResponseCode.SUCCESS
    table = orjson.loads(r.body)["table"]
    assert all(isinstance(v, str) for v in table.values())  # brokerStatus prints each
    return table


def parsed(table: dict[str, str]) -> dict[str, object]:
    out = {}
    for key, parse in CLUSTER_LIST.items():
        assert key in table, key
        out[key] = parse(table[key])
    for key in RATES:
        numbers = table[key].split(" ")
        assert len(numbers) == 3, (key, table[key])
        assert all(float(n) >= 0 for n in numbers), (key, table[key])
    return out


def test_cluster_list_keys_parse_and_follow_sends_and_pulls(cluster):
    (frame,) = [f for f in frames("mqadmin", RC.GET_BROKER_RUNTIME_INFO)
                if f.step == "mqadmin clusterList"]

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        peer = await RawPeer.open(broker.address)
        try:
            # The frame mqadmin clusterList sent.
            peer.write(frame.encode())
            answer = await peer.answer(frame.header_json["opaque"])
            assert answer.code == ResponseCode.SUCCESS
            idle = parsed(orjson.loads(answer.body)["table"])
            assert idle["putTps"] == 0.0 and idle["getTransferedTps"] == 0.0
            assert idle["earliestMessageTimeStamp"] == -1  # as RocketMQ: no message yet
            assert 0 < idle["commitLogDiskRatio"] <= 1
            assert idle["msgPutTotalTodayNow"] == 0

            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Rt", "readQueueNums": 1,
                                             "writeQueueNums": 1, "perm": 6}))
            assert r.code == ResponseCode.SUCCESS
            first_put = int(time.time() * 1000)
            for i in range(40):
                r = await c.invoke(broker.address, send_v2("Rt", b"m%d" % i))
                assert r.code == ResponseCode.SUCCESS, r.remark
            await dispatched(broker)
            busy = parsed(await runtime_info(c, broker))
            assert busy["putTps"] > 0
            assert busy["msgPutTotalTodayNow"] == 40
            assert first_put - 1000 <= busy["earliestMessageTimeStamp"] <= time.time() * 1000
            offset = 0
            while offset < 40:
                r = await c.invoke(broker.address, pull("Rt", 0, offset))
                assert r.code == ResponseCode.SUCCESS, r.remark
                offset = int(r.ext_fields["nextBeginOffset"])
            assert (await c.invoke(broker.address, pull("Rt", 0, 40))).code \
                == ResponseCode.PULL_NOT_FOUND
            after = parsed(await runtime_info(c, broker))
            assert after["getTransferedTps"] > 0
            assert after["msgGetTotalTodayNow"] == 40
            table = await runtime_info(c, broker)
            assert float(table["getFoundTps"].split()[0]) > 0
            assert float(table["getMissTps"].split()[0]) > 0

            # A pull held for new messages is a pull waiting.
            held = asyncio.ensure_future(c.invoke(broker.address, pull(
                "Rt", 0, 40, suspend=5000, sysflag=0x2 | 0x4), 10))
            for _ in range(100):
                table = await runtime_info(c, broker)
                if table["pullThreadPoolQueueSize"] == "1":
                    break
                await asyncio.sleep(0.02)
            assert table["pullThreadPoolQueueSize"] == "1"
            r = await c.invoke(broker.address, send_v2("Rt", b"wake", 0))
            assert r.code == ResponseCode.SUCCESS
            assert (await held).code == ResponseCode.SUCCESS
            assert (await runtime_info(c, broker))["pullThreadPoolQueueSize"] == "0"
        finally:
            await peer.close()
            await c.close()
            await cluster.stop()

    run_async(main())


def test_rates_use_the_samples_of_each_window():
    stats = Stats()
    now = time.monotonic()
    stats.samples.clear()
    # 1 put a second for ten minutes, then 100 a second for the last 10 seconds.
    stats.samples.extend([Sample(now - 600, 0, 0, 0, 0), Sample(now - 60, 540, 0, 0, 0),
                          Sample(now - 10, 590, 0, 0, 0)])
    stats.put_total = 590 + 1000
    ten_s, one_min, ten_min = (float(x) for x in stats.rates("put").split())
    assert 95 < ten_s <= 100
    assert abs(one_min - 1050 / 60) < 1
    assert abs(ten_min - 1590 / 600) < 0.1
    assert stats.rates("transferred") == "0.0 0.0 0.0"


def test_morning_counters_move_at_midnight():
    stats = Stats()
    stats.put(7, "T")
    stats.get(3)
    stats.sample()
    assert (stats.put_today_morning, stats.put_yesterday_morning) == (0, 0)
    tomorrow = time.time() + 86400
    stats.sample(wall=tomorrow)
    assert (stats.put_today_morning, stats.get_today_morning) == (7, 3)
    stats.put(5, "T")
    stats.sample(wall=tomorrow + 86400)
    assert (stats.put_yesterday_morning, stats.put_today_morning) == (7, 12)


def test_human_bytes_as_rocketmq_writes_them():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 << 30) == "3.0 GiB"
