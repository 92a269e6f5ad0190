"""``rocketq cluster``: a NameServer, a controller and broker groups in controller mode, each
its own child process on loopback, for trying automatic failover with one command.

Each broker's ``broker.conf``, store and log are under ``--data-dir``. Ctrl-C (or SIGTERM)
stops every child; killing one broker with ``kill -9`` shows a failover.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import string
import sys

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]


def free_port(pair: bool = False) -> int:
    """A free loopback port (with ``pair``, one whose next port is free too)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if not pair:
                return port
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise OSError("no free port pair on 127.0.0.1")


async def _spawn(args: list[str], log_path: str, timeout: float = 30
                 ) -> asyncio.subprocess.Process:
    """Start ``rocketq <args>`` and wait for its "listening" line; its log goes to a file."""
    with open(log_path, "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *ROCKETQ, *args, stdout=asyncio.subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(timeout):
            while True:
                line = await proc.stdout.readline()
                if not line:
                    raise OSError(f"rocketq {args[0]} exited; see {log_path}")
                if b"listening" in line:
                    return proc
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise


def group_names(count: int) -> list[str]:
    """broker-a, broker-b, ... (then broker-aa, broker-ab, ...)."""
    letters = string.ascii_lowercase
    names = []
    for i in range(count):
        suffix = letters[i] if i < 26 else letters[i // 26 - 1] + letters[i % 26]
        names.append(f"broker-{suffix}")
    return names


async def run_cluster(args: argparse.Namespace, stop: asyncio.Event) -> None:
    data = os.path.abspath(args.data_dir)
    os.makedirs(data, exist_ok=True)
    children: list[asyncio.subprocess.Process] = []
    try:
        namesrv = f"127.0.0.1:{args.namesrv_port}"
        children.append(await _spawn(["namesrv", "--port", str(args.namesrv_port)],
                                     os.path.join(data, "namesrv.log")))
        controller_port = args.controller_port or free_port(pair=True)
        controller = f"127.0.0.1:{controller_port}"
        children.append(await _spawn(
            ["controller", "--port", str(controller_port),
             "--data-dir", os.path.join(data, "controller")],
            os.path.join(data, "controller.log")))
        print(f"NameServer {namesrv}\nController {controller}", flush=True)
        for name in group_names(args.groups):
            for replica in range(args.replicas):
                root = os.path.join(data, f"{name}-{replica}")
                os.makedirs(root, exist_ok=True)
                conf = os.path.join(root, "broker.conf")
                port = free_port()
                with open(conf, "w") as fh:
                    fh.write(f"brokerClusterName=DefaultCluster\nbrokerName={name}\n"
                             f"namesrvAddr={namesrv}\nlistenPort={port}\nhaListenPort=0\n"
                             f"storePathRootDir={root}\nenableControllerMode=true\n"
                             f"controllerAddr={controller}\nallAckInSyncStateSet=true\n")
                    if args.config:
                        with open(args.config) as extra:
                            fh.write(extra.read())
                proc = await _spawn(["broker", "-c", conf], os.path.join(root, "broker.log"))
                children.append(proc)
                print(f"{name} replica {replica}: 127.0.0.1:{port} (pid {proc.pid}, data "
                      f"{root})", flush=True)
        print(f"connect clients with namesrv=\"{namesrv}\"; Ctrl-C stops all", flush=True)
        done = asyncio.ensure_future(stop.wait())
        exits = [asyncio.ensure_future(p.wait()) for p in children[:2]]
        await asyncio.wait([done, *exits], return_when=asyncio.FIRST_COMPLETED)
        for task in (done, *exits):
            task.cancel()
        print("stopping...", flush=True)
    finally:
        for proc in reversed(children):  # brokers first, the NameServer last
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                try:
                    async with asyncio.timeout(20):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


def add_cluster_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="run a NameServer, a controller and broker groups in "
                                       "controller mode, as child processes (automatic "
                                       "failover)")
    p.add_argument("--replicas", type=int, default=3, help="brokers per group (default 3)")
    p.add_argument("--groups", type=int, default=1, help="broker groups (default 1)")
    p.add_argument("--data-dir", default="./rocketq-cluster",
                   help="stores, configs and logs (default ./rocketq-cluster)")
    p.add_argument("--namesrv-port", type=int, default=9876)
    p.add_argument("--controller-port", type=int, default=0,
                   help="default: any free port (Raft uses the next one)")
    p.add_argument("-c", "--config", help="broker.conf lines added to every broker's")
    p.set_defaults(func=_run)


async def _run(args: argparse.Namespace) -> None:
    from . import _stop_on_signal

    if args.replicas < 1 or args.groups < 1:
        raise ValueError("--replicas and --groups must be at least 1")
    await run_cluster(args, _stop_on_signal())
