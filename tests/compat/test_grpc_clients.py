"""The official RocketMQ 5.x clients, unchanged, against ``rocketq standalone``'s gRPC port:
PyPI ``rocketmq-python-client`` 5.1.2 (its own venv: its import name ``rocketmq`` is the
C++ client's too) and npm ``rocketmq-client-nodejs`` 1.0.8, each through the same driver
commands (grpc/official_client.py, js/grpc_client.js); and both protocols on one topic with
the C++ client over remoting."""

from __future__ import annotations

import pathlib
import time

import pytest

from rocketq import PullConsumer
from rocketq.cli import main as rocketq_main

from ..acl.test_acl_servers import USER, write_acl
from ..certs import make_pki
from ..conftest import wait_for
from .clients import Standalone, client_python, run_client
from .grpc_clients import DriverError, run_node, run_official
from .test_cpp_scenarios import CONSUME_SCRIPT, PRODUCE_SCRIPT

pytestmark = pytest.mark.slow

RUNNERS = {"python": run_official, "node": run_node}
TOPICS = {"Normal": "NORMAL", "Fifo": "FIFO", "Delay": "DELAY", "Tx": "TRANSACTION"}


def admin(server: Standalone, *args: str) -> None:
    assert rocketq_main(["admin", "--namesrv", server.namesrv, *args]) == 0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Standalone(tmp_path_factory.mktemp("grpc") / "data",
                   "transactionTimeOut=1000\ntransactionCheckInterval=500\n", grpc=True)
    try:
        for topic, kind in TOPICS.items():
            for client in RUNNERS:  # each client its own topics: groups start at their start
                admin(s, "topic", "create", f"{topic}-{client}", "--queues", "2",
                      "--message-type", kind)
        yield s
    finally:
        assert s.stop() == 0


