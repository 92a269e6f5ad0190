"""``rocketq admin group create|update|delete|list`` against a real broker."""

from __future__ import annotations

from rocketq.cli import main


def test_group_lifecycle(servers, capsys):
    broker = servers.brokers[0]
    admin = ["admin", "--namesrv", servers.namesrv, "group"]
    table = broker.subscription_groups

    # Default targets: every master the NameServer knows.
    assert main([*admin, "create", "Billing", "--retry-max-times", "3", "--retry-queues",
                 "2", "--no-broadcast-enable"]) == 0
    assert f"{broker.address}: created Billing" in capsys.readouterr().out
    cfg = table.get("Billing")
    assert (cfg.retry_max_times, cfg.retry_queue_nums, cfg.consume_broadcast_enable,
            cfg.consume_enable) == (3, 2, False, True)

    # update changes what it is given and keeps the rest; create would reset it.
    assert main([*admin, "update", "Billing", "--no-consume-enable",
                 "--broker", broker.address]) == 0
    cfg = table.get("Billing")
    assert (cfg.consume_enable, cfg.retry_max_times, cfg.retry_queue_nums) == (False, 3, 2)
    assert main([*admin, "create", "Billing", "--cluster",
                 broker.config.brokerClusterName]) == 0
    assert table.get("Billing").retry_max_times == 16

    capsys.readouterr()
    assert main([*admin, "list"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [broker.address, "Billing", "true", "true", "16", "1"] in rows

    # Refused by the broker: reported, exit status 1, nothing changed.
    assert main([*admin, "update", "Billing", "--retry-queues", "-1"]) == 1
    assert "retryQueueNums" in capsys.readouterr().err
    assert table.get("Billing").retry_queue_nums == 1
    assert main([*admin, "create", "bad name!"]) == 1
    assert "groupName" in capsys.readouterr().err

    assert main([*admin, "delete", "Billing", "--remove-offset"]) == 0
    assert table.get("Billing") is None
