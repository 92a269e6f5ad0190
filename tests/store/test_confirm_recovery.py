"""Controller mode's confirm offset in the checkpoint: a controller-mode store recovers its
ConsumeQueues no further than the confirm offset it kept (RocketMQ 5's confirmPhyOffset),
cuts units past it that a run before a crash built, and shows the rest once a live confirm
offset lets it, without indexing anything twice."""

from __future__ import annotations

import dataclasses

import pytest

from rocketq.store import MessageStore, StoreMessage
from rocketq.store.checkpoint import Checkpoint
from rocketq.store.errors import SlaveNotWritableError

from .test_recovery import read_all


def _written(config, n: int = 10):
    """``n`` messages on queue 0 of T, each with its own key, dispatched and flushed by a
    store that is not in controller mode: its ConsumeQueue holds them all."""
    store = MessageStore(config)
    results = [store.put_message(StoreMessage.create("T", b"body-%d" % i, 0, keys=f"k{i}"))
               for i in range(n)]
    store.close()
    return results


def _keep_in_checkpoint(config, confirm: int, dispatched: int, flushed: int | None = None):
    cp = Checkpoint(config.checkpoint_path)
    cp.confirm_offset, cp.dispatched_offset = confirm, dispatched
    if flushed is not None:
        cp.flushed_offset = flushed
    cp.flush()
    cp.close()


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
def test_a_controller_mode_store_recovers_only_what_was_confirmed(config, crashed):
    results = _written(config)
    end = results[-1].commitlog_offset + results[-1].size
    # Confirmed: the first 6 messages and a part of the 7th (a slave's chunks do not follow
    # records); dispatched as far as the 4th when the checkpoint was written.
    confirm = results[6].commitlog_offset + 10
    _keep_in_checkpoint(config, confirm, results[4].commitlog_offset,
                        results[2].commitlog_offset if crashed else None)
    if crashed:
        open(config.abort_path, "w").close()
    store = MessageStore(dataclasses.replace(config, enableControllerMode=True))
    try:
        assert store.recovered_abnormally is crashed
        assert store.commitlog.max_offset == end  # the log keeps every byte
        store.catch_up()
        assert store.get_max_offset("T", 0) == 6  # units past the confirm offset are cut
        assert [m.body for m in read_all(store, "T", 0)] == [b"body-%d" % i for i in range(6)]
        # Nor does a query by key find a message past the confirm offset (the 7th is
        # confirmed only in part), though its record is in the CommitLog and was indexed.
        assert [m.body for m in store.query_messages("T", "k5")] == [b"body-5"]
        for i in range(6, 10):
            assert store.query_messages("T", f"k{i}") == [], i
            assert all(offset < results[6].commitlog_offset
                       for offset in store.index.query("T", f"k{i}", 32, 0, 1 << 62)), i
        assert store.config.is_slave  # fenced until its broker knows its role
        with pytest.raises(SlaveNotWritableError):
            store.put_message(StoreMessage.create("T", b"refused", 0))
        # A live confirm offset (its master's, say) lets the rest through.
        store.limit_dispatch(lambda: end)
        store.dispatch_more()
        assert store.wait_dispatched(end, 5)
        assert [m.body for m in read_all(store, "T", 0)] == [b"body-%d" % i
                                                             for i in range(10)]
        for i in range(10):  # indexed once each, whichever pass saw them
            assert len(store.query_messages("T", f"k{i}")) == 1, i
        assert store.confirm_offset() == end
    finally:
        store.close()
    assert Checkpoint(config.checkpoint_path).confirm_offset == end  # kept for the next start


def test_a_promoted_store_dispatches_its_whole_log_before_it_takes_appends(config):
    results = _written(config, 8)
    _keep_in_checkpoint(config, results[3].commitlog_offset, results[3].commitlog_offset)
    store = MessageStore(dataclasses.replace(config, enableControllerMode=True))
    try:
        store.catch_up()
        assert store.get_max_offset("T", 0) == 3
        store.set_role("SYNC_MASTER")  # elected: the whole log is the group's
        assert store.get_max_offset("T", 0) == 8
        assert store.put_message(StoreMessage.create("T", b"next", 0)).queue_offset == 8
    finally:
        store.close()


def test_a_store_not_in_controller_mode_recovers_everything(config):
    results = _written(config, 6)
    _keep_in_checkpoint(config, results[1].commitlog_offset, results[1].commitlog_offset)
    store = MessageStore(config)
    try:
        store.catch_up()
        assert store.get_max_offset("T", 0) == 6
        assert store.confirm_offset() == store.reput_offset  # no limit: what is dispatched
    finally:
        store.close()


def test_a_checkpoint_page_from_before_the_confirm_offset_is_read(config):
    """An older page ends after the clean-end offset: its confirm offset reads 0 and the
    dispatched offset bounds a controller-mode recovery instead."""
    results = _written(config, 6)
    _keep_in_checkpoint(config, 0, results[4].commitlog_offset)
    with open(config.checkpoint_path, "r+b") as fh:
        fh.truncate(48)
    store = MessageStore(dataclasses.replace(config, enableControllerMode=True))
    try:
        store.catch_up()
        assert store.get_max_offset("T", 0) == 4
    finally:
        store.close()
