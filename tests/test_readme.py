"""The README and the pages under docs/ run as written: the first screen from a fresh copy of
the checkout, in a new venv, as a new user follows it; every Python example against a real
broker."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks() -> list[str]:
    """Every ```python block of the README and of the pages under docs/."""
    return [block for page in PAGES for block in
            re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)]


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_examples():
    assert len(python_blocks()) >= 2


def test_quick_start_runs_against_a_real_broker(servers, capsys):
    block = next(b for b in python_blocks() if "PushConsumer" in b)
    assert 'NAMESRV = "127.0.0.1:9876"' in block
    code = block.replace('"127.0.0.1:9876"', repr(servers.namesrv))
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "SEND_OK Orders@broker-a:" in out
    assert HELLO_LINE in out.splitlines()


#: What the README says the first screen's hello prints for the message it consumed.
HELLO_LINE = "Orders paid order-17 b'{\"id\": 17}'"


def test_readme_says_what_the_hello_prints():
    text = README.read_text(encoding="utf-8")
    assert f"`{HELLO_LINE}`" in text


def test_async_for_example_runs(servers, capsys):
    """The client page's `async for` loop prints what is sent and runs until it is stopped."""
    import asyncio

    from rocketq import Message, Producer

    block = next(b for b in python_blocks() if "async for message in consumer" in b)
    namespace: dict = {"__name__": "readme"}
    exec(compile(block, "docs/client.md", "exec"), namespace)
    servers.create_topic("Orders", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        producer.send(Message("Orders", b"one", tags="paid"))
        producer.send(Message("Orders", b"two", tags="created"))
        producer.send(Message("Orders", b"three", tags="paid"))

    async def run() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(namespace["follow"](servers.namesrv), 5)

    asyncio.run(run())
    bodies = sorted(line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines())
    assert bodies == ["b'one'", "b'three'"]


def test_readme_first_screen_comes_first():
    """What rocketq is, prerequisites, install, start and stop, a terminal hello and a Python
    example, then links: all before the first second-level heading."""
    text = README.read_text(encoding="utf-8")
    first = text[:text.index("\n## ")]
    for needle in ("Prerequisites", "make run", "Ctrl-C", "rocketq-data", "rm -rf",
                   "rocketq admin send", "rocketq admin tail", "```python", "docs/client.md"):
        assert needle in first, needle
    # Short enough to read through; the reference is in docs/ (the Spark section, with its
    # table of Kafka's option names, is the longest).
    assert len(text.splitlines()) < 300


