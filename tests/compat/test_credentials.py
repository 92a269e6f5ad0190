"""Existing RocketMQ clients with ACL credentials against ``rocketq standalone`` with
``aclEnable=true``: the C++ client (``set_session_credentials``) and ``ali-ons``
(``accessKeyId``/``accessKeySecret``) sign as RocketMQ's brokers expect, and a wrong secret is
refused."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest

from rocketq.cli import main

from .clients import Standalone, ali_ons, client_python, run_client

ACL = """\
accounts:
  - accessKey: rocketq-admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: compat-user
    secretKey: compat-secret-1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [CppAcl=PUB|SUB, OnsAcl=PUB|SUB, TBW102=PUB]
    groupPerms: [CG_CPP_ACL=SUB, CG_ONS_ACL=SUB]
"""
ADMIN = ["--access-key", "rocketq-admin", "--secret-key", "admin-secret-1"]

CPP = r"""
import sys, threading, time
from rocketmq.client import Message, Producer, PushConsumer
ns, ak, sk, mode = sys.argv[1:5]
producer = Producer("PG_CPP_ACL")
producer.set_namesrv_addr(ns)
producer.set_session_credentials(ak, sk, "ALIYUN")
producer.start()
if mode == "bad":
    try:
        m = Message("CppAcl")
        m.set_body(b"nope")
        print("SENT", int(producer.send_sync(m).status), flush=True)
    except Exception as exc:
        print("REFUSED", type(exc).__name__, exc, flush=True)
    producer.shutdown()
    sys.exit(0)
for i in range(3):
    m = Message("CppAcl")
    m.set_keys("k%d" % i)
    m.set_tags("TagA")
    m.set_body(("acl %d" % i).encode())
    print("SENT", int(producer.send_sync(m).status), flush=True)
producer.shutdown()
got = []
lock = threading.Lock()
def on_message(msg):
    with lock:
        got.append(msg.body.decode())
push = PushConsumer("CG_CPP_ACL")
push.set_namesrv_addr(ns)
push.set_session_credentials(ak, sk, "ALIYUN")
push.subscribe("CppAcl", on_message, "*")
push.start()
deadline = time.time() + 30
while len(got) < 3 and time.time() < deadline:
    time.sleep(0.1)
push.shutdown()
print("PUSHED", sorted(got), flush=True)
"""


def acl_server(tmp_path: pathlib.Path, *topics: str) -> Standalone:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    server = Standalone(tmp_path / "data", f"aclEnable=true\naclFile={acl}\n")
    for topic in topics:
        assert main(["admin", "--namesrv", server.namesrv, *ADMIN, "topic", "create", topic,
                     "--queues", "2"]) == 0
    return server


@pytest.mark.slow
def test_cpp_client_with_credentials(tmp_path):
    python = client_python("rocketmq-0.4.4", "rocketmq==0.4.4")
    server = acl_server(tmp_path, "CppAcl")
    try:
        good = run_client(python, CPP, server.namesrv, "compat-user", "compat-secret-1", "good")
        bad = run_client(python, CPP, server.namesrv, "compat-user", "wrong-secret-1", "bad",
                         timeout=90)
    finally:
        assert server.stop() == 0
    assert good.returncode == 0, good.stdout + good.stderr
    lines = good.stdout.splitlines()
    assert [line for line in lines if line.startswith("SENT")] == ["SENT 0"] * 3
    assert "PUSHED ['acl 0', 'acl 1', 'acl 2']" in lines
    assert bad.returncode == 0, bad.stdout + bad.stderr
    assert "REFUSED" in bad.stdout, bad.stdout
    # The client only says it found no route: the server's log says why.
    assert "Check signature failed for accessKey=compat-user" in server.proc.stderr.read()


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("node") or not shutil.which("npm"),
                    reason="Node.js and npm are needed")
def test_ali_ons_with_credentials(tmp_path):
    workdir = tmp_path / "ons"
    ali_ons(workdir, "ons_credentials.js")
    server = acl_server(tmp_path, "OnsAcl")
    env = {**os.environ, "HOME": str(tmp_path)}

    def node(secret: str, mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["node", "ons_credentials.js", server.namesrv, "compat-user",
                               secret, mode], cwd=workdir, capture_output=True, text=True,
                              timeout=120, env=env)
    try:
        good = node("compat-secret-1", "good")
        bad = node("wrong-secret-1", "bad")
    finally:
        assert server.stop() == 0
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    sent = [line.split() for line in good.stdout.splitlines() if line.startswith("SENT")]
    assert len(sent) == 3 and all(s[1] == "SEND_OK" for s in sent)
    got = next(line for line in good.stdout.splitlines() if line.startswith("GOT"))
    assert json.loads(got[4:]) == [f"acl {i}" for i in range(3)]
    assert "REFUSED access denied: Check signature failed" in bad.stdout, bad.stdout[-2000:]
