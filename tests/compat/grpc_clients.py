"""The two official RocketMQ 5.x (gRPC) clients, each installed in a place of its own (never in
rocketq's venv), the driver scripts that run them, and the null gRPC service to try them on.

- ``official_python()``: the python of a venv holding PyPI ``rocketmq-python-client`` 5.1.2
  (import name ``rocketmq``, which the C++-based ``rocketmq`` 0.4.4 also uses).
- ``node_client()``: a directory where npm installed ``rocketmq-client-nodejs`` 1.0.8.
- ``run_official([...])`` / ``run_node([...])``: run grpc/official_client.py or
  js/grpc_client.js with those arguments (``send``/``receive``/``push`` ...; see the scripts)
  and return the one JSON object they print. The clients' logs go to a temporary HOME
  (~/logs/rocketmq_python/rocketmq_client.log, ~/logs/rocketmq/rocketmq_client_nodejs.log),
  removed after every run (the error of a failed one quotes the log).
- ``null_server()``: benchmarks/grpc_null.py in a child process; yields its "127.0.0.1:PORT".

    with null_server() as endpoint:
        sent = run_official(["send", "--endpoint", endpoint, "--topic", "T", "--count", "3"])
        got = run_node(["receive", "--endpoint", endpoint, "--topic", "T", "--group", "G",
                        "--count", "3"])
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from .clients import CACHE, REPO, client_python

PYTHON_CLIENT = "rocketmq-python-client==5.1.2"
PYTHON_CLIENT_VENV = "rocketmq-python-client-5.1.2"
NODE_CLIENT = "rocketmq-client-nodejs@1.0.8"
NODE_DIR = CACHE / "nodejs-5x"
NODE = "/usr/bin/node" if os.path.exists("/usr/bin/node") else (shutil.which("node") or "node")
PY_DRIVER = pathlib.Path(__file__).with_name("grpc") / "official_client.py"
JS_DRIVER = pathlib.Path(__file__).with_name("js") / "grpc_client.js"
NULL_SERVER = REPO / "benchmarks" / "grpc_null.py"
PYTHON_LOG = "logs/rocketmq_python/rocketmq_client.log"
NODE_LOG = "logs/rocketmq/rocketmq_client_nodejs.log"


class DriverError(AssertionError):
    """A driver run failed: its result (if it printed one) is in ``result``."""

    def __init__(self, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result


def official_python() -> str:
    """The python of the venv with the official 5.x Python client (made on first use)."""
    return client_python(PYTHON_CLIENT_VENV, PYTHON_CLIENT)


def node_client() -> pathlib.Path:
    """A directory with ``node_modules/rocketmq-client-nodejs`` 1.0.8 (npm install on first
    use; a marker file records what was installed)."""
    marker = NODE_DIR / ".installed"
    if marker.exists() and marker.read_text() == NODE_CLIENT and \
            (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
        return NODE_DIR
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    shutil.rmtree(NODE_DIR, ignore_errors=True)
    NODE_DIR.mkdir(parents=True)
    (NODE_DIR / "package.json").write_text('{"name": "rocketq-compat-nodejs-5x", '
                                           '"private": true}\n')
    proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                           NODE_CLIENT], cwd=NODE_DIR, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"cannot install {NODE_CLIENT}: {proc.stderr[-2000:]}")
    marker.write_text(NODE_CLIENT)
    return NODE_DIR


def client_env(home: str | os.PathLike[str], extra: dict[str, str] | None = None
               ) -> dict[str, str]:
    env = dict(os.environ)
    env["HOME"] = str(home)
    env.pop("PYTHONPATH", None)  # nothing of rocketq's venv in the client's
    env.update(extra or {})
    return env


def official_command(script_args: Sequence[str], home: str | os.PathLike[str]
                     ) -> tuple[list[str], dict[str, str]]:
    """argv and environment to run the Python driver (for callers that need a Popen)."""
    return [official_python(), str(PY_DRIVER), *script_args], client_env(home)


def node_command(script_args: Sequence[str], home: str | os.PathLike[str]
                 ) -> tuple[list[str], dict[str, str]]:
    """argv and environment to run the Node driver, with NODE_PATH at the installed client."""
    modules = node_client() / "node_modules"
    return [NODE, str(JS_DRIVER), *script_args], client_env(home, {"NODE_PATH": str(modules)})


def parse_result(stdout: str) -> dict[str, Any] | None:
    """The last line of ``stdout`` that is a JSON object."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def _tail(path: pathlib.Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(none)"


