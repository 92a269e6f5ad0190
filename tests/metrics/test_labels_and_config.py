"""Label values as RocketMQ writes them, the counters the send path keeps for the message
size histogram, and how the exporter is turned on: flag over broker.conf key over default."""

from __future__ import annotations

import pytest

from rocketq.broker import load_broker_conf
from rocketq.broker.stats import SIZE_BUCKETS, Stats
from rocketq.cli import build_parser
from rocketq.cli.broker import _broker_overrides
from rocketq.cli.cluster import free_port, metrics_args, promised_ports
from rocketq.cli.metrics import _broker_metrics
from rocketq.metrics import labels
from rocketq.metrics.labels import cumulative
from rocketq.metrics.rpc import LATENCY_BUCKETS_MS, RpcLatency


def test_label_values():
    assert labels.request_code(310) == "send_message_v2"
    assert labels.request_code(11) == "pull_message"
    assert labels.request_code(99999) == "99999"
    assert labels.response_code(0) == "success"
    assert labels.response_code(19) == "pull_not_found"
    # 209 and 210 are POLLING_FULL and POLLING_TIMEOUT, and the ACL requests' refusals.
    assert labels.response_code(209) == "polling_full"
    assert labels.response_code(209, 200050) == "polling_full"  # POP_MESSAGE
    assert labels.response_code(209, 50) == "update_and_create_acl_config_failed"
    assert labels.response_code(210, 51) == "delete_acl_config_failed"
    assert labels.response_code(211, 53) == "update_global_white_addrs_config_failed"
    assert labels.response_code(0, 52) == "success"
    assert labels.version(479) == "v5_3_3" and labels.version(409) == "v4_9_8"
    assert labels.language("JAVA") == "java"
    assert labels.message_type("RMQ_SYS_TRANS_HALF_TOPIC") == "transaction"
    assert labels.message_type("SCHEDULE_TOPIC_XXXX") == "delay"
    assert labels.message_type("rmq_sys_wheel_timer") == "delay"
    assert labels.message_type("Orders", {"message.type": "FIFO"}) == "fifo"
    assert labels.message_type("Orders", {}) == "normal"
    assert labels.is_system("TBW102") and labels.is_system("rmq_sys_REVIVE_LOG_x")
    assert labels.is_system("Orders", "CID_RMQ_SYS_REVIVE_GROUP")
    assert not labels.is_system("Orders", "cg")
    assert labels.is_retry("%RETRY%cg") and not labels.is_retry("%DLQ%cg")


def test_message_sizes_are_bucketed_where_sends_are_counted():
    stats = Stats()
    stats.put(1, "T", 1024)  # at a bound: in that bucket (le is "at most")
    stats.put(1, "T", 1025)
    stats.put(3, "T", 3 * 600_000)  # a batch: counted at its average size
    stats.put(1, "T", 5 << 20)  # past the last bound
    assert stats.size_buckets["T"] == [1, 1, 0, 3, 0, 0, 1]
    assert stats.put_by_topic["T"] == 6
    buckets = cumulative(SIZE_BUCKETS, stats.size_buckets["T"])
    assert buckets[0] == ("1024.0", 1) and buckets[-1] == ("+Inf", 6)


def test_rpc_latency_buckets():
    timer = RpcLatency(labels.Node("broker", "b", "c"))
    timer.observe(11, 0, 0.0005, True, True)  # a held pull: long polling
    timer.observe(11, 0, 2.5, True, True)
    timer.observe(310, 0, 0.004, True, True)  # a send waiting for a flush: not long polling
    timer.observe(50, 209, 0.002, False, True)  # an account the ACL file could not take
    (family,) = timer.collect()
    answers = {(s.labels["request_code"], s.labels["response_code"]) for s in family.samples}
    assert ("update_and_create_acl_config", "update_and_create_acl_config_failed") in answers
    assert not any(response == "polling_full" for _, response in answers)
    counts = {(s.labels["request_code"], s.labels["is_long_polling"], s.labels.get("le")):
              s.value for s in family.samples if s.name.endswith("_bucket")}
    assert counts[("pull_message", "true", "1.0")] == 1
    assert counts[("pull_message", "true", "3000.0")] == 2
    assert counts[("send_message_v2", "false", "5.0")] == 1
    assert len(LATENCY_BUCKETS_MS) == 9


def conf_of(argv: list[str], conf: dict[str, str]):
    args = build_parser().parse_args(argv)
    config, _ = load_broker_conf(conf, **_broker_overrides(args))
    return _broker_metrics(config)


def test_the_flag_wins_over_the_broker_conf_keys_over_the_default():
    assert conf_of(["broker"], {}) == ("127.0.0.1", None)  # off by default
    keys = {"metricsExporterType": "PROM", "metricsPromExporterPort": "7001"}
    assert conf_of(["broker"], keys) == ("127.0.0.1", 7001)
    assert conf_of(["broker", "--metrics-port", "7002"], keys) == ("127.0.0.1", 7002)
    assert conf_of(["broker", "--metrics-port", "0"], {}) == ("127.0.0.1", 0)
    # The host: --metrics-host, else metricsPromExporterHost, else brokerIP1 (RocketMQ's).
    assert conf_of(["broker"], {**keys, "brokerIP1": "10.0.0.5"})[0] == "10.0.0.5"
    assert conf_of(["broker"], {**keys, "metricsPromExporterHost": "0.0.0.0"})[0] == "0.0.0.0"
    assert conf_of(["broker", "--metrics-host", "::1"],
                   {**keys, "metricsPromExporterHost": "0.0.0.0"})[0] == "::1"
    assert conf_of(["standalone", "--metrics-port", "0"], {}) == ("127.0.0.1", 0)
    assert conf_of(["broker"], {"metricsExporterType": "prom"})[1] == 5557
    # A type rocketq does not export is refused at start, naming what it takes.
    with pytest.raises(ValueError, match="metricsExporterType must be DISABLE or PROM"):
        load_broker_conf({"metricsExporterType": "OTLP_GRPC"})
    # The NameServer and the controller take the flag; the cluster gives consecutive ports.
    args = build_parser().parse_args(["namesrv", "--metrics-port", "9100"])
    assert args.metrics_port == 9100 and args.metrics_host is None
    assert metrics_args(9100, 1) == ["--metrics-port", "9101"] and metrics_args(None, 1) == []


def test_the_cluster_keeps_its_promised_metrics_and_grpc_ports_free():
    # 2 groups of 3: NameServer, controller and six brokers' metrics, six gRPC ports.
    ports = promised_ports(9100, 8081, 6)
    assert ports == frozenset(range(9100, 9108)) | frozenset(range(8081, 8087))
    assert promised_ports(None, 8081, 3) == frozenset({8081, 8082, 8083})
    assert promised_ports(0, 0, 3) == frozenset()  # ports the children pick
    for _ in range(20):  # a broker's own port (and its HA port after it) is never promised
        port = free_port(pair=True, avoid=ports)
        assert port not in ports and port + 1 not in ports