def common(server, topic: str, count: int = 1, client: str | None = None) -> list[str]:
    return ["--endpoint", server.endpoint, "--topic", f"{topic}-{client}" if client else topic,
            "--count", str(count)]


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_every_kind_of_send_and_simple_consumer_receive(client, server):
    run = RUNNERS[client]
    topic = "Normal"
    group = f"G-every-{client}"
    sent = run(["send", *common(server, topic, 3, client), "--tag", f"Tag{client}",
                "--keys", "k-{i},other", "--prop", "color=red-{i}", "--body", client])
    assert sent["errors"] == [] and len(sent["sent"]) == 3
    got = run(["receive", *common(server, topic, 3, client), "--group", group,
               "--tag-expr", f"Tag{client}"])
    assert got["errors"] == []
    by_id = {m["message_id"]: m for m in got["messages"]}
    assert sorted(by_id) == sorted(s["message_id"] for s in sent["sent"])
    for m in got["messages"]:
        i = m["body"].rsplit("-", 1)[1]
        assert m["tag"] == f"Tag{client}" and m["topic"] == f"{topic}-{client}"
        assert m["keys"] == sorted([f"k-{i}", "other"])
        assert m["properties"] == {"color": f"red-{i}"}
        assert m["delivery_attempt"] == 1 and not m["corrupted"]
    # FIFO, delayed and transactional messages each reach a consumer.
    fifo = run(["send", *common(server, "Fifo", 2, client), "--kind", "fifo",
                "--message-group", f"mg-{client}"])
    assert fifo["errors"] == []
    got = run(["receive", *common(server, "Fifo", 2, client),
               "--group", f"G-fifo1-{client}"])
    assert [m["message_group"] for m in got["messages"]] == [f"mg-{client}"] * 2
    before = time.time()
    delayed = run(["send", *common(server, "Delay", 1, client), "--kind", "delay",
                   "--delay-seconds", "4"])
    due = delayed["sent"][0]["delivery_timestamp_s"]
    got = run(["receive", *common(server, "Delay", 1, client),
               "--group", f"G-delay-{client}"])
    arrived = got["messages"][0]["received_at"]
    assert abs(arrived - due) <= 1.0, (arrived - due, due - before)
    for resolution in ("commit", "rollback"):
        r = run(["send", *common(server, "Tx", 1, client), "--kind", "transaction",
                 "--tx-resolution", resolution, "--body", f"{client}-{resolution}"])
        assert r["errors"] == [] and r["sent"][0]["transaction_id"]
    checked = run(["send", *common(server, "Tx", 1, client), "--kind", "transaction",
                   "--tx-resolution", "unknown", "--check-answer", "commit",
                   "--body", f"{client}-checked", "--check-wait", "20"])
    assert len(checked["checked"]) == 1  # the broker asked, the checker answered commit
    got = run(["receive", *common(server, "Tx", 2, client), "--group", f"G-tx-{client}",
               "--max-empty", "3", "--await-duration", "5"])
    bodies = sorted(m["body"].rsplit("-", 1)[0] for m in got["messages"])
    assert bodies == [f"{client}-checked", f"{client}-commit"]


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_redelivery_change_invisible_and_dead_letters(client, server):
    run = RUNNERS[client]
    topic, group = "Normal", f"G-redeliver-{client}"
    admin(server, "group", "create", group, "--retry-max-times", "1")  # 2 attempts
    sent = run(["send", *common(server, topic, 1, client), "--tag", f"R{client}"])
    message_id = sent["sent"][0]["message_id"]
    # Not acked: back after its invisible time (10 s, the least a receive may ask for).
    first = run(["receive", *common(server, topic, 1, client), "--group", group, "--no-ack",
                 "--invisible", "10", "--tag-expr", f"R{client}"])
    t0 = time.time()
    assert first["messages"][0]["delivery_attempt"] == 1
    # Second attempt: made visible again after 1 s instead of 10, and not acked either.
    second = run(["receive", *common(server, topic, 1, client), "--group", group, "--no-ack",
                  "--change-invisible", "1", "--tag-expr", f"R{client}"])
    m = second["messages"][0]
    assert m["message_id"] == message_id and m["delivery_attempt"] == 2
    assert time.time() - t0 >= 8  # it waited for the invisible time
    assert m["receipt_handle"] != m["receipt_handle_before_change"]
    # Attempts spent: the message is in the group's dead-letter topic, not redelivered.
    third = run(["receive", *common(server, topic, 1, client), "--group", group,
                 "--max-empty", "1", "--await-duration", "5", "--tag-expr", f"R{client}"])
    assert third["messages"] == []
    with PullConsumer(f"dlq-reader-{client}", namesrv=server.namesrv,
                      from_where="first") as dlq:
        dlq.subscribe(f"%DLQ%{group}")
        got = []
        wait_for(lambda: got.extend(dlq.poll(0.3)) or len(got) >= 1, 15)
    assert [g.properties["UNIQ_KEY"] for g in got] == [message_id]


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_fifo_order_within_message_groups_with_two_consumers(client, server):
    import concurrent.futures

    run = RUNNERS[client]
    group = f"G-fifo-{client}"
    admin(server, "group", "create", group, "--fifo")
    for mg in ("a", "b"):
        r = run(["send", *common(server, "Fifo", 6, client), "--kind", "fifo",
                 "--message-group", f"{client}-{mg}", "--body", f"{client}-{mg}"])
        assert r["errors"] == []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(run, ["receive", *common(server, "Fifo", 12, client),
                                  "--group", group, "--batch", "2", "--max-empty", "2",
                                  "--await-duration", "5"]) for _ in range(2)]
        results = [r.result() for r in runs]
    messages = [m for r in results for m in r["messages"]]
    mine = [m for m in messages if m["body"].startswith(client)]
    assert len(mine) == 12, [m["body"] for m in messages]
    for mg in ("a", "b"):
        ordered = sorted((m for m in mine if m["message_group"] == f"{client}-{mg}"),
                         key=lambda m: m["received_at"])
        assert [int(m["body"].rsplit("-", 1)[1]) for m in ordered] == list(range(6))
    assert all(m["delivery_attempt"] == 1 for m in mine)


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_push_consumer(client, server):
    run = RUNNERS[client]
    sent = run(["send", *common(server, "Normal", 5, client), "--tag", "push"])
    assert sent["errors"] == []
    got = run(["push", *common(server, "Normal", 5, client), "--group", f"G-push-{client}",
               "--tag-expr", "push", "--fail-times", "1", "--timeout", "60"])
    assert got["count"] == 5 and got["distinct"] == 5
    # Each failed once and came back with the next attempt.
    attempts = sorted((m["message_id"], m["delivery_attempt"], m["result"])
                      for m in got["messages"])
    for message_id in {s["message_id"] for s in sent["sent"]}:
        mine = [a for a in attempts if a[0] == message_id]
        assert [(a[1], a[2]) for a in mine][:2] == [(1, "FAILURE"), (2, "SUCCESS")]


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_credentials_against_an_acl_broker(client, tmp_path):
    acl = tmp_path / "plain_acl.yml"
    write_acl(acl)
    server = Standalone(tmp_path / "data", grpc=True, args=("--acl-file", str(acl)))
    try:
        from rocketq import Admin

        from ..acl.test_acl_servers import ADMIN
        with Admin(server.namesrv, credentials=ADMIN) as a:
            a.create_topic("Orders", 2)
        run = RUNNERS[client]
        ok = run(["send", *common(server, "Orders", 1), "--access-key", USER[0],
                  "--secret-key", USER[1]])
        assert ok["errors"] == [] and len(ok["sent"]) == 1
        with pytest.raises(DriverError) as refused:
            run(["send", *common(server, "Orders", 1), "--access-key", USER[0],
                 "--secret-key", "wrong", "--timeout", "20"])
        assert "signature" in str(refused.value).lower() or "denied" in str(refused.value)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_tls(client, tmp_path):
    pki = make_pki(tmp_path / "pki")
    conf = (f"tlsMode=enforcing\ntls.server.certPath={pki.server_cert}\n"
            f"tls.server.keyPath={pki.server_key}\ntls.client.trustCertPath={pki.ca}\n")
    server = Standalone(tmp_path / "data", conf, grpc=True)
    try:
        import ssl

        from rocketq import Admin
        with Admin(server.namesrv, tls=ssl.create_default_context(cafile=pki.ca)) as a:
            a.create_topic("Secure", 1)
        run = RUNNERS[client]
        tls = ["--tls", "--ca-file", pki.ca]
        sent = run(["send", *common(server, "Secure", 1), *tls])
        got = run(["receive", *common(server, "Secure", 1), "--group", "G-tls", *tls])
        assert [m["message_id"] for m in got["messages"]] == \
            [s["message_id"] for s in sent["sent"]]
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("client", sorted(RUNNERS))
def test_both_protocols_on_one_topic_with_the_cpp_client(client, tmp_path):
    cpp = client_python("rocketmq-0.4.4", "rocketmq==0.4.4")
    server = Standalone(tmp_path / "data", grpc=True)
    try:
        # C++ over remoting -> the 5.x client over gRPC: tags, keys, properties intact.
        admin(server, "topic", "create", "Mixed", "--queues", "2")
        proc = run_client(cpp, PRODUCE_SCRIPT, server.namesrv, "5")
        assert proc.returncode == 0, proc.stderr[-3000:]
        cpp_ids = [line.split()[1] for line in proc.stdout.splitlines()
                   if line.startswith("SENT")]
        got = RUNNERS[client](["receive", *common(server, "Mixed", 5), "--group", "G-mixed",
                               "--tag-expr", "from-cpp"])
        assert sorted(m["message_id"] for m in got["messages"]) == sorted(cpp_ids)
        for m in got["messages"]:
            n = m["properties"]["n"]
            assert m["body"] == f"cpp {n}" and m["tag"] == "from-cpp"
            assert m["keys"] == [f"cpp-key-{n}"]
        # The 5.x client over gRPC -> C++ over remoting.
        admin(server, "topic", "create", "FromPython", "--queues", "2")
        sent = RUNNERS[client](["send", *common(server, "FromPython", 3), "--tag", "py",
                                "--keys", "py-key-{i}", "--prop", "region=r{i}",
                                "--body", "five"])
        proc = run_client(cpp, CONSUME_SCRIPT, server.namesrv, "3")
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = [line.split("|")[1:] for line in proc.stdout.splitlines()
                if line.startswith("GOT|")]
        assert sorted(r[0] for r in rows) == sorted(s["message_id"] for s in sent["sent"])
        for _, body, tags, keys, region in rows:
            i = body.rsplit("-", 1)[1]
            assert tags == "py" and keys == f"py-key-{i}" and region == f"r{i}"
    finally:
        assert server.stop() == 0


