"""The numbers of mqadmin's statistics commands, over real sockets with real traffic.

- ``statsAll`` asks VIEW_BROKER_STATS_DATA (315) for each topic's ``TOPIC_PUT_NUMS`` and each
  ``topic@group``'s ``GROUP_GET_NUMS`` and prints the minute's tps (InTPS, OutTPS) and a
  24-hour count (StatsAllSubCommand.compute24HourSum);
- ``brokerConsumeStats`` asks GET_BROKER_CONSUME_STATS (317) and prints each queue's offsets
  and ``totalDiff``;
- ``consumerProgress`` prints GET_CONSUME_STATS' (208) ``consumeTps``.

The requests are written as mqadmin 4.9.8 writes them (MQClientAPIImpl.viewBrokerStatsData
and fetchConsumeStatsInBroker: a JSON header, language JAVA, version 409, the header class's
field names as extFields) and the answers are read the way its fastjson classes read them.
The windows are driven with explicit times (``broker.stats.items.sample``), far ahead of the
broker's own once-a-second sampler, whose samples are then older and ignored: an hour passes
in no time, and the rates are exact.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from rocketq.broker.stats import Stats
from rocketq.broker.stats.stats_items import DAY, HOUR, MINUTE
from rocketq.protocol import CURRENT_VERSION, fastjson
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand, encode
from rocketq.protocol.message import decode_offset_msg_id

from ..compat.java498_frames import Frame, frames
from ..conftest import run_async
from ..raw_peer import RawPeer
from .test_broker import dispatched, pull, send_v2

#: MQVersion.Version ordinals (RocketMQ's enum, the same in 4.9.x and 5.x) that peers
#: compare the version rocketq announces with.
V3_4_9, V4_1_0_SNAPSHOT, V4_9_4, V4_9_8, V5_1_4 = 121, 232, 401, 409, 441

_opaque = iter(range(1000, 10**6))


def mqadmin(code: int, ext: dict[str, str]) -> Frame:
    """A request as mqadmin 4.9.8 writes it (RemotingCommand.createRequestCommand with the
    header's fields as extFields, fastjson's JSON header, no ACL hook configured)."""
    header = orjson.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA",
                           "opaque": next(_opaque), "serializeTypeCurrentRPC": "JSON",
                           "version": V4_9_8})
    return Frame(f"mqadmin {code}", 0, header, b"")


async def ask(peer: RawPeer, frame: Frame | RemotingCommand) -> RemotingCommand:
    if isinstance(frame, Frame):
        peer.write(frame.encode())
        return await peer.answer(frame.header_json["opaque"])
    peer.write(encode(frame))
    return await peer.answer(frame.opaque)


# --------------------------------------------------------------------------- mqadmin's reading
def broker_stats_data(body: bytes) -> dict[str, dict[str, Any]]:
    """BrokerStatsData as fastjson fills it: three BrokerStatsItem (long sum, double tps,
    double avgpt)."""
    data = fastjson.loads(body)
    out = {}
    for window in ("statsMinute", "statsHour", "statsDay"):
        item = data[window]
        assert isinstance(item["sum"], int), item  # a long: no fraction
        assert isinstance(item["tps"], float) and isinstance(item["avgpt"], float), item
        out[window] = item
    return out


def compute_24_hour_sum(bsd: dict[str, dict[str, Any]]) -> int:
    """StatsAllSubCommand.compute24HourSum: the day's sum, else the hour's, else the
    minute's."""
    for window in ("statsDay", "statsHour", "statsMinute"):
        if bsd[window]["sum"] != 0:
            return bsd[window]["sum"]
    return 0


def consume_stats(data: dict[str, Any]) -> tuple[float, dict[tuple[str, str, int], dict]]:
    """ConsumeStats: ``consumeTps`` and ``offsetTable``, a HashMap<MessageQueue,
    OffsetWrapper> that fastjson writes with the MessageQueue objects as keys."""
    assert isinstance(data["consumeTps"], float)
    table = data["offsetTable"]
    pairs = table.items if isinstance(table, fastjson.ObjectKeyMap) else list(table.items())
    offsets = {}
    for mq, wrapper in pairs:
        assert set(mq) == {"brokerName", "queueId", "topic"}, mq
        assert all(isinstance(wrapper[k], int)
                   for k in ("brokerOffset", "consumerOffset", "lastTimestamp")), wrapper
        offsets[(mq["topic"], mq["brokerName"], mq["queueId"])] = wrapper
    return data["consumeTps"], offsets


