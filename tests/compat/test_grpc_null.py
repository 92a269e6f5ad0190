"""The gRPC client harness itself: the official 5.x Python and Node.js clients, driven by
grpc/official_client.py and js/grpc_client.js, against the null service of
benchmarks/grpc_null.py (send of every kind, receive + ack, change of invisible time, push,
a transaction the server checks, TLS with credentials)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from .grpc_clients import null_server, run_node, run_official

pytestmark = pytest.mark.slow

RUNNERS = {"python": run_official, "node": run_node}
MESSAGE_ID = re.compile(r"^[0-9A-F]{34}$")


@pytest.fixture(scope="module")
def endpoint():
    with null_server() as address:
        yield address


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_send_every_kind(client, endpoint):
    run = RUNNERS[client]
    common = ["--endpoint", endpoint, "--topic", "NullTopic", "--count", "3"]
    normal = run(["send", *common, "--tag", "TagA", "--keys", "k-{i},other",
                  "--prop", "color=red-{i}"])
    assert normal["count"] == 3 and normal["errors"] == []
    ids = [s["message_id"] for s in normal["sent"]]
    assert len(set(ids)) == 3 and all(MESSAGE_ID.match(i) for i in ids)
    offsets = [s["offset"] for s in normal["sent"]]
    assert offsets == sorted(offsets)
    for kind in ("fifo", "delay"):
        assert run(["send", *common, "--kind", kind])["count"] == 3
    delayed = run(["send", *common, "--kind", "delay", "--delay-seconds", "30"])
    for s in delayed["sent"]:
        assert 25 < s["delivery_timestamp_s"] - s["sent_at"] < 35
    committed = run(["send", *common, "--kind", "transaction", "--tx-resolution", "commit"])
    assert all(s["transaction_id"] for s in committed["sent"])
    assert committed["checked"] == []
    run(["send", *common, "--kind", "transaction", "--tx-resolution", "rollback"])


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_transaction_checked_by_server(client, endpoint):
    """An unended half message comes back as RecoverOrphanedTransactionCommand; the driver's
    checker sees it (and answers commit)."""
    result = RUNNERS[client](["send", "--endpoint", endpoint, "--topic", "NullTx", "--count",
                              "2", "--kind", "transaction", "--tx-resolution", "unknown",
                              "--check-wait", "20"])
    assert sorted(c["message_id"] for c in result["checked"]) == \
        sorted(s["message_id"] for s in result["sent"])


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_receive_ack_and_change_invisible(client, endpoint):
    run = RUNNERS[client]
    common = ["--endpoint", endpoint, "--topic", "NullTopic", "--group", "NullGroup"]
    got = run(["receive", *common, "--count", "40", "--batch", "16", "--invisible", "20"])
    assert got["count"] == 40 and got["acked"] == 40 and got["errors"] == []
    first = got["messages"][0]
    assert first["topic"] == "NullTopic" and first["tag"] == "null"
    assert first["delivery_attempt"] == 1 and first["body_size"] == 128
    assert first["receipt_handle"] and not first["corrupted"]
    assert first["keys"] == ["key-0"] and first["properties"] == {"null": "0"}
    changed = run(["receive", *common, "--count", "2", "--change-invisible", "30",
                   "--no-ack"])
    assert changed["acked"] == 0
    for m in changed["messages"]:
        assert m["receipt_handle"] == m["receipt_handle_before_change"] + "+"


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_push(client, endpoint):
    result = RUNNERS[client](["push", "--endpoint", endpoint, "--topic", "NullTopic",
                              "--group", "NullPush", "--count", "40", "--fail-times", "1",
                              "--timeout", "30"])
    assert result["count"] >= 40
    assert result["deliveries"] > result["count"]  # each message failed once first
    failed = [m for m in result["messages"] if m["result"] == "FAILURE"]
    assert failed and failed[0]["delivery_attempt"] == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_tls_and_credentials(client, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    run = RUNNERS[client]
    with null_server("--tls-cert", str(cert), "--tls-key", str(key), "--access-key", "AK",
                     "--secret-key", "SK") as address:
        common = ["send", "--endpoint", address, "--topic", "NullTls", "--tls", "--ca-file",
                  str(cert), "--access-key", "AK", "--timeout", "10", "--deadline", "40"]
        assert run([*common, "--secret-key", "SK"])["count"] == 1
        wrong = run([*common, "--secret-key", "wrong"], check=False)
        assert not wrong["ok"]