def test_the_readme_examples_run(tmp_path):
    """The 5.x examples of the README (Python) and of docs/compatibility.md (Node.js), as
    written, in each client's own runtime."""
    import os
    import re
    import subprocess

    from .grpc_clients import NODE, client_env, node_client, official_python

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    python_block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
                        if "from rocketmq import" in b)
    compatibility = (pathlib.Path(__file__).resolve().parents[2] / "docs"
                     / "compatibility.md").read_text()
    js_block = next(b for b in re.findall(r"```js\n(.*?)```", compatibility, re.S)
                    if "rocketmq-client-nodejs" in b)
    server = Standalone(tmp_path / "data", grpc=True)
    try:
        admin(server, "topic", "create", "Orders5", "--message-type", "NORMAL")
        endpoint = repr(server.endpoint)
        env = client_env(tmp_path / "home")
        py = subprocess.run([official_python(), "-c",
                             python_block.replace('"127.0.0.1:8081"', endpoint)],
                            capture_output=True, text=True, timeout=60, env=env)
        assert py.returncode == 0, py.stderr[-3000:]
        lines = py.stdout.splitlines()
        assert lines[0].startswith("sent ") and lines[1] == "got b'paid' 1", lines
        script = tmp_path / "example.js"
        script.write_text(js_block.replace("'127.0.0.1:8081'", endpoint))
        js = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60,
                            env={**env, "NODE_PATH": str(node_client() / "node_modules")},
                            cwd=tmp_path)
        assert js.returncode == 0, js.stderr[-3000:]
        lines = js.stdout.splitlines()
        assert lines[0].startswith("sent ") and "got paid 1" in lines, lines
        assert os.path.exists(tmp_path / "example.js")
    finally:
        assert server.stop() == 0