def consume_stats_list(body: bytes) -> tuple[dict[str, list], int, str]:
    """ConsumeStatsList: ``consumeStatsList`` (List<Map<group, List<ConsumeStats>>>),
    ``totalDiff`` (long) and ``brokerAddr``."""
    data = fastjson.loads(body)
    assert isinstance(data["totalDiff"], int) and isinstance(data["brokerAddr"], str)
    groups: dict[str, list] = {}
    for entry in data["consumeStatsList"]:
        for group, stats in entry.items():
            groups[group] = [consume_stats(s) for s in stats]
    return groups, data["totalDiff"], data["brokerAddr"]


def view(name: str, key: str) -> Frame:
    """MQClientAPIImpl.viewBrokerStatsData: ViewBrokerStatsDataRequestHeader."""
    return mqadmin(RC.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})


def create_topic(topic: str, queues: int = 1, order: bool = False) -> RemotingCommand:
    return RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
        "order": order})


def commit(group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    return RemotingCommand.request(RC.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset})


# --------------------------------------------------------------------------- over a broker
def test_stats_all_consume_stats_and_lag_follow_the_traffic(cluster):
    """30 messages sent, 12 of them consumed 10 s later and committed: InTPS and OutTPS, the
    24-hour counts, consumeTps and the lag are what that traffic makes them, and they age
    out of each window in turn."""

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        items = broker.stats.items
        start = time.monotonic() + 1e6  # ahead of the broker's own sampler
        try:
            assert (await ask(peer, create_topic("StatsT"))).code == 0
            items.sample(start)
            sizes = 0
            for i in range(30):
                answer = await ask(peer, send_v2("StatsT", b"m%02d" % i))
                assert answer.code == 0, answer.remark
            await dispatched(broker)
            sizes = broker.stats.put_bytes_by_topic["StatsT"]
            items.sample(start + 10)
            got = await ask(peer, pull("StatsT", 0, 0, group="StatsG", maxMsgNums=12))
            assert got.code == 0 and int(got.ext_fields["nextBeginOffset"]) == 12
            assert (await ask(peer, commit("StatsG", "StatsT", 0, 12))).code == 0
            items.sample(start + 20)

            # statsAll: InTPS, InMsg24Hour; OutTPS, OutMsg24Hour.
            answer = await ask(peer, view("TOPIC_PUT_NUMS", "StatsT"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            put = broker_stats_data(answer.body)
            assert put["statsMinute"]["sum"] == 30 and put["statsMinute"]["tps"] == 30 / 20
            assert put["statsMinute"]["tps"] > 0
            assert compute_24_hour_sum(put) == 30
            answer = await ask(peer, view("GROUP_GET_NUMS", "StatsT@StatsG"))
            got_nums = broker_stats_data(answer.body)
            assert got_nums["statsMinute"]["sum"] == 12
            assert got_nums["statsMinute"]["tps"] == 12 / 20
            assert compute_24_hour_sum(got_nums) == 12
            size = broker_stats_data((await ask(peer, view("TOPIC_PUT_SIZE", "StatsT"))).body)
            assert size["statsDay"]["sum"] == sizes > 30 * 3
            got_size = broker_stats_data(
                (await ask(peer, view("GROUP_GET_SIZE", "StatsT@StatsG"))).body)
            assert 0 < got_size["statsDay"]["sum"] < sizes
            cluster_name = broker.config.brokerClusterName
            whole = broker_stats_data(
                (await ask(peer, view("BROKER_PUT_NUMS", cluster_name))).body)
            assert whole["statsHour"]["sum"] == 30
            whole = broker_stats_data(
                (await ask(peer, view("BROKER_GET_NUMS", cluster_name))).body)
            assert whole["statsHour"]["sum"] == 12

            # consumerProgress: the group's consume rate; brokerConsumeStats: the lag.
            answer = await ask(peer, mqadmin(RC.GET_CONSUME_STATS, {"consumerGroup": "StatsG"}))
            tps, offsets = consume_stats(fastjson.loads(answer.body))
            assert tps == 12 / 20 and f"{tps:.2f}" == "0.60"
            assert offsets[("StatsT", broker.config.brokerName, 0)]["consumerOffset"] == 12
            answer = await ask(peer, mqadmin(RC.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            groups, total_diff, addr = consume_stats_list(answer.body)
            assert addr == broker.address
            assert total_diff == 30 - 12
            ((group_tps, group_offsets),) = groups["StatsG"]
            assert group_tps == 12 / 20
            wrapper = group_offsets[("StatsT", broker.config.brokerName, 0)]
            assert (wrapper["brokerOffset"], wrapper["consumerOffset"]) == (30, 12)
            assert wrapper["lastTimestamp"] > 0

            # Two quiet minutes: the minute is empty, the hour and the day still count.
            items.sample(start + 140)
            put = broker_stats_data((await ask(peer, view("TOPIC_PUT_NUMS", "StatsT"))).body)
            assert put["statsMinute"] == {"avgpt": 0.0, "sum": 0, "tps": 0.0}
            assert put["statsHour"]["sum"] == put["statsDay"]["sum"] == 30
            assert compute_24_hour_sum(put) == 30
            answer = await ask(peer, mqadmin(RC.GET_CONSUME_STATS, {"consumerGroup": "StatsG"}))
            assert consume_stats(fastjson.loads(answer.body))[0] == 0.0
            # Two quiet hours, then a whole quiet day.
            items.sample(start + 140 + 2 * 3600)
            put = broker_stats_data((await ask(peer, view("TOPIC_PUT_NUMS", "StatsT"))).body)
            assert (put["statsHour"]["sum"], put["statsDay"]["sum"]) == (0, 30)
            items.sample(start + 140 + 26 * 3600)
            put = broker_stats_data((await ask(peer, view("TOPIC_PUT_NUMS", "StatsT"))).body)
            assert compute_24_hour_sum(put) == 0
            # The lag is offsets, not a window: still there.
            answer = await ask(peer, mqadmin(RC.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}))
            assert consume_stats_list(answer.body)[1] == 18
        finally:
            await peer.close()
            await cluster.stop()

    run_async(main())


def test_send_backs_and_ordered_topics(cluster):
    """SNDBCK_PUT_NUMS counts a group's send-backs under the message's original topic;
    ``isOrder`` keeps only ordered topics, and a group with none still gets its entry."""

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            assert (await ask(peer, create_topic("Plain", 2))).code == 0
            assert (await ask(peer, create_topic("Ordered", 2, order=True))).code == 0
            answer = await ask(peer, send_v2("Plain", b"fails"))
            assert answer.code == 0
            offset = decode_offset_msg_id(answer.ext_fields["msgId"])[2]
            back = RemotingCommand.request(RC.CONSUMER_SEND_MSG_BACK, {
                "offset": offset, "group": "Backs", "delayLevel": 0, "originTopic": "Plain"})
            assert (await ask(peer, back)).code == 0
            answer = await ask(peer, view("SNDBCK_PUT_NUMS", "Plain@Backs"))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert broker_stats_data(answer.body)["statsDay"]["sum"] == 1

            for group, topic in (("Backs", "Plain"), ("Mixed", "Plain"), ("Mixed", "Ordered")):
                assert (await ask(peer, commit(group, topic, 0, 0))).code == 0
            answer = await ask(peer, mqadmin(RC.GET_BROKER_CONSUME_STATS, {"isOrder": "true"}))
            groups, total_diff, _ = consume_stats_list(answer.body)
            assert groups["Backs"] == []
            ((_, offsets),) = groups["Mixed"]
            assert {topic for topic, _, _ in offsets} == {"Ordered"}
            assert total_diff == 0
            answer = await ask(peer, mqadmin(RC.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}))
            groups, total_diff, _ = consume_stats_list(answer.body)
            assert len(groups["Mixed"]) == 2 and total_diff == 2  # Plain: the message twice
        finally:
            await peer.close()
            await cluster.stop()

    run_async(main())


def test_a_stats_item_that_does_not_exist_is_refused_naming_it(cluster):
    """As AdminBrokerProcessor.viewBrokerStatsData: SYSTEM_ERROR, "The stats <name> <key> not
    exist" (statsAll then prints 0 for it)."""

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            assert (await ask(peer, create_topic("Quiet"))).code == 0
            cluster_name = broker.config.brokerClusterName
            for name, key in (("TOPIC_PUT_NUMS", "Quiet"),  # exists, nothing sent to it
                              ("TOPIC_PUT_NUMS", "NoSuchTopic"),
                              ("GROUP_GET_NUMS", "Quiet"),  # not topic@group
                              ("GROUP_GET_LATENCY", "Quiet@G"),  # a name rocketq does not keep
                              ("BROKER_PUT_NUMS", cluster_name + "X")):
                answer = await ask(peer, view(name, key))
                assert answer.code == ResponseCode.SYSTEM_ERROR, (name, key)
                assert answer.remark == f"The stats <{name}> <{key}> not exist"
            answer = await ask(peer, view("BROKER_PUT_NUMS", cluster_name))
            assert answer.code == ResponseCode.SUCCESS
            assert broker_stats_data(answer.body)["statsDay"]["sum"] == 0
        finally:
            await peer.close()
            await cluster.stop()

    run_async(main())


def test_the_version_rocketq_reports(cluster):
    """rocketq announces RocketMQ 4.9.8 (409): the Java client keeps a broker's heartbeat
    answer's version and allows SQL92 pulls at 232 and up; mqadmin brokerStatus prints the
    runtime table's; the NameServer answers with it too. As a client, 409 gets standard-JSON
    routes (401 and up) and send-backs' maxReconsumeTimes honoured (121 and up), and stays
    below the versions RocketMQ 5.2+ servers answer GO_AWAY while shutting down, which
    rocketq's client would not act on."""
    assert CURRENT_VERSION == V4_9_8
    assert V4_9_4 <= CURRENT_VERSION <= V5_1_4 and CURRENT_VERSION >= V4_1_0_SNAPSHOT > V3_4_9
    assert orjson.loads(encode(RemotingCommand.request(RC.HEART_BEAT))[8:])["version"] == 409

    async def main():
        namesrv = await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        ns_peer = await RawPeer.open(namesrv.address)
        try:
            (java_heartbeat,) = frames("producer", RC.HEART_BEAT)
            answer = await ask(peer, java_heartbeat)
            assert answer.code == 0 and answer.version == V4_9_8
            (status,) = [f for f in frames("mqadmin", RC.GET_BROKER_RUNTIME_INFO)
                         if f.step == "mqadmin brokerStatus"]
            answer = await ask(peer, status)
            assert orjson.loads(answer.body)["table"]["brokerVersion"] == "409"
            route = mqadmin(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
            answer = await ask(ns_peer, route)
            assert answer.version == V4_9_8
        finally:
            await peer.close()
            await ns_peer.close()
            await cluster.stop()

    run_async(main())


# --------------------------------------------------------------------------- the windows alone
def test_windows_tick_at_rocketmqs_intervals_and_reach_back_their_span():
    """A put a second for two hours: the minute's rate is 1/s over about a minute (10-second
    ticks), the hour's over about an hour (10-minute ticks), the day's over all of it
    (hourly ticks); sums grow with the window."""
    stats = Stats()
    items = stats.items
    base = time.monotonic() + 1e6
    for second in range(2 * 3600 + 1):
        if second:
            stats.put(1, "T", 100)
        items.sample(base + second)
    minute, hour, day = (items.sets["TOPIC_PUT_NUMS"].snapshot("T", w, items.last)
                         for w in (MINUTE, HOUR, DAY))
    # Rates are sums over clock differences: equal to 1/s up to float rounding of the clock.
    assert 50 <= minute.sum <= 60 and minute.tps == pytest.approx(1.0)
    assert 3000 <= hour.sum <= 3600 and hour.tps == pytest.approx(1.0)
    assert day.sum == 7200 and day.tps == pytest.approx(1.0)
    assert len(items.sets["TOPIC_PUT_NUMS"].ticks[MINUTE]) <= 7
    assert len(items.sets["TOPIC_PUT_NUMS"].ticks[HOUR]) <= 7
    # A sample older than the last is ignored (another clock, or one that went back).
    items.sample(base)
    assert items.last == base + 2 * 3600
    assert items.view("TOPIC_PUT_SIZE", "T")["statsDay"]["sum"] == 720000


def test_a_busy_broker_shows_its_rate_within_a_second(cluster):
    """Without driving the windows: the broker's own sampler (every second) is all it takes
    for InTPS to show the sends."""

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        peer = await RawPeer.open(broker.address)
        try:
            assert (await ask(peer, create_topic("Busy"))).code == 0
            for i in range(5):
                assert (await ask(peer, send_v2("Busy", b"%d" % i))).code == 0
            last = broker.stats.items.last
            while broker.stats.items.last == last:
                await asyncio.sleep(0.05)
            put = broker_stats_data((await ask(peer, view("TOPIC_PUT_NUMS", "Busy"))).body)
            assert put["statsMinute"]["tps"] > 0 and compute_24_hour_sum(put) == 5
        finally:
            await peer.close()
            await cluster.stop()

    run_async(main())
