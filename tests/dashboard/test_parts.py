"""The dashboard's parts without a cluster: the user file and add-user, input checks, charts,
the sampler's bounded history, and the pages it answers when the cluster fails (an admin
client that raises, served by the real server on a loop thread)."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from rocketq.asgi import AsgiServer
from rocketq.cli import main
from rocketq.client.errors import BrokerError
from rocketq.dashboard import UserFile, UserFileError, create_app, inputs
from rocketq.dashboard.charts import line_chart
from rocketq.dashboard.sampler import Sampler
from rocketq.dashboard.security import safe_next
from rocketq.dashboard.users import hash_password, verify_password
from rocketq.errors import ClientTimeoutError


def test_passwords_are_salted_slow_hashes() -> None:
    first, second = hash_password("swordfish1"), hash_password("swordfish1")
    assert first != second and first.startswith("scrypt$16384$8$1$")
    assert verify_password("swordfish1", first)
    assert not verify_password("swordfish2", first)
    assert not verify_password("swordfish1", "scrypt$oops")
    assert not verify_password("swordfish1", "md5$abc")


def test_the_user_file(tmp_path) -> None:
    users = UserFile(str(tmp_path / "users"))
    assert users.add("alice", "first password")
    assert users.add("bob", "bobs password")
    assert not users.add("alice", "second password")
    assert users.authenticate("alice", "second password")
    assert not users.authenticate("alice", "first password")
    assert not users.authenticate("carol", "second password")
    assert sorted(users.read()) == ["alice", "bob"]
    assert os.stat(users.path).st_mode & 0o777 == 0o600
    assert "password" not in (tmp_path / "users").read_text()
    with pytest.raises(ValueError, match="at least 8"):
        users.add("dave", "short")
    with pytest.raises(ValueError, match="user name"):
        users.add("e:ve", "long enough")
    (tmp_path / "broken").write_text("alice:plaintext\n")
    with pytest.raises(UserFileError, match="line 1"):
        UserFile(str(tmp_path / "broken")).check()
    (tmp_path / "empty").write_text("# nobody\n")
    with pytest.raises(UserFileError, match="no users"):
        UserFile(str(tmp_path / "empty")).check()
    with pytest.raises(UserFileError, match="cannot read"):
        UserFile(str(tmp_path / "missing")).check()


def test_add_user_reads_the_password_from_stdin(tmp_path, monkeypatch, capsys) -> None:
    path = str(tmp_path / "users")
    monkeypatch.setattr("sys.stdin", io.StringIO("a long password\n"))
    assert main(["dashboard", "add-user", "alice", "--users", path]) == 0
    assert "added alice" in capsys.readouterr().out
    assert UserFile(path).authenticate("alice", "a long password")
    monkeypatch.setattr("sys.stdin", io.StringIO("x\n"))
    assert main(["dashboard", "add-user", "alice", "--users", path]) == 1
    assert "at least 8" in capsys.readouterr().err


def test_inputs() -> None:
    assert inputs.topic_name("Orders_1-%|x") == "Orders_1-%|x"
    with pytest.raises(inputs.BadInput, match="illegal characters"):
        inputs.topic_name("a b")
    assert inputs.message_id("7f000001" * 4) == "7F000001" * 4
    with pytest.raises(inputs.BadInput):
        inputs.message_id("7f00000" * 4)
    assert inputs.timestamp("1700000000000", "t") == 1700000000000
    assert inputs.timestamp("2024-05-01T12:00", "t") > 0
    assert inputs.timestamp("2024-05-01T12:00:00+00:00", "t") == 1714564800000
    with pytest.raises(inputs.BadInput, match="not a time"):
        inputs.timestamp("2024-13-01T12:00", "t")
    with pytest.raises(inputs.BadInput, match="between 1 and 8"):
        inputs.integer("9", "n", low=1, high=8)
    assert safe_next("/topics?system=1") == "/topics?system=1"
    for elsewhere in ("https://evil.example/", "//evil.example/", "/\\evil", "topics"):
        assert safe_next(elsewhere) == "/"


def test_charts_escape_names_and_wait_for_two_points() -> None:
    assert "waiting for samples" in line_chart({"a": [(1.0, 1.0)]}, title="t")
    svg = line_chart({"<b>x</b>": [(1.0, 3.0), (2.0, 7.0)], "y": [(1.0, 0.0), (2.0, 0.0)]},
                     title="<i>title</i>", unit="msg/s")
    assert "<b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg and "&lt;i&gt;title" in svg
    assert svg.count("<polyline") == 2
    assert ">10<" in svg  # the axis' top: 7 rounded up


def test_the_sampler_keeps_a_bounded_history() -> None:
    class Admin:
        calls = 0

        async def cluster(self) -> list[Any]:
            Admin.calls += 1
            return [SimpleNamespace(broker_name="b", broker_id=0, put_tps=Admin.calls,
                                    get_tps=1.0, error=None),
                    SimpleNamespace(broker_name="down", broker_id=0, put_tps=0, get_tps=0,
                                    error="no answer")]

        async def groups(self) -> list[Any]:
            return [SimpleNamespace(name="g", system=False),
                    SimpleNamespace(name="CID_RMQ_SYS_X", system=True)]

        async def consumer_progress(self, group: str) -> Any:
            return SimpleNamespace(total_lag=5)

    async def go() -> Sampler:
        sampler = Sampler(Admin(), interval=0.01, history=3)
        sampler.start()
        while Admin.calls < 6:
            await asyncio.sleep(0.01)
        await sampler.stop()
        return sampler

    sampler = asyncio.run(go())
    assert len(sampler.samples) == 3
    assert list(sampler.tps_series()) == ["b put", "b get"]
    assert [v for _, v in sampler.tps_series()["b put"]] == [4.0, 5.0, 6.0]
    assert sampler.lag_series() == {"g": [(s.at, 5.0) for s in sampler.samples]}


class FailingAdmin:
    """An admin client whose every call raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            raise self.error
        return call


