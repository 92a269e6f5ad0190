"""``rocketq admin broker config get|update`` against a real broker."""

from __future__ import annotations

import pytest

from rocketq.cli import main


def test_get_and_update_by_address_and_by_cluster(servers, capsys):
    broker = servers.brokers[0]
    admin = ["admin", "--namesrv", servers.namesrv, "broker", "config"]

    assert main([*admin, "get", "--broker", broker.address]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "flushConsumerOffsetInterval=5000" in lines
    assert f"brokerName={broker.config.brokerName}" in lines

    assert main([*admin, "update", "--broker", broker.address,
                 "flushConsumerOffsetInterval=6000", "fileReservedTime=24"]) == 0
    assert "flushConsumerOffsetInterval=6000" in capsys.readouterr().out
    assert broker.config.flushConsumerOffsetInterval == 6000
    assert broker.store_config.fileReservedTime == 24

    # By cluster: every broker the NameServer lists for it.
    assert main([*admin, "update", "--cluster", broker.config.brokerClusterName,
                 "longPollingEnable=false"]) == 0
    assert broker.config.longPollingEnable is False
    assert main([*admin, "get", "--cluster", broker.config.brokerClusterName]) == 0
    out = capsys.readouterr().out
    assert f"# {broker.address}" in out and "longPollingEnable=false" in out.splitlines()


def test_refusals_are_reported_and_change_nothing(servers, capsys):
    broker = servers.brokers[0]
    admin = ["admin", "--namesrv", servers.namesrv, "broker", "config"]
    capsys.readouterr()
    assert main([*admin, "update", "--broker", broker.address, "fileReservedTime=24",
                 "listenPort=1"]) == 1
    err = capsys.readouterr().err
    assert "listenPort" in err and "restart" in err
    assert broker.store_config.fileReservedTime == 72
    assert main([*admin, "update", "--broker", broker.address, "brokerPermission=9"]) == 1
    assert "brokerPermission" in capsys.readouterr().err
    assert main([*admin, "update", "--broker", broker.address, "novalue"]) == 2
    assert main([*admin, "get", "--cluster", "NoSuchCluster"]) == 1
    assert "NoSuchCluster" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*admin, "update", "fileReservedTime=1"])  # neither --broker nor --cluster