def test_store_example_runs(capsys):
    block = next(b for b in python_blocks() if "MessageStore" in b)
    exec(compile(block, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "PUT_OK 0" in out
    assert "0 paid b'{\"id\": 17}'" in out
    assert "['order-17']" in out


def test_message_types_example_runs(servers, capsys):
    block = next(b for b in python_blocks() if "TransactionProducer" in b)
    code = block.replace('"127.0.0.1:9876"', repr(servers.namesrv))
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "[b'created', b'paid', b'shipped']" in out
    assert "COMMIT" in out


def test_auto_batch_example_runs(servers, capsys):
    block = next(b for b in python_blocks() if "auto_batch=True" in b)
    code = "\n".join(line[2:] for line in block.splitlines())  # indented in a list item
    code = code.replace('"127.0.0.1:9876"', repr(servers.namesrv))
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == "1000 sent, SEND_OK\n"


def test_simple_consumer_example_runs(servers, capsys):
    block = next(b for b in python_blocks() if "SimpleConsumer(" in b and "from rocketq" in b)
    code = block.replace('"127.0.0.1:9876"', repr(servers.namesrv))
    exec(compile(code, "docs/client.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out == "Invoices b'invoice 17' 1\n"


def test_security_example_runs_against_an_acl_and_tls_broker(tmp_path, capsys):
    """The README's plain_acl.yml and client example, on a NameServer and broker that check
    signatures and enforce TLS."""
    from rocketq.remoting import TlsSettings

    from .certs import make_pki
    from .servers import ServerThread

    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    pki = make_pki(tmp_path / "pki")
    st = ServerThread(tmp_path)
    try:
        st.start_namesrv(acl_file=str(acl), tls=TlsSettings(
            "enforcing", pki.server_cert, pki.server_key))
        st.start_broker(aclEnable="true", aclFile=str(acl), tlsMode="enforcing", **{
            "tls.server.certPath": pki.server_cert, "tls.server.keyPath": pki.server_key,
            "tls.client.trustCertPath": pki.ca})
        block = next(b for b in python_blocks() if "credentials=" in b)
        code = block.replace('"127.0.0.1:9876"', repr(st.namesrv)).replace(
            '"ca.crt"', repr(pki.ca))
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    finally:
        st.stop()
    assert capsys.readouterr().out == "SEND_OK\n"


# -- the first screen, followed literally from a fresh copy of the checkout -----------------

#: What a fresh clone does not have: built files, venvs, data.
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "build", "*.egg-info", "rocketq-data", "rocketq-cluster", "__pycache__",
    ".pytest_cache", ".ruff_cache", ".hypothesis", "*.so", "_ccodec.c", "tests", "benchmarks")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fresh_copy(tmp_path: pathlib.Path) -> pathlib.Path:
    checkout = tmp_path / "rocketq"
    shutil.copytree(ROOT, checkout, ignore=COPY_IGNORE)
    return checkout


def user_env(venv_bin: pathlib.Path, **extra: str) -> dict[str, str]:
    """The environment of a shell where `source .venv/bin/activate` ran."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "ROCKETQ_NO_EXTENSIONS")}
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv_bin.parent)
    env.update(extra)
    return env


def wait_for_route(namesrv: str, deadline: float,
                   server: subprocess.Popen[str] | None = None) -> None:
    from .conftest import fetch_route

    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            raise AssertionError(f"it exited with {server.returncode}")
        try:
            if fetch_route(namesrv, "TBW102"):
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise AssertionError("the broker never registered")


def run_hello(python: str, tmp_path: pathlib.Path, namesrv: str, env: dict[str, str]) -> str:
    """The first screen's Python example, saved as hello.py in a directory of its own."""
    block = next(b for b in readme_blocks("python") if "PushConsumer" in b)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "hello.py").write_text(block.replace('"127.0.0.1:9876"', repr(namesrv)))
    done = subprocess.run([python, "hello.py"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_first_screen_from_a_fresh_checkout(tmp_path):
    """`make run` in a copy of the checkout (its own venv, what a broker needs), then the
    terminal hello with the venv activated, then hello.py twice from another directory: the
    second run gets only its own message, as leaving `with` committed the first's offsets."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    install = readme_blocks("sh")[0]
    assert "make run" in install
    checkout = fresh_copy(tmp_path)
    data = tmp_path / "data"
    # The HA port on any free port (not the broker's port + 1, which another test may hold).
    conf = tmp_path / "broker.conf"
    conf.write_text("haListenPort=0\n")
    # A shell of its own: nothing of the make (or venv) that runs these tests.
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "MAKEFLAGS", "MAKELEVEL", "MFLAGS",
                        "MAKEOVERRIDES")}
    run_log = tmp_path / "make-run.log"  # a file, not a pipe nobody reads while it runs
    for attempt in range(3):  # a free port may be taken by another test before it binds
        ns_port, broker_port = free_port(), free_port()
        namesrv = f"127.0.0.1:{ns_port}"
        with run_log.open("w") as log_file:
            server = subprocess.Popen(
                ["make", "run", f"RUN_ARGS=--namesrv-port {ns_port} --broker-port "
                                f"{broker_port} --data-dir {data} -c {conf}"],
                cwd=checkout, env=env, stdout=log_file, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)
        try:
            wait_for_route(namesrv, time.monotonic() + 240, server)
            break
        except AssertionError as exc:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            log = run_log.read_text()
            if "address already in use" not in log or attempt == 2:
                raise AssertionError(f"make run never served ({exc}): {log}") from None
    try:
        venv_bin = checkout / ".venv" / "bin"
        installed = subprocess.run([venv_bin / "pip", "list", "--format=freeze"],
                                   capture_output=True, text=True, timeout=60).stdout
        assert "pyspark" not in installed.lower() and "pytest" not in installed.lower()
        shell = user_env(venv_bin, NAMESRV_ADDR=namesrv)
        terminal = readme_blocks("sh")[1]
        commands = [line.split("#")[0].strip() for line in terminal.splitlines()
                    if line.startswith("rocketq ")]
        assert len(commands) == 2
        outputs = []
        for command in commands:
            done = subprocess.run(command, shell=True, cwd=tmp_path, env=shell,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            outputs.append(done.stdout)
        assert "hello, world" in outputs[1]
        # A message without tags or keys: tail says nothing of them (not "tags=None keys=[]").
        assert re.fullmatch(r"Hello@broker-a:\d+ offset 0 hello, world\n", outputs[1]), \
            outputs[1]
        first = run_hello("python", tmp_path, namesrv, shell)
        second = run_hello("python", tmp_path, namesrv, shell)
        for out in (first, second):
            assert out.startswith("SEND_OK Orders@broker-a:"), out
            assert out.splitlines().count(HELLO_LINE) == 1, out
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    log = run_log.read_text()
    # make passes the interrupt on: it exits 2, or dies of SIGINT itself.
    assert server.returncode in (0, 2, -signal.SIGINT), log
    assert "Traceback" not in log, log
    assert (data / "commitlog").is_dir()


@pytest.mark.slow
def test_wheel_from_the_checkout_installs_anywhere(tmp_path):
    """The documented `pip wheel --no-deps -w dist .` builds a wheel with the compiled codec
    and py.typed, and it installs into a fresh venv that starts a standalone broker."""
    checkout = fresh_copy(tmp_path)
    python = sys.executable
    subprocess.run([python, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    venv_bin = tmp_path / "venv" / "bin"
    build = subprocess.run([venv_bin / "pip", "wheel", "--quiet", "--no-deps", "-w", "dist",
                            "."], cwd=checkout, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    assert "deprecated" not in build.stderr, build.stderr
    (wheel,) = (checkout / "dist").glob("rocketq-*.whl")
    install = subprocess.run([venv_bin / "pip", "install", "--quiet", str(wheel)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    env = user_env(venv_bin)
    probe = subprocess.run(
        [venv_bin / "python", "-c", "import importlib.resources, rocketq.protocol.codec as c;"
         "print(c.COMPILED, importlib.resources.files('rocketq').joinpath('py.typed')"
         ".is_file())"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == ["True", "True"], probe.stderr
