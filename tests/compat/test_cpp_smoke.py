"""Smoke test: the real C++ RocketMQ client (PyPI ``rocketmq==0.4.4``, protocol version 63)
sends to ``rocketq standalone`` and consumes back what it sent."""

from __future__ import annotations

import pytest

from .clients import Standalone, client_python, run_client

SCRIPT = r"""
import sys, threading, time
from rocketmq.client import Message, Producer, PullConsumer, PushConsumer
ns = sys.argv[1]
producer = Producer("PG_CPP")
producer.set_namesrv_addr(ns)
producer.start()
for i in range(5):
    m = Message("CppSmoke")
    m.set_keys("key%d" % i)
    m.set_tags("TagA")
    m.set_property("userprop", "v%d" % i)
    m.set_body(("hello %d" % i).encode())
    r = producer.send_sync(m)
    print("SENT", int(r.status), r.msg_id, flush=True)
big = Message("CppSmoke")
big.set_tags("TagA")
big.set_body(b"z" * 5000)  # compressed by the client
print("SENT", int(producer.send_sync(big).status), "big", flush=True)
producer.shutdown()

pull = PullConsumer("CG_CPP_PULL")
pull.set_namesrv_addr(ns)
pull.start()
pulled = 0
deadline = time.time() + 20
while pulled < 6 and time.time() < deadline:  # pulls do not wait: go round until all came
    for msg in pull.pull("CppSmoke", "*", 32):
        pulled += 1
        print("|".join(["PULLED", msg.id, msg.tags.decode(), msg.keys.decode(),
                        (msg.get_property("userprop") or b"").decode(), str(len(msg.body)),
                        msg.body[:5].decode()]), flush=True)
    time.sleep(0.1)
pull.shutdown()

got = []
lock = threading.Lock()
def on_message(msg):
    with lock:
        got.append(msg.body)
push = PushConsumer("CG_CPP_PUSH")
push.set_namesrv_addr(ns)
push.subscribe("CppSmoke", on_message, "TagA")
push.start()
deadline = time.time() + 30
while len(got) < 6 and time.time() < deadline:
    time.sleep(0.1)
push.shutdown()
print("PUSHED", len(got), sorted(len(b) for b in got), flush=True)
"""


@pytest.mark.slow
def test_cpp_client_sends_and_consumes_back(tmp_path):
    python = client_python("rocketmq-0.4.4", "rocketmq==0.4.4")
    server = Standalone(tmp_path / "data")
    try:
        proc = run_client(python, SCRIPT, server.namesrv)
    finally:
        assert server.stop() == 0
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = [line.split() for line in lines if line.startswith("SENT")]
    assert len(sent) == 6 and all(s[1] == "0" for s in sent)  # SendStatus.OK
    ids = {s[2] for s in sent[:5]}
    pulled = [line.split("|") for line in lines if line.startswith("PULLED")]
    assert len(pulled) == 6
    by_id = {p[1]: p for p in pulled}
    assert ids <= set(by_id)  # the client's own ids (UNIQ_KEY) came back
    for i, msg_id in enumerate(s[2] for s in sent[:5]):
        p = by_id[msg_id]
        assert p[2:] == ["TagA", f"key{i}", f"v{i}", str(len(f"hello {i}")), "hello"]
    assert any(p[5] == "5000" for p in pulled)  # decompressed by the client
    pushed = next(line for line in lines if line.startswith("PUSHED"))
    assert pushed.startswith("PUSHED 6 ")
