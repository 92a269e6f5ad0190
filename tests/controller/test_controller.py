"""Controller nodes on real sockets with the embedded Raft engine: brokers register, the first
asks to be master, heartbeats renew its lease, and a silent master is replaced from the
SyncStateSet once its lease has run out, on one node and on three with the leader stopped."""

from __future__ import annotations

import asyncio
import contextlib
import time

import orjson
import pytest

from rocketq.controller import Controller
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient, RemotingServer

from .conftest import FAST, port_pair, start_controllers, until


class FakeBroker:
    """Speaks to controllers as a broker would, and records role notices."""

    def __init__(self, client: RemotingClient) -> None:
        self.client = client
        self.notices: list[RemotingCommand] = []
        self.server = RemotingServer(self._notice)
        self.id = -1

    def _notice(self, conn, cmd):
        self.notices.append(cmd)

    async def start(self) -> None:
        await self.server.start()

    @property
    def addr(self) -> str:
        return self.server.address

    async def call(self, controller: str, code: int, fields: dict, body: bytes = b""):
        return await self.client.invoke(
            controller, RemotingCommand.request(code, fields, body=body), 5)

    async def register(self, controller: str) -> RemotingCommand:
        r = await self.call(controller, RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": "c", "brokerName": "g", "brokerAddress": self.addr,
            "brokerId": self.id})
        if r.code == ResponseCode.SUCCESS:
            self.id = int(r.ext_fields["brokerId"])
        return r

    async def heartbeat(self, controller: str, epoch: int, offset: int = 0):
        return await self.call(controller, RequestCode.BROKER_HEARTBEAT, {
            "clusterName": "c", "brokerName": "g", "brokerAddr": self.addr,
            "brokerId": self.id, "epoch": epoch, "maxOffset": offset, "confirmOffset": offset})


async def replica_info(client: RemotingClient, controller: str) -> dict:
    r = await client.invoke(controller, RemotingCommand.request(
        RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "g"}), 5)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return {**r.ext_fields, **orjson.loads(r.body)}


async def failover(nodes: list[Controller], stop_leader: bool) -> None:
    client = RemotingClient()
    brokers = [FakeBroker(client) for _ in range(3)]
    try:
        for b in brokers:
            await b.start()
        leader = next(n for n in nodes if n.engine.is_leader())
        if len(nodes) > 1:  # a follower refuses changes and names the leader
            follower = next(n for n in nodes if n is not leader)
            refused = await brokers[0].register(follower.address)
            assert refused.code == ResponseCode.CONTROLLER_NOT_LEADER
            assert refused.ext_fields["controllerLeaderAddress"] == leader.address
        for b in brokers:
            assert (await b.register(leader.address)).code == ResponseCode.SUCCESS
        assert [b.id for b in brokers] == [1, 2, 3]
        # The first to ask becomes master; a second ask finds it in place.
        r = await brokers[0].call(leader.address, RequestCode.CONTROLLER_ELECT_MASTER,
                                  {"clusterName": "c", "brokerName": "g", "brokerId": 1})
        assert r.code == ResponseCode.SUCCESS and r.ext_fields["masterEpoch"] == "1"
        for b in brokers:
            await b.heartbeat(leader.address, 1, 100)
        last_beat = time.monotonic()  # broker 1's last: from here on it is silent
        r = await brokers[1].call(leader.address, RequestCode.CONTROLLER_ELECT_MASTER,
                                  {"clusterName": "c", "brokerName": "g", "brokerId": 2})
        assert r.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
        # The master reports broker 2 in sync (3 is not).
        r = await brokers[0].call(
            leader.address, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            {"brokerName": "g", "masterBrokerId": 1, "masterEpoch": 1},
            orjson.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": 1}))
        assert r.code == ResponseCode.SUCCESS, r.remark
        if stop_leader:
            await leader.stop()
            nodes.remove(leader)
            leader = await until(lambda: next((n for n in nodes if n.engine.is_leader()),
                                              None), 15)
            # The new leader holds what the old one committed (once it has applied its log).
            assert await until(lambda: "g" in leader.engine.state.groups and leader.engine.state
                               .groups["g"].sync_state_set == {1, 2}, 5)
        # Broker 1 is silent; 2 and 3 (3 with the larger offset) keep beating.
        async def beat_until_elected():
            while True:
                for b in brokers[1:]:
                    with contextlib.suppress(Exception):
                        await b.heartbeat(leader.address, 1, 200 if b.id == 3 else 100)
                info = await replica_info(client, leader.address)
                if info["masterBrokerId"] != "1":
                    return info
                await asyncio.sleep(0.1)
        info = await asyncio.wait_for(beat_until_elected(), 15)
        elapsed = time.monotonic() - last_beat
        # Only the SyncStateSet is eligible: 2, although 3 holds more.
        assert info["masterBrokerId"] == "2" and info["masterEpoch"] == "2"
        assert info["syncStateSet"] == [2]
        assert elapsed >= 0.8  # not before the master's lease ran out
        if not stop_leader:
            assert elapsed < 3  # and promptly after
        # The live brokers were told at once.
        await until(lambda: any(n.ext_fields.get("masterBrokerId") == "2"
                                for n in brokers[1].notices), 5)
        # The old master coming back is no master: its heartbeat renews nothing.
        r = await brokers[0].heartbeat(leader.address, 1)
        assert r.code == ResponseCode.SUCCESS and "leaseUntil" not in r.ext_fields
        assert (await replica_info(client, leader.address))["masterBrokerId"] == "2"
    finally:
        for b in brokers:
            await b.server.stop()
        await client.close()


def test_one_controller_elects_and_replaces_a_silent_master():
    async def go():
        nodes = await start_controllers(1)
        try:
            await failover(nodes, stop_leader=False)
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(go())


@pytest.mark.slow
def test_three_controllers_survive_their_leader_stopping():
    async def go():
        nodes = await start_controllers(3)
        try:
            await failover(nodes, stop_leader=True)
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(go())


@pytest.mark.slow
def test_two_controllers_on_etcd_survive_their_leader_stopping(etcd):
    from rocketq.controller import EtcdEngine

    async def go():
        nodes = []
        for _ in range(2):
            port = port_pair()
            addr = f"127.0.0.1:{port}"
            node = Controller(EtcdEngine(addr, etcd), "127.0.0.1", port, FAST)
            await node.start()
            nodes.append(node)
        try:
            await until(lambda: any(n.engine.is_leader() for n in nodes), 15)
            await until(lambda: all(n.engine.leader() for n in nodes), 15)
            await failover(nodes, stop_leader=True)
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(go())


def test_heartbeats_of_silent_brokers_are_forgotten():
    # Heartbeats may carry any name and id; those of brokers gone silent are dropped, so a
    # stream of them (a fuzzer, a misconfigured fleet) does not grow the controller's memory.
    async def main():
        (node,) = await start_controllers(1)
        client = RemotingClient()
        try:
            for n in range(50):
                r = await client.invoke(node.address, RemotingCommand.request(
                    RequestCode.BROKER_HEARTBEAT, {"brokerName": f"ghost-{n}", "brokerId": 1,
                                                   "brokerAddr": "127.0.0.1:1",
                                                   "heartbeatTimeoutMills": 200}), 5)
                assert r.code == ResponseCode.SUCCESS
            assert len(node.live) >= 40
            await until(lambda: not any(name.startswith("ghost-") for name in node.live), 5)
        finally:
            await client.close()
            await node.stop()

    asyncio.run(main())
