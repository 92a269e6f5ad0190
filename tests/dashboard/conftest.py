"""One standalone broker with some traffic, and dashboards in front of it, shared by the
dashboard's tests: ``rocketq standalone --dashboard-port 0`` in a child process, a plain
``rocketq dashboard`` (read-only without a user file; sampling every half second, so that the
charts fill quickly) and one with a user file whose user makes the changes, each a child
process as a user runs it."""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import json
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from rocketq import ConsumeResult, Message, Producer, PushConsumer
from rocketq.asgi import AsgiServer
from rocketq.client.admin import AsyncAdmin
from rocketq.remoting import run

from ..cli.test_cli import free_port, small_conf

ROCKETQ = [sys.executable, "-m", "rocketq.cli"]
TOPIC = "DashOrders"
POISON = "DashPoison"
#: A group that consumed the first messages of TOPIC, then stopped.
STOPPED_GROUP = "dash-billing"
#: A group with a member online for the whole session, consuming TOPIC.
LIVE_GROUP = "dash-live"
#: The producer group of a producer online for the whole session.
PRODUCER_GROUP = "dash-producer"
#: A group whose consumer failed every message of POISON: they are in its DLQ.
FAILING_GROUP = "dash-failing"
#: Messages sent to TOPIC after STOPPED_GROUP stopped: its lag.
LATE = 7
HTML_BODY = '<script>alert("body")</script><b>bold</b>'
USER, PASSWORD = "alice", "correct horse battery"
#: A name the plain dashboard is told to answer to besides its address (--allowed-host).
ALLOWED_HOST = "dash.example"