def _run(argv: list[str], env: dict[str, str], home: pathlib.Path, keep_home: bool,
         log: str, timeout: float, check: bool) -> dict[str, Any]:
    """Run a driver; its JSON result, or DriverError quoting the client's log. A temporary
    HOME is removed whatever the outcome: an error carries the log's text, not its path."""
    try:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  env=env, cwd=home)
        except subprocess.TimeoutExpired as e:
            raise DriverError(f"{pathlib.Path(argv[1]).name} {argv[2]} did not finish in "
                              f"{timeout} s; client log ~/{log}:\n{_tail(home / log)}") from e
        result = parse_result(proc.stdout)
        ok = proc.returncode == 0 and result is not None and result.get("ok")
        if check and not ok:
            error = (result or {}).get("error") or (result or {}).get("errors") or "no result"
            raise DriverError(
                f"{pathlib.Path(argv[1]).name} {argv[2]} failed (exit {proc.returncode}): "
                f"{error}\n--- traceback\n{(result or {}).get('traceback', '')}\n"
                f"--- stderr\n{proc.stderr[-3000:]}\n--- client log ~/{log}\n"
                f"{_tail(home / log)}", result)
        return result if result is not None else {"ok": False, "error": proc.stderr[-3000:]}
    finally:
        if not keep_home:
            shutil.rmtree(home, ignore_errors=True)


def _home(home: str | os.PathLike[str] | None) -> tuple[pathlib.Path, bool]:
    if home is not None:
        path = pathlib.Path(home)
        path.mkdir(parents=True, exist_ok=True)
        return path, True
    return pathlib.Path(tempfile.mkdtemp(prefix="rocketq-grpc-client-")), False


def run_official(script_args: Sequence[str], timeout: float = 120, *,
                 home: str | os.PathLike[str] | None = None, check: bool = True
                 ) -> dict[str, Any]:
    """Run grpc/official_client.py in the official client's venv; its JSON result. With
    ``check`` a failed run raises DriverError (with the client's log). ``home``: keep the
    client's logs there instead of in a temporary directory."""
    path, keep = _home(home)
    argv, env = official_command(script_args, path)
    return _run(argv, env, path, keep, PYTHON_LOG, timeout, check)


def run_node(script_args: Sequence[str], timeout: float = 120, *,
             home: str | os.PathLike[str] | None = None, check: bool = True
             ) -> dict[str, Any]:
    """Run js/grpc_client.js with the npm client; as ``run_official``."""
    path, keep = _home(home)
    argv, env = node_command(script_args, path)
    return _run(argv, env, path, keep, NODE_LOG, timeout, check)


def spawn_null(*args: str, timeout: float = 30) -> tuple[subprocess.Popen[str], str]:
    """benchmarks/grpc_null.py (extra ``args``, e.g. "--tls-cert", ...) on a free port in a
    child process, and its "127.0.0.1:PORT" once it listens. Stop it with terminate()."""
    errors = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, str(NULL_SERVER), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=errors, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break
        line = proc.stdout.readline()
        if "listening on" in line:
            errors.close()
            return proc, line.rsplit(" ", 1)[1].strip()
        if not line and proc.poll() is not None:
            break
    proc.kill()
    proc.wait(10)
    errors.seek(0)
    raise RuntimeError(f"grpc_null did not start: {errors.read()[-2000:]}")


@contextlib.contextmanager
def null_server(*args: str) -> Iterator[str]:
    """The null gRPC service in a child process for the ``with`` block; yields its endpoint."""
    proc, endpoint = spawn_null(*args)
    try:
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


__all__ = ["DriverError", "node_client", "null_server", "official_python", "run_node",
           "run_official", "spawn_null"]
