"""What a new user meets in a first hour with ``rocketq admin``, ``bench``, ``cluster`` and the
servers: errors in one line, options where the docs put them, ids that work, defaults shown,
and what a port says to a client of the wrong protocol."""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocketq import Admin, ClientError, Message, Producer, PullConsumer
from rocketq.cli import main
from rocketq.cli.cluster import DEFAULT_DATA_DIR

from ..conftest import wait_for
from ..controller.test_failover import replica_info

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]
SMALL_FILES = ("mappedFileSizeCommitLog=8388608\nmaxHashSlotNum=4096\nmaxIndexNum=16384\n"
               "mappedFileSizeConsumeQueue=60000\n")


def dead_address() -> str:
    """A loopback address nothing listens on (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def rocketq(*args: str, env: dict[str, str] | None = None, timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
    """Run the ``rocketq`` command as a user does and wait for it (bounded)."""
    return subprocess.run([*ROCKETQ, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def flat(text: str) -> str:
    """Help text with argparse's line wrapping undone."""
    return " ".join(text.split())


# ---------------------------------------------------------------- 1. errors in one line


def test_admin_and_bench_failures_print_one_line_and_exit_1(servers):
    ns = servers.namesrv
    tail = rocketq("admin", "--namesrv", ns, "tail", "NoSuchTopic", "--timeout", "5")
    assert tail.returncode == 1
    line = one_line(tail.stderr)
    assert line.startswith("rocketq admin: tail: ") and "NoSuchTopic" in line

    dead = dead_address()
    listing = rocketq("admin", "--namesrv", dead, "topic", "list")
    assert listing.returncode == 1
    line = one_line(listing.stderr)
    assert line.startswith("rocketq admin: topic list: ") and dead in line

    bench = rocketq("bench", "produce", "--namesrv", dead, "--queues", "2", "--count", "3",
                    "--no-progress")
    assert bench.returncode == 1
    line = one_line(bench.stderr)
    assert line.startswith("rocketq bench: produce: ") and dead in line


# ---------------------------------------------------------------- 2. --namesrv anywhere


