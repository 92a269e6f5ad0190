"""Existing RocketMQ clients, installed in virtual environments of their own (never into
rocketq's), and a standalone rocketq in a child process for them to talk to."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv

import pytest

from ..cli.test_cli import free_port, small_conf, start, stop

REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "compat"


def client_python(name: str, requirement: str) -> str:
    """The interpreter of a venv holding ``requirement``, created on first use."""
    home = CACHE / name
    python = home / "bin" / "python"
    marker = home / ".installed"
    if not marker.exists() or marker.read_text() != requirement:
        venv.EnvBuilder(with_pip=True, clear=True).create(home)
        proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", requirement],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.fail(f"cannot install {requirement}: {proc.stderr[-2000:]}")
        marker.write_text(requirement)
    return str(python)


class Standalone:
    """``rocketq standalone`` in a child process on free ports."""

    def __init__(self, data_dir: pathlib.Path, extra_conf: str = "", *, grpc: bool = False,
                 args: tuple[str, ...] = ()) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        conf = small_conf(data_dir.parent, extra_conf)

        def argv() -> list[str]:
            self.ns_port, self.broker_port = free_port(), free_port()
            #: The gRPC port for the 5.x clients, when ``grpc``.
            self.grpc_port = free_port() if grpc else 0
            return ["standalone", "--data-dir", str(data_dir), "--namesrv-port",
                    str(self.ns_port), "--broker-port", str(self.broker_port),
                    "--grpc-port", str(self.grpc_port), "-c", conf, *args]

        self.proc = start(argv, "connect clients")

    @property
    def endpoint(self) -> str:
        """The gRPC endpoint of the 5.x clients."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    def stop(self) -> int:
        return stop(self.proc)


def ali_ons(workdir: pathlib.Path, script: str) -> None:
    """Install ``ali-ons`` 3.12.0 into ``workdir`` and copy ``js/<script>`` there."""
    import shutil

    workdir.mkdir()
    install = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                              "ali-ons@3.12.0"], cwd=workdir, capture_output=True, text=True,
                             timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    shutil.copy(pathlib.Path(__file__).with_name("js") / script, workdir / script)


def run_client(python: str, script: str, *args: str, timeout: float = 120
               ) -> subprocess.CompletedProcess[str]:
    """Run a client script in its venv; its logs go to a temporary HOME."""
    env = dict(os.environ)
    env["HOME"] = str(CACHE / "home")
    os.makedirs(env["HOME"], exist_ok=True)
    return subprocess.run([python, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


__all__ = ["Standalone", "ali_ons", "client_python", "run_client", "sys"]
