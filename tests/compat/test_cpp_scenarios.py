"""More scenarios with the real C++ client (``rocketmq==0.4.4``) against ``rocketq
standalone``, and mixed with rocketq's own client on the other side of the conversation."""

from __future__ import annotations

import pytest

from rocketq import Message, Producer, PullConsumer
from rocketq.cli import main as rocketq_main

from ..conftest import wait_for
from .clients import Standalone, client_python, run_client

RETRY_SCRIPT = r"""
import sys, threading, time
from rocketmq.client import Message, Producer, PushConsumer
ns = sys.argv[1]
producer = Producer("PG_CPP")
producer.set_namesrv_addr(ns)
producer.start()
first = Message("CppRetry")
first.set_body(b"fail-once")
producer.send_sync(first)
oneway = Message("CppRetry")
oneway.set_body(b"oneway")
producer.send_oneway(oneway)
batch = []
for i in range(3):
    m = Message("CppRetry")
    m.set_body(b"batch%d" % i)
    batch.append(m)
print("BATCH", int(producer.send_batch(batch).status), flush=True)
producer.shutdown()
seen = []
lock = threading.Lock()
def on_message(msg):
    with lock:
        seen.append((msg.body.decode(), msg.reconsume_times))
        if msg.body == b"fail-once" and msg.reconsume_times == 0:
            raise RuntimeError("fail the first delivery")  # RECONSUME_LATER
consumer = PushConsumer("CG_CPP_RETRY")
consumer.set_namesrv_addr(ns)
consumer.subscribe("CppRetry", on_message, "*")
consumer.start()
deadline = time.time() + 45
while time.time() < deadline:
    with lock:
        if ("fail-once", 1) in seen and len({b for b, _ in seen}) >= 5:
            break
    time.sleep(0.1)
consumer.shutdown()
for body, times in sorted(seen):
    print("SEEN", body, times, flush=True)
"""

PRODUCE_SCRIPT = r"""
import sys
from rocketmq.client import Message, Producer
ns, count = sys.argv[1], int(sys.argv[2])
producer = Producer("PG_CPP_MIXED")
producer.set_namesrv_addr(ns)
producer.start()
for i in range(count):
    m = Message("Mixed")
    m.set_tags("from-cpp")
    m.set_keys("cpp-key-%d" % i)
    m.set_property("n", str(i))
    m.set_body(("cpp %d" % i).encode())
    print("SENT", producer.send_sync(m).msg_id, flush=True)
producer.shutdown()
"""

CONSUME_SCRIPT = r"""
import sys, threading, time
from rocketmq.client import PushConsumer
ns, count = sys.argv[1], int(sys.argv[2])
got = []
lock = threading.Lock()
def on_message(msg):
    with lock:
        got.append("|".join([msg.id, msg.body.decode(), msg.tags.decode(), msg.keys.decode(),
                             (msg.get_property("region") or b"").decode()]))
consumer = PushConsumer("CG_CPP_MIXED")
consumer.set_namesrv_addr(ns)
consumer.subscribe("FromPython", on_message, "py")
consumer.start()
deadline = time.time() + 45
while time.time() < deadline and len(got) < count:
    time.sleep(0.1)
consumer.shutdown()
for line in got:
    print("GOT|" + line, flush=True)
"""

SMALL_DELAYS = "messageDelayLevel=" + " ".join(["1s"] * 18) + "\n"


@pytest.fixture
def cpp_python():
    return client_python("rocketmq-0.4.4", "rocketmq==0.4.4")


@pytest.mark.slow
def test_cpp_oneway_batch_and_a_failed_message_coming_back(tmp_path, cpp_python):
    server = Standalone(tmp_path / "data", extra_conf=SMALL_DELAYS)
    try:
        proc = run_client(cpp_python, RETRY_SCRIPT, server.namesrv)
    finally:
        assert server.stop() == 0
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "BATCH 0" in proc.stdout
    seen = {tuple(line.split()[1:]) for line in proc.stdout.splitlines()
            if line.startswith("SEEN")}
    # Every message arrived; the failed one came back through the retry topic with its
    # reconsume count raised.
    assert {("oneway", "0"), ("batch0", "0"), ("batch1", "0"), ("batch2", "0"),
            ("fail-once", "0"), ("fail-once", "1")} <= seen


