"""The connector on a real Spark standalone cluster (a master and two workers, each a JVM with
its own executor and Python workers) against ``rocketq cluster`` (two broker groups with a
slave each): reads spread over the executors by queue, writes from several executors, the
exactly-once sink committing on both groups, and an executor SIGKILLed mid-batch."""

from __future__ import annotations

import collections
import os

import pytest

from rocketq import Message, Producer

from .clusters import half_messages, read_topic, run_driver

pytestmark = pytest.mark.slow


def produce(namesrv, topic, bodies):
    with Producer(f"pg-{topic}", namesrv=namesrv) as producer:
        for body in bodies:
            producer.send(Message(topic, body.encode()))


def test_a_read_spreads_over_both_executors_by_queue(spark_standalone, rocketq_cluster):
    masters = rocketq_cluster.create_topic("ClusterRead", 4)
    assert len(masters) == 2
    sent = [f"r-{i}" for i in range(2000)]
    produce(rocketq_cluster.namesrv, "ClusterRead", sent)
    result = run_driver(spark_standalone.url, rocketq_cluster.namesrv, "read", "ClusterRead")
    rows = result["rows"]
    # Every message once: the bodies and their (broker, queue, offset) places.
    assert sorted(body for _b, _q, _o, body, _e in rows) == sorted(sent)
    places = [(b, q, o) for b, q, o, _body, _e in rows]
    assert len(set(places)) == len(sent)
    # A partition per queue of each group; both groups and both executors took part.
    assert result["partitions"] == 8
    assert {b for b, *_ in rows} == set(masters)
    executors = collections.Counter(e for *_, e in rows)
    workers = {e.split("/")[0] for e in executors}
    assert len(executors) >= 2 and len(workers) == 2, executors
    # One queue is read by one task: its rows all came from one executor.
    by_queue = collections.defaultdict(set)
    for b, q, _o, _body, e in rows:
        by_queue[(b, q)].add(e)
    assert all(len(e) == 1 for e in by_queue.values())


def test_writes_from_several_executors_and_exactly_once_on_both_groups(
        spark_standalone, rocketq_cluster):
    for topic in ("ClusterAlo", "ClusterEo"):
        rocketq_cluster.create_topic(topic, 4)
    n = 3000
    run_driver(spark_standalone.url, rocketq_cluster.namesrv, "write", "ClusterAlo",
               "ClusterEo", str(n))
    expected = [f"w-{i}" for i in range(n)]
    for topic in ("ClusterAlo", "ClusterEo"):
        got = read_topic(rocketq_cluster.namesrv, topic, n)
        bodies = [m.body.decode() for m in got]
        assert sorted(b.split("|")[0] for b in bodies) == sorted(expected), topic
        senders = {b.split("|")[1].split("/")[0] for b in bodies}
        assert len(senders) == 2, senders  # both workers' executors sent
        assert {m.queue.broker_name for m in got} == {"broker-a", "broker-b"}


def test_an_executor_killed_mid_batch_loses_and_doubles_nothing(
        spark_standalone, rocketq_cluster, tmp_path):
    rocketq_cluster.create_topic("ClusterIn", 4)
    rocketq_cluster.create_topic("ClusterOut", 4)
    n = 4000
    produce(rocketq_cluster.namesrv, "ClusterIn", [f"k-{i}" for i in range(n)])
    marker = tmp_path / "stalled"
    result = run_driver(spark_standalone.url, rocketq_cluster.namesrv, "kill", "ClusterIn",
                        "ClusterOut", str(marker), str(tmp_path / "checkpoint"))
    assert result["error"] is None and result["killed"], result
    # The killed executor's process is gone.
    assert not os.path.exists(f"/proc/{result['killed']['executor_pid']}/cmdline") or \
        b"Coarse" not in open(f"/proc/{result['killed']['executor_pid']}/cmdline", "rb").read()
    got = read_topic(rocketq_cluster.namesrv, "ClusterOut", n)
    assert sorted(m.body.decode() for m in got) == sorted(f"out-k-{i}" for i in range(n))
    # The killed attempt had sent halves (more halves than rows were stored), and none of
    # them reached a consumer.
    assert half_messages(rocketq_cluster.namesrv, "ClusterOut") > n
