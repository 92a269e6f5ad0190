"""What ``rocketq`` says at start about a broker.conf: each key it does not read, named with
what it is or the nearest known key, and a value of the wrong type refused in one line."""

from __future__ import annotations

import pytest

from rocketq.cli import main

from .test_cli import small_conf, start, stop


def test_standalone_warns_for_each_key_it_does_not_read(tmp_path):
    conf = small_conf(tmp_path, "mapedFileSizeCommitLog=8388608\nlistenPrt=10911\n"
                                "transientStorePoolEnable=true\n")
    proc = start(["standalone", "--data-dir", str(tmp_path / "data"), "--namesrv-port", "0",
                  "--broker-port", "0", "-c", conf], "connect clients")
    stop(proc)
    err = proc.stderr.read()
    assert (f"key mapedFileSizeCommitLog in {conf} is the old spelling of "
            "mappedFileSizeCommitLog (RocketMQ 4.5.1 and older); read as "
            "mappedFileSizeCommitLog") in err
    assert f"unknown key listenPrt in {conf}, ignored: did you mean listenPort?" in err
    assert f"key transientStorePoolEnable in {conf} is a RocketMQ setting not used by " \
           "rocketq; ignored" in err
    assert err.count("listenPrt") == 1  # once, not again for each slave or server


@pytest.mark.parametrize("line, named", [
    ("listenPort=abc", "listenPort must be an integer, got 'abc'"),
    ("autoCreateTopicEnable=maybe", "autoCreateTopicEnable must be true or false, got 'maybe'"),
    ("flushDiskType=FOO", "flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, not 'FOO'"),
])
def test_a_wrong_value_stops_the_broker_with_one_line(tmp_path, capsys, line, named):
    conf = small_conf(tmp_path, line + "\n")
    assert main(["broker", "-c", conf]) == 1
    err = capsys.readouterr().err
    assert err == f"rocketq: {conf}: {named}\n"
