"""rocketq processes and test clients started in the namespaces of a :class:`Network`."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

from .net import Network, Node

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "client.py")
NAMESRV_PORT = 9876
BROKER_PORT = 10911
HA_PORT = 10912


def start(net: Network, node: Node, args: list[str], directory: str, name: str,
          ready: str = "listening", timeout: float = 30) -> subprocess.Popen[str]:
    """Start ``rocketq <args>`` (or, with ``args[0] == CLIENT``, a test client) in ``node``
    and wait until it prints ``ready``; its stderr goes to ``<directory>/<name>.log``."""
    argv = [sys.executable, *args] if args[0] == CLIENT else \
        [sys.executable, "-m", "rocketq.cli", "--log-level", "WARNING", *args]
    env = {**os.environ, "ROCKETQ_GRPC_PORT": "0", "PYTHONUNBUFFERED": "1"}
    with open(os.path.join(directory, f"{name}.log"), "w") as log:
        proc = net.run(node, argv, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            line = proc.stdout.readline()
            if ready in line:
                return proc
            if not line:
                break
    raise RuntimeError(f"{name} did not start in {timeout} s; see {name}.log")


def namesrv(net: Network, node: Node, directory: str) -> str:
    start(net, node, ["namesrv", "--host", node.addr, "--port", str(NAMESRV_PORT)], directory,
          node.name)
    return f"{node.addr}:{NAMESRV_PORT}"


def broker(net: Network, node: Node, directory: str, namesrv: str, broker_id: int,
           role: str, master: Node | None = None, name: str = "broker-a",
           **extra: object) -> str:
    """A broker of a plain master/slave group listening on its node's address; its
    address."""
    values: dict[str, object] = {
        "brokerName": name, "brokerId": broker_id, "brokerRole": role,
        "brokerIP1": node.addr, "listenPort": BROKER_PORT, "namesrvAddr": namesrv,
        "storePathRootDir": os.path.join(directory, node.name),
        "flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 16 << 20,
        "maxHashSlotNum": 10000, "maxIndexNum": 40000,
        "haListenPort": HA_PORT if master is None else 0}
    if master is not None:
        values["haMasterAddress"] = f"{master.addr}:{HA_PORT}"
    values.update(extra)
    conf = os.path.join(directory, f"{node.name}.conf")
    with open(conf, "w") as fh:
        fh.writelines(f"{k}={v}\n" for k, v in values.items())
    start(net, node, ["broker", "-c", conf], directory, node.name)
    return f"{node.addr}:{BROKER_PORT}"


def client(net: Network, node: Node, directory: str, mode: str, namesrv: str, topic: str,
           *options: str) -> tuple[subprocess.Popen[str], str]:
    """A test client (``produce`` or ``consume``) in ``node``; the process and its history
    file."""
    history = os.path.join(directory, f"{node.name}.jsonl")
    proc = start(net, node, [CLIENT, mode, namesrv, topic, history, "--process", node.name,
                             *options], directory, node.name, ready="started")
    return proc, history


def stop(proc: subprocess.Popen, timeout: float = 15) -> int | None:
    """SIGTERM, then SIGKILL what has not exited in ``timeout`` s; the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def max_offset(addr: str) -> int | None:
    """A broker's CommitLog max offset (GET_BROKER_RUNTIME_INFO), None if it does not
    answer."""
    from rocketq.protocol import RemotingCommand, RequestCode
    from rocketq.remoting import RemotingClient, run

    async def ask() -> int | None:
        client = RemotingClient()
        try:
            r = await client.invoke(addr, RemotingCommand.request(
                RequestCode.GET_BROKER_RUNTIME_INFO), 3)
            return int(json.loads(r.body)["table"]["commitLogMaxOffset"])
        except Exception:
            return None
        finally:
            await client.close()

    return run(ask())


def count_lines(path: str, needle: str = "") -> int:
    try:
        with open(path) as fh:
            return sum(needle in line for line in fh)
    except FileNotFoundError:
        return 0


def wait_until(check, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return bool(check())