@pytest.mark.slow
def test_cpp_producer_to_rocketq_consumer_and_back(tmp_path, cpp_python):
    server = Standalone(tmp_path / "data")
    try:
        proc = run_client(cpp_python, PRODUCE_SCRIPT, server.namesrv, "10")
        assert proc.returncode == 0, proc.stderr[-3000:]
        sent = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("SENT")]
        assert len(sent) == 10
        with PullConsumer("py-reader", namesrv=server.namesrv, from_where="first") as consumer:
            consumer.subscribe("Mixed", "from-cpp")
            consumer.start()
            got = []
            wait_for(lambda: got.extend(consumer.poll(0.3)) or len(got) >= 10, 20)
        assert sorted(m.msg_id for m in got) == sorted(sent)  # the C++ client's own ids
        for m in got:
            n = m.properties["n"]
            assert m.body == f"cpp {n}".encode() and m.keys == [f"cpp-key-{n}"]
            assert m.tags == "from-cpp"

        with Producer("py-writer", namesrv=server.namesrv) as producer:
            ids = {producer.send(Message("FromPython", f"py {i}".encode(), tags="py",
                                         keys=[f"py-key-{i}"],
                                         properties={"region": "eu"})).msg_id
                   for i in range(5)}
            producer.send(Message("FromPython", b"filtered out", tags="other"))
        proc = run_client(cpp_python, CONSUME_SCRIPT, server.namesrv, "5")
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = [line.split("|")[1:] for line in proc.stdout.splitlines()
                if line.startswith("GOT|")]
        assert {r[0] for r in rows} == ids
        for _msg_id, body, tags, keys, region in rows:
            i = body.split()[1]
            assert (body, tags, keys, region) == (f"py {i}", "py", f"py-key-{i}", "eu")
    finally:
        assert server.stop() == 0


TRANSACTION_SCRIPT = r"""
import sys, time
from rocketmq.client import Message, TransactionMQProducer, TransactionStatus
ns = sys.argv[1]
checked = []
def check(msg):  # reading the message is safe here (not in local_execute)
    checked.append(msg.keys.decode())
    return TransactionStatus.COMMIT
producer = TransactionMQProducer("PG_TX_CPP", check)
producer.set_namesrv_addr(ns)
producer.start()
for key, state in (("c", TransactionStatus.COMMIT), ("r", TransactionStatus.ROLLBACK),
                   ("u", TransactionStatus.UNKNOWN)):
    m = Message("CppTx")
    m.set_keys(key)
    m.set_body(("tx-" + key).encode())
    r = producer.send_message_in_transaction(m, lambda msg, args, state=state: state)
    print("SENT", key, int(r.status), flush=True)
deadline = time.time() + 45  # the client's scheduled heartbeat comes 30 s after its start
while "u" not in checked and time.time() < deadline:
    time.sleep(0.1)
time.sleep(0.5)  # let the check's END_TRANSACTION reach the broker
producer.shutdown()
print("CHECKED", ",".join(checked), flush=True)
"""

# Checked every 300 ms; RocketMQ's 15 checks would then give up on a half after 4.5 s, less
# than the C++ producer may take before a heartbeat names its channel: it heartbeats at its
# start, to the brokers its routes name by then (none, when that races with its first route
# fetch), and then every 30 s (seen in a CI run: no heartbeat in the first 21 s).
FAST_CHECKS = "transactionTimeOut=500\ntransactionCheckInterval=300\ntransactionCheckMax=200\n"


@pytest.mark.slow
def test_cpp_transaction_producer_commit_rollback_and_check_back(tmp_path):
    python = client_python("rocketmq-client-python-0.5.0rc2", "rocketmq-client-python==0.5.0rc2")
    server = Standalone(tmp_path / "data", extra_conf=FAST_CHECKS)
    try:
        # The topic exists before the client starts, so its first route fetch names the
        # broker and its start-up heartbeat reaches it.
        assert rocketq_main(["admin", "--namesrv", server.namesrv, "topic", "create",
                             "CppTx", "--queues", "4"]) == 0
        proc = run_client(python, TRANSACTION_SCRIPT, server.namesrv)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        sent = [line.split() for line in proc.stdout.splitlines() if line.startswith("SENT")]
        assert [s[1:] for s in sent] == [["c", "0"], ["r", "0"], ["u", "0"]]
        checked = next(line for line in proc.stdout.splitlines() if line.startswith("CHECKED"))
        assert "u" in checked.split()[1].split(",")
        with PullConsumer("tx-reader", namesrv=server.namesrv, from_where="first") as consumer:
            consumer.subscribe("CppTx")
            consumer.start()
            got = []
            wait_for(lambda: got.extend(consumer.poll(0.3)) or len(got) >= 2, 20)
            got.extend(consumer.poll(0.5))
        assert sorted(m.body for m in got) == [b"tx-c", b"tx-u"]  # rolled back never shows
    finally:
        assert server.stop() == 0


GROUP_CONSUMER_SCRIPT = r"""
import sys, threading, time
from rocketmq.client import PushConsumer
from rocketmq.ffi import MessageModel
ns, group, model, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
got = []
lock = threading.Lock()
def on_message(msg):
    with lock:
        got.append(msg.body.decode())
consumer = PushConsumer(group, message_model=getattr(MessageModel, model))
consumer.set_namesrv_addr(ns)
consumer.subscribe("Shared", on_message, "*")
consumer.start()
print("STARTED", flush=True)
time.sleep(seconds)
consumer.shutdown()
with lock:
    for body in got:
        print("GOT", body, flush=True)
"""


