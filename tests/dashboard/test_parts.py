"""The dashboard's parts without a cluster: the user file and add-user, input checks, charts,
the sampler's bounded history, the pages it answers when the cluster fails (an admin client
that raises, served by the real server on a loop thread), and the server's start and stop
when something fails."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn

from rocketq.asgi import AsgiServer
from rocketq.cli import main
from rocketq.client.errors import BrokerError
from rocketq.dashboard import UserFile, UserFileError, create_app, inputs
from rocketq.dashboard.charts import line_chart
from rocketq.dashboard.sampler import Sampler
from rocketq.dashboard.security import allowed_hosts, safe_next
from rocketq.dashboard.users import hash_password, verify_password
from rocketq.dashboard.web import _ms_time
from rocketq.errors import ClientTimeoutError

from .conftest import EmptyAdmin


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
    with pytest.raises(inputs.BadInput, match="not a time"):
        inputs.timestamp("2024-13-01T12:00", "t")
    with pytest.raises(inputs.BadInput, match="between 1 and 8"):
        inputs.integer("9", "n", low=1, high=8)
    assert safe_next("/topics?system=1") == "/topics?system=1"
    for elsewhere in ("https://evil.example/", "//evil.example/", "/\\evil", "topics"):
        assert safe_next(elsewhere) == "/"


def test_times_are_utc_and_in_range_whatever_the_local_zone(monkeypatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert inputs.timestamp("2024-05-01T12:00", "t") == 1714564800000
        assert inputs.timestamp("2024-05-01T12:00:00", "t") == 1714564800000
        assert inputs.timestamp("2024-05-01T14:00+02:00", "t") == 1714564800000
        assert inputs.time_field(1714564800000) == "2024-05-01T12:00:00"
        assert inputs.time_text(1714564800000) == "2024-05-01 12:00:00 UTC"
        assert _ms_time(1714564800123) == "2024-05-01 12:00:00.123"
        assert line_chart({"a": [(1714564800.0, 1.0), (1714565400.0, 2.0)]},
                          title="t").count("12:10:00 UTC") == 1
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert inputs.timestamp("0", "t") == 0
    assert inputs.timestamp("9999-12-31T23:59:59", "t") == inputs.MAX_MS - 999
    for value in ("99999999999999999", "9999-12-31T23:59:59-05:00", "1969-12-31T23:59:59",
                  "0001-01-01T00:00", "0001-01-01T00:00+05:00"):
        with pytest.raises(inputs.BadInput, match="out of range"):
            inputs.timestamp(value, "the time")
    for value in ("-5", "10000-01-01T00:00", "1e5", "\u00b2"):
        with pytest.raises(inputs.BadInput, match="not a time"):
            inputs.timestamp(value, "the time")
    with pytest.raises(inputs.BadInput, match="longer than 64"):
        inputs.timestamp("9" * 5000, "the time")
    # Whatever the number, a field's value: the nearest end of the range.
    for ms, field in [(-1, "1970-01-01T00:00:00"), (-10 ** 30, "1970-01-01T00:00:00"),
                      (10 ** 30, "9999-12-31T23:59:59"), (inputs.MAX_MS, "9999-12-31T23:59:59")]:
        assert inputs.time_field(ms) == field
    assert _ms_time(10 ** 30) == str(10 ** 30) and _ms_time(0) == "" and _ms_time("x") == ""


def test_passwords_are_read_as_sent() -> None:
    form = {"password": "  spaced out  ", "name": "  alice  "}
    assert inputs.secret(form, "password") == "  spaced out  "
    assert inputs.text(form, "name") == "alice"
    assert inputs.secret({}, "password") == ""
    with pytest.raises(inputs.BadInput, match="longer than 4"):
        inputs.secret(form, "password", limit=4)


def test_allowed_hosts() -> None:
    assert allowed_hosts() == ["localhost", "127.0.0.1", "[::1]"]
    assert allowed_hosts(["0.0.0.0", "::", "[::1]", "Dash.Example", "*.example.org", "*"]) \
        == ["localhost", "127.0.0.1", "[::1]", "0.0.0.0", "[::]", "dash.example",
            "*.example.org", "*"]
    for bad in ("dash.example:8080", "http://dash.example", "dash.example/x", "*dash", "",
                "a..b", "[dash.example]"):
        with pytest.raises(ValueError, match="not a host name"):
            allowed_hosts([bad])


def test_charts_escape_names_and_wait_for_two_points() -> None:
    assert "waiting for samples" in line_chart({"a": [(1.0, 1.0)]}, title="t")
    svg = line_chart({"<b>x</b>": [(1.0, 3.0), (2.0, 7.0)], "y": [(1.0, 0.0), (2.0, 0.0)]},
                     title="<i>title</i>", unit="msg/s")
    assert "<b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg and "&lt;i&gt;title" in svg
    assert svg.count("<polyline") == 2
    assert ">10<" in svg  # the axis' top: 7 rounded up


def test_the_sampler_keeps_a_bounded_history() -> None:
    class Admin:
        """Answers six samples, then blocks: the history holds exactly those six."""

        calls = 0

        async def cluster(self) -> list[Any]:
            Admin.calls += 1
            if Admin.calls > 6:
                await asyncio.Event().wait()
            return [SimpleNamespace(broker_name="b", broker_id=0, put_tps=Admin.calls,
                                    get_tps=1.0, error=None, address="127.0.0.1:1",
                                    runtime={}),
                    SimpleNamespace(broker_name="down", broker_id=0, put_tps=0, get_tps=0,
                                    error="no answer", address="127.0.0.1:2", runtime={})]

        async def groups(self) -> list[Any]:
            return [SimpleNamespace(name="g", system=False),
                    SimpleNamespace(name="CID_RMQ_SYS_X", system=True)]

        async def consumer_progress(self, group: str) -> Any:
            return SimpleNamespace(total_lag=5)

    async def go() -> Sampler:
        sampler = Sampler(Admin(), interval=0.01, history=3)
        sampler.start()
        deadline = time.monotonic() + 10
        while Admin.calls <= 6 and time.monotonic() < deadline:  # the 7th call blocks
            await asyncio.sleep(0.01)
        await sampler.stop()
        return sampler

    sampler = asyncio.run(go())
    assert len(sampler.samples) == 3
    assert list(sampler.tps_series()) == ["b put", "b get"]
    assert [v for _, v in sampler.tps_series()["b put"]] == [4.0, 5.0, 6.0]
    assert sampler.lag_series() == {"g": [(s.at, 5.0) for s in sampler.samples]}


def until(check: Callable[[], Any], what: str, timeout: float = 10) -> Any:
    """``check()`` once it is true; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class FailingAdmin:
    """An admin client whose every call raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            raise self.error
        return call


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
    until(lambda: "could not be sampled" in fetch(f"{base}/cluster")[1], "the sampler's error")


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


def test_the_server_stops_and_closes_its_socket_when_its_loop_failed(monkeypatch) -> None:
    async def broken(self: Any) -> None:
        raise RuntimeError("the serving loop broke")

    monkeypatch.setattr(uvicorn.Server, "main_loop", broken)
    admin = EmptyAdmin()

    async def go() -> int:
        server = AsgiServer(create_app(admin, close_admin=True), "127.0.0.1", 0)
        await server.start()
        await server.stop()
        return server.port

    port = asyncio.run(go())
    assert admin.closed  # the application's shutdown ran
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_an_application_that_fails_to_start_leaves_nothing_listening() -> None:
    from starlette.applications import Starlette

    @contextlib.asynccontextmanager
    async def broken(app: Any) -> Any:
        raise RuntimeError("no start")
        yield

    async def go() -> int:
        server = AsgiServer(Starlette(lifespan=broken), "127.0.0.1", 0)
        with pytest.raises(RuntimeError, match="failed to start"):
            await server.start()
        await server.stop()  # nothing to stop: no error either
        return server.port

    port = asyncio.run(go())
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_standalone_dashboard_that_cannot_start_closes_its_admin(monkeypatch) -> None:
    from rocketq.broker.config import BrokerConfig
    from rocketq.cli.dashboard import start_for_standalone

    made: list[EmptyAdmin] = []

    def admin(*args: Any, **kwargs: Any) -> EmptyAdmin:
        made.append(EmptyAdmin())
        return made[-1]

    monkeypatch.setattr("rocketq.client.admin.AsyncAdmin", admin)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    args = SimpleNamespace(dashboard_port=taken.getsockname()[1], dashboard_host="127.0.0.1",
                           dashboard_users=None, dashboard_allowed_host=[])
    broker = SimpleNamespace(config=BrokerConfig(), acl=None)
    try:
        with pytest.raises(OSError, match="cannot listen"):
            asyncio.run(start_for_standalone(args, broker, "127.0.0.1:9876"))
        assert len(made) == 1 and made[0].closed
        args.dashboard_port, args.dashboard_allowed_host = 0, ["dash.example:80"]
        with pytest.raises(ValueError, match="not a host name"):
            asyncio.run(start_for_standalone(args, broker, "127.0.0.1:9876"))
        assert len(made) == 2 and made[1].closed
    finally:
        taken.close()