class Process:
    """A ``rocketq`` command in a child process: its stdout read until a line says it is
    ready, its stderr in a file (read when it fails)."""

    def __init__(self, args: list[str], log: pathlib.Path, ready: str, *,
                 timeout: float = 30) -> None:
        self.log = log
        self.lines: list[str] = []
        with open(log, "w") as err:
            self.proc = subprocess.Popen([*ROCKETQ, "--log-level", "WARNING", *args],
                                         stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            self.lines.append(line)
            if ready in line:
                return
            if not line and self.proc.poll() is not None:
                break
        self.proc.kill()
        self.proc.wait()
        raise AssertionError(f"{args} did not start: {''.join(self.lines)}"
                             f"{log.read_text()[-3000:]}")

    def url(self, pattern: str = r"(http://[^\s]+/)") -> str:
        for line in self.lines:
            found = re.search(pattern, line)
            if found:
                return found.group(1)
        raise AssertionError(f"no URL in {self.lines}")

    def stop(self) -> int:
        """SIGTERM, and the exit status (the process is killed after 20 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Cluster:
    namesrv: str
    #: The dashboard the standalone serves itself (--dashboard-port).
    standalone_url: str
    process: Process
    #: What the traffic fixture sent: message ids by key, ids of dead letters.
    ids: dict[str, str] = field(default_factory=dict)
    dead: list[str] = field(default_factory=list)

    def admin(self, call: Callable[[AsyncAdmin], Any]) -> Any:
        """``call(admin)`` awaited on a fresh admin client."""
        async def go() -> Any:
            async with AsyncAdmin(self.namesrv) as admin:
                return await call(admin)
        return run(go())


def _wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _send_traffic(cluster: Cluster, stack: contextlib.ExitStack) -> None:
    """Messages in TOPIC, a group that consumed the first of them and stopped (so it lags by
    LATE), a group whose consumer failed every message of POISON (its DLQ), and a producer
    and a consumer that stay online (until ``stack`` closes)."""
    cluster.admin(lambda a: a.create_topic(TOPIC, 4))
    cluster.admin(lambda a: a.create_topic(POISON, 1))
    producer = stack.enter_context(Producer(PRODUCER_GROUP, namesrv=cluster.namesrv))
    live = stack.enter_context(PushConsumer(LIVE_GROUP, namesrv=cluster.namesrv,
                                            from_where="first"))
    live.subscribe(TOPIC, "*")
    live.register(lambda messages: ConsumeResult.SUCCESS)
    for i in range(20):
        key = f"order-{i}"
        result = producer.send(Message(TOPIC, json.dumps({"id": i}).encode(), tags="paid",
                                       keys=key))
        cluster.ids[key] = result.msg_id
    cluster.ids["html-body"] = producer.send(
        Message(TOPIC, HTML_BODY.encode(), tags="html", keys="html-body")).msg_id
    seen: set[str] = set()
    done = threading.Event()

    def consume(messages: list[Any]) -> ConsumeResult:
        seen.update(m.msg_id for m in messages)
        if len(seen) >= 21:
            done.set()
        return ConsumeResult.SUCCESS

    with PushConsumer(STOPPED_GROUP, namesrv=cluster.namesrv,
                      from_where="first") as consumer:
        consumer.subscribe(TOPIC, "*")
        consumer.register(consume)
        assert done.wait(30), f"consumed {len(seen)} of 21"
    for i in range(LATE):
        key = f"late-{i}"
        cluster.ids[key] = producer.send(Message(TOPIC, b"late", tags="late",
                                                 keys=key)).msg_id
    def fail(messages: list[Any]) -> ConsumeResult:
        return ConsumeResult.RECONSUME_LATER

    with PushConsumer(FAILING_GROUP, namesrv=cluster.namesrv, from_where="first",
                      max_reconsume_times=0) as consumer:
        consumer.subscribe(POISON, "*")
        consumer.register(fail)
        for i in range(2):
            cluster.dead.append(producer.send(Message(POISON, f"poison {i}".encode(),
                                                      keys=f"poison-{i}")).msg_id)
        _wait(lambda: cluster.admin(lambda a: _held(a, f"%DLQ%{FAILING_GROUP}")) >= 2,
              30, "the dead letters")

    def live_done() -> bool:
        progress = cluster.admin(lambda a: a.consumer_progress(LIVE_GROUP, TOPIC))
        return bool(progress.queues) and progress.total_lag == 0
    _wait(live_done, 30, f"{LIVE_GROUP} to commit its offsets")


async def _held(admin: AsyncAdmin, topic: str) -> int:
    if topic not in await admin.list_topics():
        return 0
    return sum(q.max_offset for q in await admin.topic_status(topic))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone with its own dashboard, and traffic in it."""
    base = tmp_path_factory.mktemp("dashboard-cluster")
    ns_port = free_port()
    process = Process(["standalone", "--data-dir", str(base / "data"), "--namesrv-port",
                       str(ns_port), "--broker-port", str(free_port()), "--grpc-port", "0",
                       "-c", small_conf(base), "--dashboard-port", "0"],
                      base / "standalone.log", "connect clients")
    found = Cluster(f"127.0.0.1:{ns_port}", process.url(r"dashboard on (http://[^\s]+/)"),
                    process)
    try:
        with contextlib.ExitStack() as stack:
            _send_traffic(found, stack)
            yield found
    finally:
        assert process.stop() == 0, process.log.read_text()[-3000:]


@pytest.fixture(scope="session")
def dashboard(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``rocketq dashboard`` without a user file (read-only), sampling every half second and
    answering to ALLOWED_HOST too; its URL."""
    log = tmp_path_factory.mktemp("dashboard") / "dashboard.log"
    process = Process(["dashboard", "--namesrv", cluster.namesrv, "--port", "0",
                       "--interval", "0.5", "--allowed-host", ALLOWED_HOST], log,
                      "rocketq dashboard on")
    try:
        yield process.url()
    finally:
        assert process.stop() == 0, log.read_text()[-3000:]


@pytest.fixture(scope="session")
def guarded(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``rocketq dashboard --users FILE`` with USER in the file; its URL."""
    base = tmp_path_factory.mktemp("guarded")
    users = base / "users"
    added = subprocess.run([*ROCKETQ, "dashboard", "add-user", USER, "--users", str(users)],
                           input=PASSWORD + "\n", capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    process = Process(["dashboard", "--namesrv", cluster.namesrv, "--port", "0",
                       "--users", str(users)], base / "dashboard.log", "rocketq dashboard on")
    try:
        yield process.url()
    finally:
        assert process.stop() == 0, (base / "dashboard.log").read_text()[-3000:]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Page:
    status: int
    url: str
    text: str
    headers: Any


class Browser:
    """A plain HTTP client with a cookie jar (a session; ``jar``: one shared with another
    client, as a browser shares its cookies between the ports of a host), following no
    redirects."""

    def __init__(self, base: str, jar: http.cookiejar.CookieJar | None = None) -> None:
        self.base = base.rstrip("/")
        self.jar = jar if jar is not None else http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect())

    def request(self, path: str, form: dict[str, str] | None = None, *,
                headers: dict[str, str] | None = None) -> Page:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(request, timeout=30) as response:
                return Page(response.status, response.url, response.read().decode(),
                            response.headers)
        except urllib.error.HTTPError as exc:
            return Page(exc.code, exc.url, exc.read().decode(), exc.headers)

    def get(self, path: str) -> Page:
        return self.request(path)

    def post(self, path: str, form: dict[str, str], *, csrf: bool = True) -> Page:
        if csrf:
            form = {"csrf": self.csrf(), **form}
        return self.request(path, form)

    def log_in(self, user: str = USER, password: str = PASSWORD) -> Page:
        """Log in with the login form; the answer (303 when it worked)."""
        return self.post("/login", {"username": user, "password": password})

    def csrf(self) -> str:
        """The session's CSRF token, as the forms of the topics page (or of the login page,
        before a login) carry it."""
        page = self.get("/topics")
        if page.status == 303:
            page = self.get("/login")
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found, page.text[:2000]
        return found.group(1)


def logged_in(base: str, user: str = USER, password: str = PASSWORD) -> Browser:
    """A session of ``base`` (a dashboard with a user file) logged in as ``user``: what a
    change needs."""
    web = Browser(base)
    page = web.log_in(user, password)
    assert page.status == 303, (page.status, page.text[:3000])
    return web


class EmptyAdmin:
    """An admin client of an empty cluster: every call answers nothing; it notes whether it
    was closed."""

    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return []
        return call


@pytest.fixture
def serve() -> Iterator[Any]:
    """Serve an app in this process, on a loop thread: ``serve(app)`` gives its base URL (no
    trailing slash); the servers stop at the end of the test."""
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