def _group_run(python, server, home, group, model, count):
    import os
    import subprocess
    import time

    # A HOME of each member's own, as on two machines: the C++ client keeps broadcasting
    # offsets and logs there, and two members creating the same directories at once race.
    procs = []
    for member in range(2):
        (home / f"{group}-{member}").mkdir()
        env = {**os.environ, "HOME": str(home / f"{group}-{member}")}
        procs.append(subprocess.Popen([python, "-c", GROUP_CONSUMER_SCRIPT, server.namesrv,
                                       group, model, "14"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env))
    try:
        for p in procs:
            line = p.stdout.readline()
            if not line.startswith("STARTED"):
                p.kill()
                pytest.fail(f"C++ consumer did not start: {p.communicate()[1][-3000:]}")
        time.sleep(4)  # both members rebalance
        with Producer("py-feeder", namesrv=server.namesrv) as producer:
            for i in range(count):
                producer.send(Message("Shared", b"m%d" % i))
        outs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [[line.split()[1] for line in out.splitlines() if line.startswith("GOT")]
            for out in outs]


@pytest.mark.slow
def test_cpp_push_consumers_clustering_and_broadcasting(tmp_path, cpp_python):
    server = Standalone(tmp_path / "data")
    try:
        from rocketq.cli import main

        assert main(["admin", "--namesrv", server.namesrv, "topic", "create", "Shared",
                     "--queues", "8"]) == 0
        expected = {f"m{i}" for i in range(60)}
        home = tmp_path / "home"
        home.mkdir()
        a, b = _group_run(cpp_python, server, home, "CG_SHARED", "CLUSTERING", 60)
        assert set(a) | set(b) == expected  # every message consumed
        assert a and b  # by both members
        assert len(a) + len(b) - len(expected) <= 10  # duplicates only around a rebalance
        a, b = _group_run(cpp_python, server, home, "CG_BROADCAST", "BROADCASTING", 60)
        assert set(a) >= expected and set(b) >= expected  # each member gets everything
    finally:
        assert server.stop() == 0


ORDERLY_SCRIPT = r"""
import sys, threading, time
from rocketmq.client import Message, Producer, PushConsumer
ns, keys, per_key = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
producer = Producer("PG_CPP_ORDER")
producer.set_namesrv_addr(ns)
producer.start()
for seq in range(per_key):
    for k in range(keys):
        m = Message("CppOrdered")
        m.set_keys("k%d" % k)
        m.set_body(("k%d:%d" % (k, seq)).encode())
        producer.send_orderly(m, k)  # the client's hash selector: one key, one queue
producer.shutdown()
got = []
lock = threading.Lock()
def on_message(msg):
    with lock:
        got.append(msg.body.decode())
consumer = PushConsumer("CG_CPP_ORDER", orderly=True)
consumer.set_namesrv_addr(ns)
consumer.subscribe("CppOrdered", on_message, "*")
consumer.start()
deadline = time.time() + 40
while time.time() < deadline and len(set(got)) < keys * per_key:
    time.sleep(0.1)
consumer.shutdown()
for body in got:
    print("GOT", body, flush=True)
"""


@pytest.mark.slow
def test_cpp_ordered_sends_and_orderly_consumers(tmp_path, cpp_python):
    server = Standalone(tmp_path / "data")
    try:
        from rocketq.cli import main

        assert main(["admin", "--namesrv", server.namesrv, "topic", "create", "CppOrdered",
                     "--queues", "4"]) == 0
        keys, per_key = 5, 12
        proc = run_client(cpp_python, ORDERLY_SCRIPT, server.namesrv, str(keys), str(per_key))
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("GOT")]

        def first_seen_order(bodies):
            order: dict[str, list[int]] = {}
            for body in bodies:
                key, seq = body.split(":")
                if int(seq) not in order.setdefault(key, []):
                    order[key].append(int(seq))
            return order

        # The C++ orderly consumer saw every key's messages in send order.
        assert first_seen_order(got) == {f"k{k}": list(range(per_key)) for k in range(keys)}
        # rocketq's orderly consumer reads the same queues in the same order.
        import threading

        from rocketq import ConsumeResult, PushConsumer

        seen, lock = [], threading.Lock()

        def listener(msgs):
            with lock:
                seen.extend(m.body.decode() for m in msgs)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("py-orderly", namesrv=server.namesrv, orderly=True,
                                from_where="first")
        consumer.subscribe("CppOrdered")
        consumer.register(listener)
        consumer.start()
        try:
            assert wait_for(lambda: len(set(seen)) >= keys * per_key, 20)
        finally:
            consumer.shutdown()
        assert first_seen_order(seen) == {f"k{k}": list(range(per_key)) for k in range(keys)}
    finally:
        assert server.stop() == 0
