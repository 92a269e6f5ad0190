"""rocketq.testing from other processes: the README's example run by pytest as a user runs
it, a test process killed with SIGKILL, and the gRPC endpoint."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

import rocketq.testing

from .test_fixtures import gone, refused

pytestmark = pytest.mark.slow

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    """The README's test file (the ```python block that starts ``# test_orders.py``)."""
    blocks = re.findall(r"```python\n(# test_orders\.py.*?)```",
                        README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1
    return blocks[0]


def user_env() -> dict[str, str]:
    """This environment without what would make pytest in a child act unlike a user's."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST_", "PYTHONPATH"))}


def test_the_readme_example_passes_as_a_users_pytest_run(tmp_path):
    (tmp_path / "test_orders.py").write_text(readme_example())
    # No conftest and no -p: pytest finds the fixtures through the installed entry point.
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_orders.py"], cwd=tmp_path, env=user_env(),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"\b2 passed\b", done.stdout), done.stdout[-3000:]


#: A test process: holds a broker (and, with "fork", a forked child that would keep its pipe
#: open), says where it is, then waits to be killed.
HOLDER = """
import json, os, sys, time
import rocketq.testing

b = rocketq.testing.broker(grpc=sys.argv[1] == "fork")
fork = 0
if sys.argv[1] == "fork":
    fork = os.fork()
    if fork == 0:
        time.sleep(120)
        os._exit(0)
print(json.dumps({"pid": b.pid, "addrs": [b.namesrv, b.broker_address, b.grpc_endpoint],
                  "data_dir": b.data_dir, "fork": fork}), flush=True)
time.sleep(120)
"""


def wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("how", ["plain", "fork"])
def test_sigkill_of_the_test_process_leaves_no_broker_behind(how):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, how], stdout=subprocess.PIPE,
                              text=True)
    fork = 0
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line, "the holder did not start its broker"
        held = json.loads(line)
        fork = held["fork"]
        addrs = [a for a in held["addrs"] if a]
        assert len(addrs) == (3 if how == "fork" else 2)
        assert not gone(held["pid"]) and not any(refused(a) for a in addrs)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        # The child stops its servers (up to STOP_TIMEOUT, 10 s) before it goes: give it
        # twice that.
        assert wait_for(lambda: gone(held["pid"]), 20), "the broker outlived its test process"
        assert wait_for(lambda: all(refused(a) for a in addrs), 20)
        assert wait_for(lambda: not os.path.exists(held["data_dir"]), 20)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
        if fork:
            try:
                os.kill(fork, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_grpc_endpoint_answers_query_route():
    import grpc

    from rocketq.grpc.proto import definition_pb2 as pb
    from rocketq.grpc.proto import service_pb2 as spb
    from rocketq.grpc.proto import service_pb2_grpc

    with rocketq.testing.broker(grpc=True) as b:
        assert b.grpc_endpoint is not None
        host, port = b.grpc_endpoint.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        b.create_topic("Orders5", queues=2, message_type="NORMAL")
        metadata = [("x-mq-client-id", f"test-{uuid.uuid4().hex[:12]}"),
                    ("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"),
                    ("x-mq-client-version", "5.1.2"),
                    ("x-mq-date-time", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())),
                    ("x-mq-request-id", uuid.uuid4().hex)]
        with grpc.insecure_channel(b.grpc_endpoint) as channel:
            grpc.channel_ready_future(channel).result(timeout=10)
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            route = stub.QueryRoute(spb.QueryRouteRequest(
                topic=pb.Resource(name="Orders5"),
                endpoints=pb.Endpoints(addresses=[pb.Address(host=host, port=int(port))])),
                metadata=metadata, timeout=10)
        assert route.status.code == pb.Code.OK, route.status
        assert {q.id for q in route.message_queues} == {0, 1}
        assert {(a.host, a.port) for q in route.message_queues
                for a in q.broker.endpoints.addresses} == {(host, int(port))}
    assert refused(b.grpc_endpoint)
