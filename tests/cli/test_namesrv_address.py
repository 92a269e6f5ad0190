"""A NameServer address that cannot be one is named as such: a malformed one when the client
or command is made, a broker's port given as the NameServer's at the first request."""

from __future__ import annotations

import pytest

from rocketq import Admin, Message, Producer
from rocketq.cli import main
from rocketq.client.errors import NameServerError


@pytest.mark.parametrize("argv", [["admin", "--namesrv", "http://127.0.0.1:9876", "topic",
                                   "list"],
                                  ["admin", "topic", "list", "--namesrv", "127.0.0.1"],
                                  ["bench", "produce", "--namesrv", "http://127.0.0.1:9876"],
                                  ["dashboard", "--namesrv", "ns one:9876"]])
def test_a_malformed_namesrv_option_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument -n/--namesrv: namesrv: " in err or "argument --namesrv: namesrv: " in err
    assert "(from --namesrv, else $NAMESRV_ADDR)" in err


def test_a_malformed_namesrv_addr_variable_is_named(monkeypatch, capsys):
    monkeypatch.setenv("NAMESRV_ADDR", "http://127.0.0.1:9876")
    with pytest.raises(SystemExit):
        main(["admin", "topic", "list"])
    err = capsys.readouterr().err
    assert "'http://127.0.0.1:9876' is a URL" in err and "$NAMESRV_ADDR" in err


def broker_named(addr: str) -> str:
    return (f"{addr} answers as a broker, not a NameServer (request code 105 not "
            "supported); the NameServer's default port is 9876")


def test_a_broker_given_as_the_namesrv_is_named(servers, capsys):
    broker = servers.brokers[0].address
    with Producer("p", namesrv=broker) as producer:
        with pytest.raises(NameServerError) as exc:
            producer.send(Message("Orders", b"x"))
    assert broker_named(broker) in str(exc.value)
    with Admin(broker) as admin, pytest.raises(NameServerError) as exc:
        admin.masters()
    assert (f"{broker} answers as a broker, not a NameServer (request code 106 not "
            "supported)") in str(exc.value)
    assert main(["admin", "--namesrv", broker, "topic", "route", "Orders"]) == 1
    assert broker_named(broker) in capsys.readouterr().err


def test_a_broker_among_the_namesrvs_is_passed_over(servers):
    broker = servers.brokers[0].address
    with Producer("p", namesrv=f"{broker};{servers.namesrv}") as producer:
        for _ in range(4):  # whichever address it starts with
            producer.send(Message("Orders", b"x"))


def test_a_server_that_is_no_broker_is_not_called_one(servers):
    """A controller answers neither the route request nor a broker's."""
    import asyncio

    from rocketq.cli.controller import build_controller

    async def go() -> str:
        controller = build_controller("127.0.0.1", 0, None, None, None)
        await controller.start()
        try:
            from rocketq.aio import Admin as AsyncAdmin

            async with AsyncAdmin(controller.address) as admin:
                with pytest.raises(NameServerError) as exc:
                    await admin.masters()
            return str(exc.value)
        finally:
            await controller.stop()

    text = asyncio.run(go())
    assert "is not a NameServer (request code 106 not supported)" in text
