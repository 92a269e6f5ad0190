"""The exporter of real ``rocketq`` processes: a standalone turned on by its broker.conf keys,
and a ``rocketq cluster`` whose NameServer, controller and brokers each serve their own
metrics on consecutive ports."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rocketq import Message, Producer

from ..cli.test_cli import SMALL_FILES, small_conf, start, stop
from ..conftest import wait_for
from .scrape import free_ports, scrape, total, value

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]


def scraped_until(url: str, check, timeout: float = 30.0) -> dict[str, list]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            samples = scrape(url)
        except OSError:
            samples = {}
        if samples and check(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} never showed it")
        time.sleep(0.3)


@pytest.mark.slow
def test_standalone_serves_its_metrics_when_broker_conf_asks(tmp_path):
    port = free_ports(1)
    conf = small_conf(tmp_path, f"metricsExporterType=PROM\nmetricsPromExporterPort={port}\n")
    proc = start(["standalone", "--data-dir", str(tmp_path / "data"), "--namesrv-port", "0",
                  "--broker-port", "0", "--grpc-port", "0", "-c", conf], "connect clients")
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        samples = scraped_until(url, lambda s: value(s, "rocketq_namesrv_brokers",
                                                     role="master") == 1)
        namesrv = samples["rocketq_namesrv_topics"][0].labels["node_id"]
        with Producer("pg-proc", namesrv=namesrv) as producer:
            for i in range(5):
                producer.send(Message("ProcMetrics", b"m%d" % i))
        samples = scraped_until(url, lambda s: value(
            s, "rocketmq_messages_in_total", topic="ProcMetrics") == 5)
        assert total(samples, "rocketmq_rpc_latency_count", node_type="broker",
                     request_code="send_message_v2") >= 5
        assert total(samples, "rocketmq_rpc_latency_count", node_type="nameserver") >= 1
        assert value(samples, "process_resident_memory_bytes") > 0
    finally:
        assert stop(proc) == 0
    out = proc.stdout.read() + proc.stderr.read()
    assert "Traceback" not in out

def start_cluster_on_free_ports(tmp_path, extra, attempts: int = 3):
    """``rocketq cluster`` with its metrics on four consecutive free ports; started again on
    other ports when another process took one of them before the cluster bound it."""
    for attempt in range(attempts):
        base = free_ports(4)
        ns_port = next(p for p in iter(lambda: free_ports(1), None) if not base <= p < base + 4)
        data = tmp_path / f"data{attempt}"
        proc = subprocess.Popen(
            [*ROCKETQ, "cluster", "--replicas", "2", "--data-dir", str(data),
             "--namesrv-port", str(ns_port), "--grpc-port", "0", "--metrics-port", str(base),
             "-c", str(extra)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C stops all" in line:
                return proc, base, lines
        proc.terminate()  # SIGTERM: the cluster stops its children too
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
        err = proc.stderr.read()
        taken = "already in use" in err or any(
            "already in use" in f.read_text(errors="replace") for f in data.rglob("*.log"))
        if not taken or attempt == attempts - 1:
            raise AssertionError(err[-3000:] or "".join(lines))
    raise AssertionError("unreachable")


@pytest.mark.slow
def test_cluster_serves_namesrv_controller_and_broker_metrics_on_consecutive_ports(tmp_path):
    extra = tmp_path / "extra.conf"
    extra.write_text(SMALL_FILES.replace("haListenPort=0\n", ""))
    proc, base, lines = start_cluster_on_free_ports(tmp_path, extra)
    try:
        text = "".join(lines)
        for i in range(4):
            assert f"metrics http://127.0.0.1:{base + i}/metrics" in text, text
        namesrv, controller = (f"http://127.0.0.1:{base + i}/metrics" for i in (0, 1))
        brokers = [f"http://127.0.0.1:{base + i}/metrics" for i in (2, 3)]
        # The NameServer: both replicas registered, one of them master.
        samples = scraped_until(namesrv, lambda s: total(
            s, "rocketq_namesrv_brokers", cluster="DefaultCluster") == 2)
        assert value(samples, "rocketq_namesrv_brokers", role="master") == 1
        assert value(samples, "rocketq_namesrv_broker_groups", cluster="DefaultCluster") == 1
        # The controller: it leads, elected broker-a's master, and both replicas are in sync.
        samples = scraped_until(controller, lambda s: value(
            s, "rocketq_controller_sync_state_set_size", broker_set="broker-a") == 2)
        assert value(samples, "rocketq_controller_is_leader") == 1
        assert value(samples, "rocketq_controller_master_epoch", cluster="DefaultCluster",
                     broker_set="broker-a") >= 1
        assert value(samples, "rocketq_controller_has_master", broker_set="broker-a") == 1
        assert value(samples, "rocketq_controller_active_brokers", broker_set="broker-a") == 2
        assert total(samples, "rocketq_controller_elections_total", broker_set="broker-a",
                     election_result="new_master_elected") >= 1
        assert total(samples, "rocketmq_rpc_latency_count", node_type="controller",
                     request_code="broker_heartbeat") >= 1
        # The brokers: the master sees its slave caught up, by its controller-given id.
        def master_of(s):
            return value(s, "rocketq_replication_slaves") == 1 and value(
                s, "rocketq_replication_lag_bytes") == 0
        assert wait_for(lambda: any(master_of(scrape(u)) for u in brokers), 30)
        master = next(u for u in brokers if master_of(scrape(u)))
        (link,) = scrape(master)["rocketq_replication_lag_bytes"]
        assert link.labels["slave_id"].isdigit()
        assert value(scrape(master), "rocketq_replication_lag_seconds") == 0
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
