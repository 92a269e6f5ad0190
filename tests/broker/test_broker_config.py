"""UPDATE_BROKER_CONFIG (mqadmin updateBrokerConfig): checked all or nothing, saved to
config/broker.properties before it is applied, shown by GET_BROKER_CONFIG, taken up at once,
and applied over broker.conf at the next start."""

from __future__ import annotations

import asyncio
import os

import orjson
import pytest

from rocketq.broker import Broker, load_broker_conf
from rocketq.protocol.codes import RequestCode as RC
from rocketq.protocol.codes import ResponseCode
from rocketq.protocol.command import RemotingCommand
from rocketq.remoting import RemotingClient

from ..compat.java498_frames import frames
from ..conftest import run_async
from ..raw_peer import RawPeer
from .test_broker import send_v2


def update(**values) -> RemotingCommand:
    body = "".join(f"{k}={v}\n" for k, v in values.items()).encode()
    return RemotingCommand.request(RC.UPDATE_BROKER_CONFIG, body=body)


async def broker_config(c: RemotingClient, broker) -> dict[str, str]:
    r = await c.invoke(broker.address, RemotingCommand.request(RC.GET_BROKER_CONFIG))
    assert r.code == ResponseCode.SUCCESS
    return dict(line.split("=", 1) for line in r.body.decode().splitlines())


def saved(broker) -> str:
    path = os.path.join(broker.store_config.storePathRootDir, "config", "broker.properties")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


async def restart(cluster, broker, **conf):
    await broker.stop()
    cluster.brokers.remove(broker)
    return await cluster.start_broker(broker.config.brokerName, **conf)


def test_mqadmin_frame_is_applied_shown_saved_and_kept_over_a_restart(cluster):
    # Sent with an ACL hook's AccessKey and Signature, and without.
    with_acl, plain = frames("mqadmin", RC.UPDATE_BROKER_CONFIG)
    assert with_acl.body == plain.body == b"flushConsumerOffsetInterval=6000\n"

    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        assert broker.config.flushConsumerOffsetInterval == 5000
        peer = await RawPeer.open(broker.address)
        c = RemotingClient()
        try:
            for frame in (with_acl, plain):
                peer.write(frame.encode())
                answer = await peer.answer(frame.header_json["opaque"])
                assert answer.code == ResponseCode.SUCCESS, answer.remark
                assert broker.config.flushConsumerOffsetInterval == 6000
                if frame is with_acl:  # back to 5000, for the plain frame to change again
                    r = await c.invoke(broker.address, update(flushConsumerOffsetInterval=5000))
                    assert r.code == ResponseCode.SUCCESS
                    assert broker.config.flushConsumerOffsetInterval == 5000
            assert (await broker_config(c, broker))["flushConsumerOffsetInterval"] == "6000"
            assert "flushConsumerOffsetInterval=6000\n" in saved(broker)
            # broker.conf says 5000 at the restart: the saved change wins.
            broker = await restart(cluster, broker, flushConsumerOffsetInterval=5000)
            assert broker.config.flushConsumerOffsetInterval == 6000
            assert (await broker_config(c, broker))["flushConsumerOffsetInterval"] == "6000"
            # A second change keeps the first one saved.
            r = await c.invoke(broker.address, update(fileReservedTime=12, deleteWhen="03;15"))
            assert r.code == ResponseCode.SUCCESS, r.remark
            text = saved(broker)
            for line in ("flushConsumerOffsetInterval=6000", "fileReservedTime=12",
                         "deleteWhen=03;15"):
                assert line + "\n" in text
            assert broker.store.config.fileReservedTime == 12
            assert broker.store.config.deleteWhen == "03;15"
        finally:
            await peer.close()
            await c.close()
            await cluster.stop()

    run_async(main())