@pytest.fixture
def serve() -> Iterator[Any]:
    """Serve an app on a loop thread; return its base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[AsgiServer] = []

    def start(app: Any) -> str:
        server = AsgiServer(app, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        servers.append(server)
        return server.url.rstrip("/")

    try:
        yield start
    finally:
        for server in servers:
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("error, status, words", [
    (ClientTimeoutError("no answer in 3 s"), 502, "The cluster did not answer"),
    (ConnectionRefusedError(111, "Connection refused"), 502, "The cluster did not answer"),
    (BrokerError(17, "topic not allowed"), 400, "The cluster refused"),
    (RuntimeError("an internal detail"), 500, "Something went wrong"),
])
def test_a_failing_cluster_gets_a_page_not_a_traceback(serve: Any, error: BaseException,
                                                       status: int, words: str) -> None:
    base = serve(create_app(FailingAdmin(error), interval=0.05))
    got, text = fetch(f"{base}/topics")
    assert got == status and words in text
    assert "Traceback" not in text and "an internal detail" not in text
    time.sleep(0.2)
    assert "could not be sampled" in fetch(f"{base}/cluster")[1]


def test_the_server_stops_and_frees_its_port() -> None:
    loop = asyncio.new_event_loop()
    server = AsgiServer(create_app(FailingAdmin(RuntimeError())), "127.0.0.1", 0)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        assert fetch(f"{server.url}healthz") == (200, "ok")
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        taken = AsgiServer(create_app(FailingAdmin(RuntimeError())), "127.0.0.1",
                                server.port)
        asyncio.run_coroutine_threadsafe(taken.start(), loop).result(10)
        asyncio.run_coroutine_threadsafe(taken.stop(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_the_templates_and_style_sheet_are_package_data() -> None:
    import fnmatch
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["rocketq"]
    shipped = [path.relative_to(root / "rocketq").as_posix()
               for path in (root / "rocketq" / "dashboard").rglob("*")
               if path.is_file() and path.suffix not in (".py", ".pyc")]
    assert shipped
    assert [p for p in shipped if not any(fnmatch.fnmatch(p, g) for g in patterns)] == []


def test_a_session_secret_file_is_made_once_and_kept(tmp_path) -> None:
    from rocketq.cli.dashboard import session_secret

    path = tmp_path / "secret"
    first = session_secret(str(path))
    assert len(first) >= 32 and os.stat(path).st_mode & 0o777 == 0o600
    assert session_secret(str(path)) == first
    assert session_secret(None) is None
    (tmp_path / "short").write_text("tiny\n")
    with pytest.raises(ValueError, match="shorter than 32"):
        session_secret(str(tmp_path / "short"))
