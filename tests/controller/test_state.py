"""The controller's replicated state machine and election policy, event by event."""

from __future__ import annotations

from rocketq.controller import ControllerState, Live, choose_master
from rocketq.protocol import ResponseCode


def registered(*addrs: str) -> ControllerState:
    state = ControllerState()
    for addr in addrs:
        state.apply({"op": "register", "cluster": "c", "group": "g", "addr": addr})
    return state


def live(epoch: int, offset: int, priority: int = 0, seen: int = 0) -> Live:
    return Live("addr", epoch, offset, offset, priority, seen, 1000)


def test_brokers_get_ids_and_keep_them():
    state = registered("a:1", "b:1")
    assert state.groups["g"].brokers == {1: "a:1", 2: "b:1"}
    again = state.apply({"op": "register", "cluster": "c", "group": "g", "addr": "b:1"})
    assert again["brokerId"] == 2  # a known address keeps its id
    moved = state.apply({"op": "register", "cluster": "c", "group": "g", "addr": "b:2",
                         "broker_id": 2})
    assert moved["brokerId"] == 2 and state.groups["g"].brokers[2] == "b:2"
    assert state.apply({"op": "register", "cluster": "c", "group": "g",
                        "addr": "c:1"})["brokerId"] == 3


def test_an_election_raises_epochs_and_resets_the_sync_state_set():
    state = registered("a:1", "b:1", "c:1")
    first = state.apply({"op": "elect", "group": "g", "master_id": 1, "now_ms": 1000,
                         "lease_ms": 3000})
    assert (first["masterBrokerId"], first["masterEpoch"], first["syncStateSet"]) == (1, 1, [1])
    assert first["masterAddress"] == "a:1" and first["leaseUntil"] == 4000
    state.apply({"op": "alter_sync_state_set", "group": "g", "master_id": 1, "master_epoch": 1,
                 "sync_state_set_epoch": 1, "members": [1, 2, 3]})
    # While the lease holds, no other master can be elected.
    early = state.apply({"op": "elect", "group": "g", "master_id": 2, "now_ms": 3999,
                         "lease_ms": 3000})
    assert early["error"] == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    second = state.apply({"op": "elect", "group": "g", "master_id": 2, "now_ms": 4000,
                          "lease_ms": 3000})
    assert (second["masterBrokerId"], second["masterEpoch"]) == (2, 2)
    assert second["syncStateSet"] == [2] and second["syncStateSetEpoch"] == 3


def test_renewals_are_fenced_by_master_and_epoch():
    state = registered("a:1", "b:1")
    state.apply({"op": "elect", "group": "g", "master_id": 1, "now_ms": 0, "lease_ms": 3000})
    ok = state.apply({"op": "renew", "group": "g", "broker_id": 1, "master_epoch": 1,
                      "now_ms": 2000, "lease_ms": 3000})
    assert ok["leaseUntil"] == 5000
    assert state.apply({"op": "renew", "group": "g", "broker_id": 2, "master_epoch": 1,
                        "now_ms": 2000, "lease_ms": 3000})["error"] == \
        ResponseCode.CONTROLLER_INVALID_MASTER
    assert state.apply({"op": "renew", "group": "g", "broker_id": 1, "master_epoch": 0,
                        "now_ms": 2000, "lease_ms": 3000})["error"] == \
        ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    # A late renewal never shortens the lease.
    state.apply({"op": "renew", "group": "g", "broker_id": 1, "master_epoch": 1,
                 "now_ms": 100, "lease_ms": 3000})
    assert state.groups["g"].lease_until_ms == 5000


def test_sync_state_set_changes_are_checked_in_rocketmqs_order():
    state = registered("a:1", "b:1")
    state.apply({"op": "elect", "group": "g", "master_id": 1, "now_ms": 0, "lease_ms": 1})

    def alter(**kw):
        event = {"op": "alter_sync_state_set", "group": "g", "master_id": 1, "master_epoch": 1,
                 "sync_state_set_epoch": 1, "members": [1, 2]}
        event.update(kw)
        return state.apply(event).get("error")

    assert alter(members=[1]) == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert alter(master_id=2) == ResponseCode.CONTROLLER_INVALID_MASTER
    assert alter(master_epoch=0) == ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH
    assert alter(sync_state_set_epoch=0) == ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert alter(members=[1, 9]) == ResponseCode.CONTROLLER_INVALID_REPLICAS
    assert alter(members=[2]) == ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert alter() is None
    assert state.groups["g"].sync_state_set == {1, 2}
    assert state.groups["g"].sync_state_set_epoch == 2


def test_the_policy_prefers_epoch_then_offset_then_priority_within_the_sync_state_set():
    state = registered("a:1", "b:1", "c:1", "d:1")
    group = state.groups["g"]
    group.sync_state_set = {2, 3, 4}
    assert choose_master(group, {2: live(1, 50), 3: live(2, 10), 4: live(1, 90)}) == 3
    assert choose_master(group, {2: live(1, 50), 4: live(1, 90)}) == 4
    assert choose_master(group, {2: live(1, 90, priority=5), 4: live(1, 90, priority=1)}) == 4
    # Out of the SyncStateSet: not eligible unless unclean elections are allowed.
    assert choose_master(group, {1: live(9, 999)}) is None
    assert choose_master(group, {1: live(9, 999)}, unclean=True) == 1


def test_unknown_events_and_groups_are_answered_not_raised():
    state = ControllerState()
    assert state.apply({"op": "nonsense"})["error"] == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert state.apply({"op": "elect", "group": "nope", "master_id": 1, "now_ms": 0,
                        "lease_ms": 1})["error"] == \
        ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