@pytest.mark.parametrize("values, code, named", [
    ({"noSuchKey": "1"}, ResponseCode.INVALID_PARAMETER, "noSuchKey"),
    ({"listenPort": "10912"}, ResponseCode.NO_PERMISSION, "listenPort"),
    ({"storePathRootDir": "/elsewhere"}, ResponseCode.NO_PERMISSION, "storePathRootDir"),
    ({"brokerName": "broker-b"}, ResponseCode.NO_PERMISSION, "brokerName"),
    ({"mappedFileSizeCommitLog": "1024"}, ResponseCode.NO_PERMISSION, "mappedFileSizeCommitLog"),
    ({"brokerPermission": "8"}, ResponseCode.INVALID_PARAMETER, "brokerPermission"),
    ({"brokerPermission": "-1"}, ResponseCode.INVALID_PARAMETER, "brokerPermission"),
    ({"flushConsumerOffsetInterval": "-5"}, ResponseCode.INVALID_PARAMETER,
     "flushConsumerOffsetInterval"),
    ({"flushConsumerOffsetInterval": "99999999999999999999"}, ResponseCode.INVALID_PARAMETER,
     "flushConsumerOffsetInterval"),
    ({"flushIntervalCommitLog": "soon"}, ResponseCode.INVALID_PARAMETER,
     "flushIntervalCommitLog"),
    ({"longPollingEnable": "maybe"}, ResponseCode.INVALID_PARAMETER, "longPollingEnable"),
    ({"diskMaxUsedSpaceRatio": "99"}, ResponseCode.INVALID_PARAMETER, "diskMaxUsedSpaceRatio"),
    ({"deleteWhen": "24"}, ResponseCode.INVALID_PARAMETER, "deleteWhen"),
    ({"namesrvAddr": "127.0.0.1"}, ResponseCode.INVALID_PARAMETER, "namesrvAddr"),
    ({"namesrvAddr": "127.0.0.1:9876;host:70000"}, ResponseCode.INVALID_PARAMETER,
     "namesrvAddr"),
    ({"namesrvAddr": " ; "}, ResponseCode.INVALID_PARAMETER, "namesrvAddr"),
    ({"maxMessageSize": "0"}, ResponseCode.INVALID_PARAMETER, "maxMessageSize"),
    # One bad key refuses the good ones with it.
    ({"fileReservedTime": "1", "shortPollingTimeMills": "-1"},
     ResponseCode.INVALID_PARAMETER, "shortPollingTimeMills"),
    ({"fileReservedTime": "1", "brokerId": "1"}, ResponseCode.NO_PERMISSION, "brokerId"),
])
def test_refused_changes_change_nothing(cluster, values, code, named):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            before = await broker_config(c, broker)
            r = await c.invoke(broker.address, update(**values))
            assert r.code == code, r.remark
            assert named in r.remark
            assert await broker_config(c, broker) == before
            assert not os.path.exists(os.path.join(broker.config_dir, "broker.properties"))
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_changes_take_effect_at_once(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        try:
            r = await c.invoke(broker.address, RemotingCommand.request(
                RC.UPDATE_AND_CREATE_TOPIC, {"topic": "Cfg", "readQueueNums": 1,
                                             "writeQueueNums": 1, "perm": 6}))
            assert r.code == 0
            assert (await c.invoke(broker.address, send_v2("Cfg", b"x" * 300))).code == 0
            # maxMessageSize: the store refuses a body over the new limit at once.
            r = await c.invoke(broker.address, update(maxMessageSize=256))
            assert r.code == 0, r.remark
            r = await c.invoke(broker.address, send_v2("Cfg", b"x" * 300))
            assert r.code == ResponseCode.MESSAGE_ILLEGAL and "256" in r.remark
            assert (await c.invoke(broker.address, send_v2("Cfg", b"x" * 200))).code == 0
            # autoCreateTopicEnable: TBW102 goes, and a send to a new topic is refused.
            r = await c.invoke(broker.address, update(autoCreateTopicEnable="false"))
            assert r.code == 0, r.remark
            assert broker.topics.get("TBW102") is None
            r = await c.invoke(broker.address, send_v2("NotCreatedYet", b"x"))
            assert r.code == ResponseCode.TOPIC_NOT_EXIST
            r = await c.invoke(broker.address, update(autoCreateTopicEnable="true"))
            assert r.code == 0, r.remark
            assert broker.topics.get("TBW102") is not None
            assert (await c.invoke(broker.address, send_v2("NotCreatedYet", b"x"))).code == 0
            # brokerPermission 4 (read only): sends refused, and the NameServer's route says
            # the broker's queues are not writable, so clients stop choosing them.
            r = await c.invoke(broker.address, update(brokerPermission=4))
            assert r.code == 0, r.remark
            r = await c.invoke(broker.address, send_v2("Cfg", b"x"))
            assert r.code == ResponseCode.NO_PERMISSION

            async def route_perm() -> int:
                r = await c.invoke(cluster.namesrv, RemotingCommand.request(
                    RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Cfg"}))
                return orjson.loads(r.body)["queueDatas"][0]["perm"]

            for _ in range(100):
                if await route_perm() == 4:
                    break
                await asyncio.sleep(0.05)
            assert await route_perm() == 4
            r = await c.invoke(broker.address, update(brokerPermission=6))
            assert r.code == 0, r.remark
            for _ in range(100):
                if await route_perm() == 6:
                    break
                await asyncio.sleep(0.05)
            assert await route_perm() == 6
            assert (await c.invoke(broker.address, send_v2("Cfg", b"x"))).code == 0
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_a_new_namesrv_addr_is_registered_with_at_once_and_kept(cluster):
    async def main():
        first = await cluster.start_namesrv()
        broker = await cluster.start_broker()
        second = await cluster.start_namesrv()  # not in the broker's list yet
        c = RemotingClient()

        async def route(namesrv) -> RemotingCommand:
            return await c.invoke(namesrv.address, RemotingCommand.request(
                RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}))

        try:
            assert (await route(second)).code == ResponseCode.TOPIC_NOT_EXIST
            both = f"{first.address};{second.address}"
            r = await c.invoke(broker.address, update(namesrvAddr=both))
            assert r.code == ResponseCode.SUCCESS, r.remark
            # At once, not at the next 30 s registration.
            for _ in range(100):
                if (await route(second)).code == ResponseCode.SUCCESS:
                    break
                await asyncio.sleep(0.05)
            r = await route(second)
            assert r.code == ResponseCode.SUCCESS
            assert orjson.loads(r.body)["brokerDatas"][0]["brokerName"] \
                == broker.config.brokerName
            assert f"namesrvAddr={both}\n" in saved(broker)
            broker = await restart(cluster, broker, namesrvAddr=first.address)
            assert broker.config.namesrvAddr == both
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_a_change_that_cannot_be_saved_is_not_made(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        c = RemotingClient()
        # The atomic write goes through broker.properties.tmp: a directory there makes it
        # fail, for root too.
        blocker = os.path.join(broker.config_dir, "broker.properties.tmp")
        os.makedirs(blocker)
        try:
            r = await c.invoke(broker.address, update(flushConsumerOffsetInterval=7000))
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert "nothing changed" in r.remark
            assert broker.config.flushConsumerOffsetInterval == 5000
            assert (await broker_config(c, broker))["flushConsumerOffsetInterval"] == "5000"
            os.rmdir(blocker)
            r = await c.invoke(broker.address, update(flushConsumerOffsetInterval=7000))
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert broker.config.flushConsumerOffsetInterval == 7000
        finally:
            await c.close()
            await cluster.stop()

    run_async(main())


def test_a_saved_file_with_a_refused_key_stops_the_start(tmp_path):
    root = tmp_path / "store"
    (root / "config").mkdir(parents=True)
    (root / "config" / "broker.properties").write_text("brokerPermission=12\n")
    with pytest.raises(ValueError, match="brokerPermission"):
        Broker(*load_broker_conf({"storePathRootDir": str(root), "listenPort": 0}))
    (root / "config" / "broker.properties").write_text(
        "# a comment\nbrokerPermission = 4\nlongPollingEnable:false\n")
    broker = Broker(*load_broker_conf({"storePathRootDir": str(root), "listenPort": 0,
                                       "brokerPermission": 6}))
    assert broker.config.brokerPermission == 4
    assert broker.config.longPollingEnable is False


def test_a_broker_config_alone_is_kept(tmp_path, monkeypatch):
    """Broker(config) without a store config keeps every broker setting (it used to keep only
    brokerName) and gives the store the broker's address and size limit."""
    from rocketq.broker import Broker, BrokerConfig

    monkeypatch.setenv("HOME", str(tmp_path))  # the default storePathRootDir is ~/store
    config = BrokerConfig(brokerName="b-kept", brokerClusterName="C2", listenPort=0,
                          brokerIP1="127.0.0.1", maxMessageSize=1 << 20,
                          autoCreateTopicEnable=False, defaultTopicQueueNums=3)
    broker = Broker(config)
    assert broker.config is config
    assert broker.store_config.maxMessageSize == 1 << 20
    assert broker.store_config.storePathRootDir == str(tmp_path / "store")
    assert broker.topics.get("TBW102") is None  # autoCreateTopicEnable=false was kept
    assert broker.topics.get("C2") is not None


# ====================================================================== keys at start
def test_rocketmqs_old_spelling_is_read_under_the_new_name_with_a_warning(tmp_path):
    """RocketMQ up to 4.5.1 read mapedFileSizeCommitLog; such a file used to leave the 1 GiB
    default in force without a word."""
    from rocketq.broker.unknown_keys import unknown_key_warnings

    conf = tmp_path / "broker.conf"
    conf.write_text("mapedFileSizeCommitLog=1048576\nmapedFileSizeConsumeQueue=6000\n")
    config, store = load_broker_conf(conf)
    assert store.mappedFileSizeCommitLog == 1048576
    assert store.mappedFileSizeConsumeQueue == 6000
    lines = unknown_key_warnings(config.unknown, str(conf))
    assert len(lines) == 2
    assert "mapedFileSizeCommitLog" in lines[0] and "read as mappedFileSizeCommitLog" in lines[0]
    assert str(conf) in lines[0]
    assert "read as mappedFileSizeConsumeQueue" in lines[1]
    # The new spelling wins over the old one, from the file or from an override.
    conf.write_text("mapedFileSizeCommitLog=1048576\nmappedFileSizeCommitLog=2097152\n")
    assert load_broker_conf(conf)[1].mappedFileSizeCommitLog == 2097152
    conf.write_text("mapedFileSizeCommitLog=1048576\n")
    assert load_broker_conf(conf, mappedFileSizeCommitLog=4194304)[1] \
        .mappedFileSizeCommitLog == 4194304


@pytest.mark.parametrize("key, says", [
    ("mappedFileSizeComitLog", "unknown key mappedFileSizeComitLog in {conf}, ignored: "
                               "did you mean mappedFileSizeCommitLog?"),
    ("listenport", "did you mean listenPort?"),  # case is not ignored, but suggested
    ("autoCreateTopicEnabled", "did you mean autoCreateTopicEnable?"),
    ("transientStorePoolEnabel", "did you mean transientStorePoolEnable (a RocketMQ setting "
                                 "not used by rocketq)?"),
    ("transientStorePoolEnable", "key transientStorePoolEnable in {conf} is a RocketMQ setting "
                                 "not used by rocketq; ignored"),
    ("xyzzy", "unknown key xyzzy in {conf}, ignored"),
])
def test_each_unknown_key_is_named_with_the_nearest_known_one(tmp_path, key, says):
    from rocketq.broker.unknown_keys import unknown_key_warnings

    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b1\n{key}=1\n")
    config, _ = load_broker_conf(conf)
    assert config.unknown == {key: "1"}
    [line] = unknown_key_warnings(config.unknown, str(conf))
    assert says.format(conf=conf) in line
    assert ("did you mean" in line) == ("did you mean" in says)


@pytest.mark.parametrize("line, named", [
    ("listenPort=abc", ["listenPort", "'abc'", "integer"]),
    ("mappedFileSizeCommitLog=1g", ["mappedFileSizeCommitLog", "'1g'", "integer"]),
    ("mapedFileSizeCommitLog=1g", ["mappedFileSizeCommitLog", "'1g'", "integer"]),
    ("autoCreateTopicEnable=maybe", ["autoCreateTopicEnable", "'maybe'", "true or false"]),
    ("flushDiskType=FOO", ["flushDiskType", "'FOO'", "ASYNC_FLUSH or SYNC_FLUSH"]),
    ("brokerRole=LEADER", ["brokerRole", "'LEADER'", "SLAVE"]),
])
def test_a_value_of_the_wrong_type_is_refused_naming_file_key_and_value(tmp_path, line, named):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b1\n{line}\n")
    with pytest.raises(ValueError) as caught:
        load_broker_conf(conf)
    message = str(caught.value)
    assert message.startswith(f"{conf}: ")
    assert "\n" not in message
    for part in named:
        assert part in message


def test_an_unknown_key_in_a_change_is_answered_with_the_nearest_known_one():
    from rocketq.broker.config_updates import ConfigUpdateError, check_settings

    with pytest.raises(ConfigUpdateError,
                       match=r"flushConsumerOffsetIntervall \(did you mean "
                             r"flushConsumerOffsetInterval\?\)"):
        check_settings({"flushConsumerOffsetIntervall": "6000"})


def test_saved_changes_that_are_not_utf8_name_the_file(tmp_path):
    from rocketq.broker.config_updates import load_overrides, overrides_path

    config, store_config = load_broker_conf({"storePathRootDir": str(tmp_path)})
    path = overrides_path(store_config)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(b"brokerPermission=6\n\xff\xfe=1\n")

    with pytest.raises(ValueError, match=r"broker\.properties: not UTF-8 text"):
        load_overrides(config, store_config)
