"""A master whose process is gone is replaced at once, within its lease: its heartbeat
connection closed and its broker and HA ports refuse connections. A closed connection alone
(the master still listening) or a master that only went silent waits for the lease, as
before: the lease is what keeps two masters from taking writes at once."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import orjson

from rocketq.controller import ControllerConfig
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient, RemotingServer

from .conftest import start_controllers, until

#: A lease and heartbeat timeout far longer than the waits below: only the fast path can
#: elect within them.
LONG_LEASE = ControllerConfig(scanNotActiveBrokerInterval=50, masterLeaseMillis=20_000,
                              brokerHeartbeatTimeoutMillis=20_000)


class Replica:
    """Speaks to the controller as a broker would, over a client of its own (so its
    connection can close alone), with a broker port and an HA port that listen."""

    def __init__(self) -> None:
        self.client = RemotingClient()
        self.port = RemotingServer(lambda conn, cmd: None)
        self.ha_port = RemotingServer(lambda conn, cmd: None)
        self.id = -1

    async def start(self) -> None:
        await self.port.start()
        await self.ha_port.start()

    async def call(self, controller: str, code: int, fields: dict, body: bytes = b""):
        return await self.client.invoke(
            controller, RemotingCommand.request(code, fields, body=body), 5)

    async def register(self, controller: str) -> None:
        r = await self.call(controller, RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": "c", "brokerName": "g", "brokerAddress": self.port.address,
            "brokerId": self.id, "haServerAddr": self.ha_port.address})
        assert r.code == ResponseCode.SUCCESS, r.remark
        self.id = int(r.ext_fields["brokerId"])

    async def heartbeat(self, controller: str, epoch: int) -> RemotingCommand:
        return await self.call(controller, RequestCode.BROKER_HEARTBEAT, {
            "clusterName": "c", "brokerName": "g", "brokerAddr": self.port.address,
            "brokerId": self.id, "epoch": epoch, "maxOffset": 100, "confirmOffset": 100})

    async def close(self) -> None:
        await self.port.stop()
        await self.ha_port.stop()
        await self.client.close()


async def master_and_slave(controller: str) -> tuple[Replica, Replica]:
    """Replica 1 master (epoch 1) with replica 2 in its SyncStateSet, both beating."""
    master, slave = Replica(), Replica()
    for r in (master, slave):
        await r.start()
        await r.register(controller)
    r = await master.call(controller, RequestCode.CONTROLLER_ELECT_MASTER,
                          {"clusterName": "c", "brokerName": "g", "brokerId": master.id})
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["masterEpoch"] == "1"
    r = await master.call(controller, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                          {"brokerName": "g", "masterBrokerId": 1, "masterEpoch": 1},
                          orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1}))
    assert r.code == ResponseCode.SUCCESS, r.remark
    for r in (master, slave):
        assert (await r.heartbeat(controller, 1)).code == ResponseCode.SUCCESS
    return master, slave


def run_case(config: ControllerConfig, case) -> None:
    async def go():
        (node,) = await start_controllers(1, config)
        master = slave = None
        try:
            master, slave = await master_and_slave(node.address)
            await case(node, master, slave)
        finally:
            for r in (master, slave):
                if r is not None:
                    await r.close()
            await node.stop()
    asyncio.run(go())


def master_id(node) -> int | None:
    return node.engine.state.groups["g"].master_id


def test_a_master_whose_process_is_gone_is_replaced_within_its_lease():
    async def case(node, master, slave):
        # What SIGKILL leaves: the ports refuse connections, the connections close.
        await master.port.stop()
        await master.ha_port.stop()
        gone = time.monotonic()
        await master.client.close()
        await until(lambda: master_id(node) == 2, 3)
        assert time.monotonic() - gone < 1.5
        group = node.engine.state.groups["g"]
        assert group.master_epoch == 2 and group.sync_state_set == {2}
        assert node.fast_elections == 1
    run_case(LONG_LEASE, case)


def test_a_closed_connection_of_a_master_still_listening_elects_nobody():
    async def case(node, master, slave):
        await master.client.close()  # the connection closes; the process lives on
        await asyncio.sleep(1.5)
        assert master_id(node) == 1 and node.fast_elections == 0
        # It heartbeats again on a new connection and keeps its lease.
        r = await master.heartbeat(node.address, 1)
        assert r.code == ResponseCode.SUCCESS and r.ext_fields.get("leaseMillis")
    run_case(LONG_LEASE, case)


def test_a_master_that_only_went_silent_waits_for_its_lease():
    # A partition that drops packets closes nothing: no election before the lease runs out,
    # even once its ports are gone.
    async def case(node, master, slave):
        await master.port.stop()
        await master.ha_port.stop()
        await asyncio.sleep(1.5)
        assert master_id(node) == 1 and node.fast_elections == 0
    run_case(LONG_LEASE, case)


def test_without_elect_when_master_gone_every_election_waits_for_the_lease():
    async def case(node, master, slave):
        await master.port.stop()
        await master.ha_port.stop()
        await master.client.close()
        await asyncio.sleep(1.5)
        assert master_id(node) == 1 and node.fast_elections == 0
    run_case(dataclasses.replace(LONG_LEASE, electWhenMasterGone=False), case)
