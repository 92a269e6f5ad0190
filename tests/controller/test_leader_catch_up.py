"""A newly elected controller leader serves nothing before its state holds everything committed
before it began to lead: until then it answers CONTROLLER_NOT_LEADER, as a follower does, on
the embedded Raft engine and on etcd."""

from __future__ import annotations

import asyncio
import time

import orjson

from rocketq.controller import Controller, EtcdEngine, RaftEngine
from rocketq.controller.state import ControllerState
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode

from .conftest import FAST, port_pair, until

REGISTER = {"op": "register", "cluster": "c", "group": "g", "addr": "127.0.0.1:10911"}


class FakeSyncObj:
    """The few things of pysyncobj's SyncObj the engine reads to know it leads and is caught
    up, set by hand."""

    def __init__(self, term: int, noop: int, applied: int) -> None:
        self.leading = True
        self.raftCurrentTerm = term
        self._SyncObj__noopIDx = noop
        self.raftLastApplied = applied

    def _isLeader(self) -> bool:
        return self.leading

    def _getLeader(self) -> None:
        return None


def requests() -> list[RemotingCommand]:
    fields = {"clusterName": "c", "brokerName": "g", "brokerAddress": "127.0.0.1:10911",
              "brokerId": 1, "epoch": 0}
    return [RemotingCommand.request(code, fields) for code in (
        RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.CONTROLLER_ELECT_MASTER)]


def refused_everything(node: Controller) -> bool:
    async def answer(cmd: RemotingCommand) -> int:
        got = node.handle(None, cmd)  # type: ignore[arg-type]
        return (await got if asyncio.iscoroutine(got) else got).code

    return all(asyncio.run(answer(cmd)) == ResponseCode.CONTROLLER_NOT_LEADER
               for cmd in requests())


def test_a_raft_leader_serves_once_it_has_applied_its_own_terms_no_op():
    engine = RaftEngine("127.0.0.1:1", [])
    node = Controller(engine, "127.0.0.1", 0, FAST)
    fake = engine._obj = FakeSyncObj(term=3, noop=10, applied=7)
    engine._on_tick()
    assert not engine.is_leader()  # leads, but entries before its no-op are not applied
    assert refused_everything(node)

    fake.raftLastApplied = 10
    assert not engine.is_leader()  # nothing counts before the Raft thread's round ends
    engine._on_tick()
    assert engine.is_leader()
    assert all(node._not_leader(cmd) is None for cmd in requests())

    # Leader again in a later term, seen before the round that appends the new no-op ends:
    # the last term's no-op says nothing about this one.
    fake.raftCurrentTerm, fake.raftLastApplied = 5, 12
    assert not engine.is_leader()
    engine._on_tick()
    assert engine.is_leader()  # 12 >= 10: pysyncobj had not moved the no-op yet
    fake._SyncObj__noopIDx = 13
    engine._on_tick()
    assert not engine.is_leader() and refused_everything(node)

    fake.leading = False
    fake.raftLastApplied = 13
    engine._on_tick()
    assert not engine.is_leader()


def test_a_restarted_raft_node_leads_with_its_whole_journal_applied(tmp_path):
    async def main():
        port = port_pair()
        addr = f"127.0.0.1:{port}"
        engine = RaftEngine(addr, [addr], str(tmp_path))
        await engine.start()
        try:
            await until(engine.is_leader, 15)
            for i in range(50):
                await engine.propose({**REGISTER, "group": f"g{i}"})
        finally:
            await engine.stop()

        engine = RaftEngine(addr, [addr], str(tmp_path))
        await engine.start()
        try:
            deadline = time.monotonic() + 15
            while not engine.is_leader():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.001)
            assert len(engine.state.groups) == 50
        finally:
            await engine.stop()

    asyncio.run(main())


def test_an_etcd_leader_serves_once_its_state_is_as_new_as_its_win():
    engine = EtcdEngine("127.0.0.1:1", "http://127.0.0.1:1")
    node = Controller(engine, "127.0.0.1", 0, FAST)
    engine._leading_until = time.monotonic() + 60  # holds the leader key...
    engine._leader_revision, engine._revision = 7, 5  # ...won over a newer state than its own
    assert not engine.is_leader() and engine.leader() == "127.0.0.1:1"
    assert refused_everything(node)

    state = ControllerState()
    state.apply(REGISTER)
    value = orjson.dumps(state.to_json())
    engine._adopt(value, 6)
    assert not engine.is_leader()
    engine._adopt(value, 7)
    assert engine.is_leader() and "g" in engine.state.groups
    assert all(node._not_leader(cmd) is None for cmd in requests())

    engine._adopt(orjson.dumps(ControllerState().to_json()), 6)  # a read that came back late
    assert "g" in engine.state.groups and engine.is_leader()

    engine._leading_until = 0.0
    assert not engine.is_leader()


def test_an_etcd_node_taking_over_leads_with_what_the_last_leader_wrote(etcd):
    async def main():
        first, second = EtcdEngine("127.0.0.1:1", etcd), EtcdEngine("127.0.0.1:2", etcd)
        await first.start()
        try:
            await until(first.is_leader, 15)

            async def deaf() -> None:  # the second node sees nothing the first one writes
                await asyncio.Event().wait()

            second._follow = deaf  # type: ignore[method-assign]
            await second.start()
            await until(lambda: second.leader() == "127.0.0.1:1", 15)
            await first.propose(REGISTER)
            assert "g" not in second.state.groups
        finally:
            await first.stop()  # hands the leader key over at once
        try:
            await until(second.is_leader, 15, interval=0.001)
            assert "g" in second.state.groups
        finally:
            await second.stop()

    asyncio.run(main())