def test_namesrv_before_or_after_the_subcommand_and_from_the_environment(
        servers, capsys, monkeypatch):
    ns = servers.namesrv
    servers.create_topic("Where", 1)
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    assert main(["admin", "topic", "list", "--namesrv", ns]) == 0  # as the CLI's docstring
    assert "Where" in capsys.readouterr().out.split()
    # Before it, as ever: the subcommand's own --namesrv, absent, does not overwrite it.
    assert main(["admin", "--namesrv", ns, "topic", "list"]) == 0
    assert "Where" in capsys.readouterr().out.split()

    monkeypatch.setenv("NAMESRV_ADDR", ns)
    assert main(["admin", "topic", "list"]) == 0
    assert "Where" in capsys.readouterr().out.split()
    monkeypatch.setenv("NAMESRV_ADDR", dead_address())
    assert main(["admin", "topic", "list", "--namesrv", ns]) == 0  # the command line wins
    assert "Where" in capsys.readouterr().out.split()

    for argv in (["bench", "--namesrv", ns, "produce"], ["bench", "produce", "--namesrv", ns]):
        assert main([*argv, "--topic", "Where", "--count", "3", "--json", "--no-progress"]) == 0
        assert json.loads(capsys.readouterr().out)["produce"]["messages"] == 3
    monkeypatch.setenv("NAMESRV_ADDR", ns)
    assert main(["bench", "produce", "--topic", "Where", "--count", "2", "--json",
                 "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["produce"]["messages"] == 2
    assert servers.brokers[0].store.get_max_offset("Where", 0) == 8
    # --start-broker starts its own: a --namesrv besides it is refused.
    assert main(["bench", "--namesrv", ns, "produce", "--start-broker"]) == 2
    assert "not both" in capsys.readouterr().err


# ---------------------------------------------------------------- 3, 4. tail


def _send(namesrv: str, topic: str, count: int) -> list[str]:
    with Producer("first-contact-producer", namesrv=namesrv) as producer:
        return [producer.send(Message(topic, b"m%d" % i)).msg_id for i in range(count)]


def test_tail_stops_at_exactly_count_messages(servers, capsys):
    servers.create_topic("Tail", 1)
    _send(servers.namesrv, "Tail", 6)
    assert main(["admin", "--namesrv", servers.namesrv, "tail", "Tail", "--from", "first",
                 "--count", "1", "--timeout", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].endswith(" m0")
    assert main(["admin", "--namesrv", servers.namesrv, "tail", "Tail", "--from", "first",
                 "--count", "4", "--timeout", "10"]) == 0
    assert [line.split()[-1] for line in capsys.readouterr().out.splitlines()] == \
        ["m0", "m1", "m2", "m3"]


def test_tail_prints_the_tags_and_keys_a_message_has_and_nothing_for_absent_ones(
        servers, capsys):
    servers.create_topic("Labels", 1)
    with Producer("first-contact-producer", namesrv=servers.namesrv) as producer:
        producer.send(Message("Labels", b"plain"))
        producer.send(Message("Labels", b"one", tags="paid", keys="order-17"))
        producer.send(Message("Labels", b"two", keys=["a", "b"]))
    assert main(["admin", "--namesrv", servers.namesrv, "tail", "Labels", "--from", "first",
                 "--count", "3", "--timeout", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" offset ", 1)[1] for line in lines] == [
        "0 plain", "1 tags=paid keys=order-17 one", "2 keys=a,b two"]


def test_tail_leaves_no_consumer_group_or_offsets_behind(servers, capsys):
    broker = servers.brokers[0]
    servers.create_topic("Trace", 2)
    _send(servers.namesrv, "Trace", 4)
    before = set(broker.subscription_groups.groups)
    for where in ("first", "last"):
        assert main(["admin", "--namesrv", servers.namesrv, "tail", "Trace", "--from", where,
                     "--count", "4", "--timeout", "2"]) == 0
    assert capsys.readouterr().out.count(" m") == 4  # what --from first printed
    assert set(broker.subscription_groups.groups) == before
    assert not [g for g in broker.subscription_groups.groups if "tail" in g]
    # Nor any committed position: no group has offsets in the topic.
    assert not [group for group in before if "Trace" in broker.offsets.topics_of_group(group)]
    # Nor a consumer group in the broker's client table once the tail has left, so nothing
    # reports TOOLS_CONSUMER as consuming the topic (RocketMQ forgets an empty group too).
    assert wait_for(lambda: "TOOLS_CONSUMER" not in broker.clients.consumers, 5)


# ---------------------------------------------------------------- 5. delete what is not there


def test_deleting_a_topic_that_does_not_exist_says_so(servers, capsys):
    admin = ["admin", "--namesrv", servers.namesrv, "topic", "delete"]
    assert main([*admin, "NoSuchTopic"]) == 1
    captured = capsys.readouterr()
    assert "deleted" not in captured.out
    assert captured.err.strip() == \
        "rocketq admin: topic delete: topic NoSuchTopic does not exist"
    servers.create_topic("Doomed", 1)
    assert main([*admin, "Doomed"]) == 0
    assert capsys.readouterr().out.strip() == "deleted Doomed from broker-a"
    assert servers.brokers[0].topics.get("Doomed") is None


# ---------------------------------------------------------------- 6. the id send prints


def test_the_id_send_prints_finds_the_message(servers, capsys):
    ns = servers.namesrv
    servers.create_topic("Ids", 2)
    servers.create_topic("Other", 1)
    assert main(["admin", "--namesrv", ns, "send", "Ids", "find me", "--count", "2"]) == 0
    ids = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert len(ids) == 2
    for msg_id in ids:
        # No --topic: the id alone, as send printed it.
        assert main(["admin", "--namesrv", ns, "message", "id", msg_id]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert (shown["msgId"], shown["topic"], shown["body"]) == (msg_id, "Ids", "find me")
        # The broker's offset id of the same message works too, and --topic narrows.
        assert main(["admin", "--namesrv", ns, "message", "id", shown["offsetMsgId"]]) == 0
        assert json.loads(capsys.readouterr().out)["msgId"] == msg_id
        assert main(["admin", "message", "id", msg_id, "--topic", "Ids", "--namesrv", ns]) == 0
        assert json.loads(capsys.readouterr().out)["msgId"] == msg_id
    assert main(["admin", "--namesrv", ns, "message", "id", ids[0], "--topic", "Other"]) == 1
    assert "no message of Other" in capsys.readouterr().err


# ---------------------------------------------------------------- 7. bench says why


def test_bench_produce_that_cannot_send_says_why_and_fails(capsys):
    dead = dead_address()
    assert main(["bench", "produce", "--namesrv", dead, "--count", "5", "--no-progress",
                 "--json"]) == 1
    captured = capsys.readouterr()
    reasons = json.loads(captured.out)["produce"]["error_reasons"]
    assert sum(reasons.values()) == 5 and all(dead in reason for reason in reasons)
    err = captured.err.strip().splitlines()
    assert err and err[0].startswith("rocketq bench: produce: 5 message(s) failed: ")
    assert dead in err[0]


# ---------------------------------------------------------------- 8. a busy port


def test_a_busy_port_is_named_with_the_server_that_wanted_it(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        conf = tmp_path / "small.conf"
        conf.write_text(SMALL_FILES + "haListenPort=0\n")
        for args, role in (
                (["namesrv", "--port", port], "NameServer"),
                (["controller", "--port", port], "controller"),
                (["broker", "--broker-port", port, "--data-dir", str(tmp_path / "b"),
                  "--namesrv", dead_address(), "-c", str(conf)], "broker"),
                (["standalone", "--namesrv-port", "0", "--broker-port", port, "--data-dir",
                  str(tmp_path / "s"), "-c", str(conf)], "broker"),
                (["standalone", "--namesrv-port", port, "--data-dir", str(tmp_path / "n"),
                  "-c", str(conf)], "NameServer")):
            done = rocketq("--log-level", "WARNING", *args)
            assert done.returncode == 1, (args, done.stderr)
            assert one_line(done.stderr) == (
                f"rocketq {args[0]}: the {role} cannot listen on 127.0.0.1:{port}: address "
                "already in use (is another one running?)")
        # The gRPC port of the 5.x clients is named as such, and the broker that wanted it
        # does not stay half-started.
        for args in (["standalone", "--namesrv-port", "0", "--broker-port", "0",
                      "--grpc-port", port, "--data-dir", str(tmp_path / "g"), "-c", str(conf)],
                     ["broker", "--broker-port", "0", "--grpc-port", port, "--data-dir",
                      str(tmp_path / "h"), "--namesrv", dead_address(), "-c", str(conf)]):
            # (ERROR: the broker registers before it opens its gRPC port, and the dead
            # NameServer's warning is not what this test reads.)
            done = rocketq("--log-level", "ERROR", *args)
            assert done.returncode == 1, (args, done.stderr)
            assert one_line(done.stderr) == (
                f"rocketq {args[0]}: the broker cannot listen on 127.0.0.1:{port} (the gRPC "
                "port, grpcServerPort): address already in use (is another one running?)")


# ---------------------------------------------------------------- 9. help texts


def test_help_is_whole_and_shows_defaults(capsys):
    for argv in (["bench", "--help"], ["bench", "produce", "--help"], ["namesrv", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
    text = flat(capsys.readouterr().out)
    assert ("benchmarks against any RocketMQ-protocol broker (what RocketMQ ships as its "
            "benchmark scripts)") in text
    assert "message body bytes (default: 128)" in text
    assert "in async and batch modes (default: 256)" in text
    assert "--port PORT port to listen on (default: 9876)" in text


# ---------------------------------------------------------------- 10. 8 queues


def test_topics_are_created_with_8_queues_by_default(servers, capsys):
    topics = servers.brokers[0].topics
    assert main(["admin", "--namesrv", servers.namesrv, "topic", "create", "Eight"]) == 0
    assert "with 8 queues" in capsys.readouterr().out
    assert (topics.get("Eight").read_queue_nums, topics.get("Eight").write_queue_nums) == (8, 8)
    with Admin(servers.namesrv) as admin:
        admin.create_topic("AlsoEight")
    assert topics.get("AlsoEight").write_queue_nums == 8


# ---------------------------------------------------------------- 11. rocketq cluster


class Lines:
    """A child's standard output read on a thread, so each wait for a line is bounded."""

    def __init__(self, stream) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))

    def until(self, predicate, timeout: float) -> list[str]:
        """Lines up to the first that matches ``predicate`` (it included)."""
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no such line within {timeout} s: {seen}") from None
            seen.append(line)
            if predicate(line):
                return seen


@pytest.mark.slow
def test_cluster_says_which_replica_is_master_and_which_child_exited(tmp_path):
    extra = tmp_path / "extra.conf"
    extra.write_text(SMALL_FILES)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        ns_port = s.getsockname()[1]
    proc = subprocess.Popen(
        [*ROCKETQ, "cluster", "--replicas", "2", "--data-dir", str(tmp_path / "data"),
         "--namesrv-port", str(ns_port), "-c", str(extra)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        out = Lines(proc.stdout)
        start = out.until(lambda line: "Ctrl-C stops all" in line, 90)
        replicas = {}  # address -> (replica label, pid)
        for line in start:
            if line.startswith("broker-a replica "):  # "broker-a replica 0: ADDR (pid N, ..."
                label, rest = line.split(": ", 1)
                replicas[rest.split()[0]] = (label, int(rest.split("pid ", 1)[1].split(",")[0]))
        assert len(replicas) == 2
        masters = [line for line in start if line.startswith("broker-a master: ")]
        assert len(masters) == 1, start
        master = masters[0].split()[2]
        label, pid = replicas[master]
        assert masters[0] == f"broker-a master: {master} ({label[9:]}, pid {pid})"

        # Once the slave is in sync (a message sent), it can take over from the master.
        controller = next(line.split()[1] for line in start if line.startswith("Controller "))
        with Producer("pg", namesrv=f"127.0.0.1:{ns_port}", send_timeout=2) as producer:
            assert wait_for(lambda: producer.send(Message("Try", b"x")).status.value
                            == "SEND_OK", 30)
        assert wait_for(lambda: len(replica_info(controller).get("syncStateSet", [])) == 2,
                        30)
        os.kill(pid, signal.SIGKILL)
        out.until(lambda line: line == f"{label} (pid {pid}) was killed by SIGKILL", 20)
        # The other replica takes over, and the command says so.
        (other,) = set(replicas) - {master}
        other_label, other_pid = replicas[other]
        out.until(lambda line: line == f"broker-a master: {other} ({other_label[9:]}, pid "
                                       f"{other_pid}), was {master}", 60)
        assert proc.poll() is None  # a broker's exit does not stop the cluster
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- 12. .gitignore


def test_the_cluster_directory_is_ignored_by_git(capsys):
    with pytest.raises(SystemExit):
        main(["cluster", "--help"])
    assert f"(default: {DEFAULT_DATA_DIR})" in flat(capsys.readouterr().out)
    ignored = (Path(__file__).parents[2] / ".gitignore").read_text().split()
    assert DEFAULT_DATA_DIR.removeprefix("./").rstrip("/") + "/" in ignored


# ---------------------------------------------------------------- 13. the wrong protocol


@pytest.mark.parametrize(("first_bytes", "hint"), [
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "this is the remoting port; RocketMQ 5.x gRPC "
                                           "clients connect to the gRPC proxy port"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "an HTTP request: this is the remoting port"),
])
def test_a_grpc_or_http_client_is_told_apart_and_the_port_keeps_serving(
        servers, caplog, first_bytes, hint):
    caplog.set_level(logging.WARNING, logger="rocketq.remoting")
    host, port = servers.namesrv.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(first_bytes)
        assert raw.recv(100) == b""  # that connection, closed
    assert wait_for(lambda: any(hint in r.getMessage() for r in caplog.records), 5)
    warning = next(r.getMessage() for r in caplog.records if hint in r.getMessage())
    assert "frame length" in warning
    with Admin(servers.namesrv) as admin:  # the server goes on serving
        assert "TBW102" in admin.list_topics()


# ---------------------------------------------------------------- 14. Admin API


def test_admin_lists_and_deletes_topics_and_reports_consumer_progress(servers):
    ns = servers.namesrv
    with Admin(ns) as admin:
        admin.create_topic("Progress", 2)
        assert "Progress" in admin.list_topics()
        _send(ns, "Progress", 10)
        with PullConsumer("progress-group", namesrv=ns, from_where="first") as consumer:
            consumer.subscribe("Progress")
            consumer.start()
            got: list = []
            assert wait_for(lambda: got.extend(consumer.poll(0.2)) or len(got) >= 10, 20)
            consumer.commit()
        _send(ns, "Progress", 3)  # not consumed: the lag
        progress = admin.consumer_progress("progress-group")
        assert progress.group == "progress-group"
        assert [(q.queue.topic, q.queue.broker_name, q.queue.queue_id)
                for q in progress.queues] == [("Progress", "broker-a", 0),
                                              ("Progress", "broker-a", 1)]
        assert sum(q.broker_offset for q in progress.queues) == 13
        assert sum(q.consumer_offset for q in progress.queues) == 10
        assert progress.total_lag == 3 == sum(q.lag for q in progress.queues)
        assert progress.lag_by_topic() == {"Progress": 3}
        assert admin.consumer_progress("progress-group", "Progress").total_lag == 3
        assert admin.consumer_progress("nobody").queues == []

        assert admin.delete_topic("Progress") == ["broker-a"]
        assert "Progress" not in admin.list_topics()
        assert servers.brokers[0].topics.get("Progress") is None
        with pytest.raises(ClientError, match="topic Progress does not exist"):
            admin.delete_topic("Progress")
