"""What guards the dashboard, over an empty cluster served in this process: read-only without
a user file, sessions that end with their user or password, passwords taken as typed, the
login backoff, password checks off the event loop, body caps, trusted hosts, and a cookie per
port."""

from __future__ import annotations

import asyncio
import http.client
import threading
import urllib.parse
from typing import Any

import pytest

from rocketq.dashboard import UserFile, create_app
from rocketq.dashboard.inputs import MAX_TEST_BODY
from rocketq.dashboard.security import MAX_FORM_BYTES, MAX_LOGIN_BYTES
from rocketq.dashboard.throttle import Busy, LoginThrottle

from .conftest import PASSWORD, USER, Browser, EmptyAdmin, logged_in

#: A second user, whose password begins and ends with spaces.
SPACED_USER, SPACED_PASSWORD = "bob", "  spaced out  "
#: A name the guarded dashboard answers to besides its address.
HOST = "dash.example"


@pytest.fixture
def users(tmp_path: Any) -> UserFile:
    """A user file with USER and SPACED_USER."""
    found = UserFile(str(tmp_path / "users"))
    found.add(USER, PASSWORD)
    found.add(SPACED_USER, SPACED_PASSWORD)
    return found


@pytest.fixture
def guarded(serve: Any, users: UserFile) -> str:
    """A dashboard with ``users``, answering to HOST too; its base URL."""
    return serve(create_app(EmptyAdmin(), users=users.path, hosts=[HOST]))


def raw(base: str, method: str, path: str, *, headers: dict[str, str],
        body: Any = None, chunked: bool = False) -> tuple[int, str, Any]:
    """One request with exactly these headers (and ``body``, sent in chunks if
    ``chunked``): status, text and headers of the answer."""
    parts = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        if body is None:
            conn.putrequest(method, path, skip_host="Host" in headers)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
        else:
            conn.request(method, path, body=body, headers=headers, encode_chunked=chunked)
        response = conn.getresponse()
        return response.status, response.read().decode(), response.headers
    finally:
        conn.close()


def test_without_a_user_file_every_change_is_refused(serve: Any) -> None:
    base = serve(create_app(EmptyAdmin()))
    web = Browser(base)
    page = web.get("/topics")
    assert page.status == 200 and 'id="read-only"' in page.text
    assert "<form method=\"post\"" not in page.text
    for path in ("/topics", "/topics/T/delete", "/groups/g/reset", "/login", "/logout"):
        page = web.post(path, {"name": "T"}, csrf=False)
        assert page.status == 403, (path, page.status)
        assert "read-only" in page.text and "--dashboard-users FILE" in page.text
    assert web.get("/login").status == 303


def test_a_password_is_taken_as_typed(guarded: str) -> None:
    assert logged_in(guarded, SPACED_USER, SPACED_PASSWORD).get("/topics").status == 200
    assert Browser(guarded).log_in(SPACED_USER, SPACED_PASSWORD.strip()).status == 401


def test_a_session_ends_when_its_user_gets_a_new_password(guarded: str,
                                                          users: UserFile) -> None:
    web = logged_in(guarded)
    assert web.get("/topics").status == 200
    users.add(USER, "a new password")
    page = web.get("/topics")
    assert page.status == 303 and page.headers["Location"] == "/login?next=%2Ftopics"
    assert web.post("/topics", {"name": "T", "queues": "1"}).status == 401
    assert logged_in(guarded, USER, "a new password").get("/topics").status == 200


def test_a_session_ends_when_its_user_is_removed(guarded: str, users: UserFile) -> None:
    web, other = logged_in(guarded), logged_in(guarded, SPACED_USER, SPACED_PASSWORD)
    with open(users.path) as f:
        kept = [line for line in f if not line.startswith(f"{USER}:")]
    with open(users.path, "w") as f:
        f.writelines(kept)
    assert web.get("/topics").status == 303
    assert Browser(guarded).log_in().status == 401
    assert other.get("/topics").status == 200


def test_failed_logins_from_an_address_back_off(guarded: str) -> None:
    web = Browser(guarded)
    for _ in range(5):
        assert web.log_in(USER, "not the password").status == 401
    page = web.log_in()  # the right password, but too soon
    assert page.status == 429 and "Too many failed logins" in page.text
    assert 1 <= int(page.headers["Retry-After"]) <= 60
    assert web.get("/healthz").status == 200  # pages are not refused, only logins


def test_the_backoff_counts_the_failures_of_its_window() -> None:
    now = [0.0]
    throttle = LoginThrottle(clock=lambda: now[0])
    for _ in range(4):
        throttle.failed("10.0.0.1")
    assert throttle.refused_for("10.0.0.1") == 0
    throttle.failed("10.0.0.1")
    assert throttle.refused_for("10.0.0.1") == 60 and throttle.refused_for("10.0.0.2") == 0
    now[0] = 59.5
    assert throttle.refused_for("10.0.0.1") == 1
    now[0] = 60.0
    assert throttle.refused_for("10.0.0.1") == 0
    for i in range(10):  # one failure every 20 s: never 5 within a minute
        now[0] = 100.0 + 20 * i
        throttle.failed("10.0.0.3")
        assert throttle.refused_for("10.0.0.3") == 0


def test_password_checks_run_a_few_at_a_time_off_the_loop() -> None:
    release = threading.Event()
    lock = threading.Lock()
    running, peak, threads = 0, 0, set()

    def check() -> bool:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            threads.add(threading.get_ident())
        release.wait(10)
        with lock:
            running -= 1
        return True

    async def go() -> list[bool]:
        throttle = LoginThrottle(concurrency=2, queue=1)
        checks = [asyncio.ensure_future(throttle.check(check)) for _ in range(3)]
        while throttle._waiting < 1 or running < 2:  # two run, one waits
            await asyncio.sleep(0.01)
        with pytest.raises(Busy):
            await throttle.check(check)
        release.set()
        return list(await asyncio.gather(*checks))

    assert asyncio.run(asyncio.wait_for(go(), 20)) == [True, True, True]
    assert peak == 2 and threading.get_ident() not in threads


def test_posted_bodies_are_capped(guarded: str) -> None:
    web = logged_in(guarded)
    # The largest form a page makes passes: a test message of MAX_TEST_BODY characters, each
    # taking 9 bytes percent-encoded (an unknown field here, which the form ignores).
    page = web.post("/topics", {"name": "T", "queues": "1",
                                "body": "\u20ac" * MAX_TEST_BODY})
    assert page.status == 303, page.text[:2000]
    # One byte more is refused from its Content-Length alone, before anything is read.
    for path, limit in (("/topics", MAX_FORM_BYTES), ("/login", MAX_LOGIN_BYTES)):
        status, text, _ = raw(guarded, "POST", path, headers={
            "Content-Length": str(limit + 1),
            "Content-Type": "application/x-www-form-urlencoded"})
        assert status == 413 and "larger than" in text, (path, status, text[:2000])
    # Without a Content-Length: refused once what is read passes the cap.
    chunks = [b"a=" + b"b" * 1022] + [b"b" * 1024] * (MAX_LOGIN_BYTES // 1024)
    status, text, _ = raw(guarded, "POST", "/login", body=iter(chunks), chunked=True,
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 413 and "larger than" in text
    assert web.get("/topics").status == 200


def test_only_the_expected_host_names_are_answered(guarded: str) -> None:
    port = urllib.parse.urlsplit(guarded).port
    for host in ("evil.example", f"evil.example:{port}", f"{HOST}.evil.example", ""):
        status, text, _ = raw(guarded, "GET", "/healthz", headers={"Host": host})
        assert (status, text) == (400, "Invalid host header"), host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "[::1]", HOST, f"{HOST}:443"):
        status, text, _ = raw(guarded, "GET", "/healthz", headers={"Host": host})
        assert (status, text) == (200, "ok"), host


def test_two_dashboards_on_one_host_keep_their_own_sessions(serve: Any,
                                                            users: UserFile) -> None:
    first = serve(create_app(EmptyAdmin(), users=users.path))
    second = serve(create_app(EmptyAdmin(), users=users.path))
    one = logged_in(first)
    other = Browser(second, jar=one.jar)  # a browser sends a host's cookies to every port
    assert other.log_in().status == 303
    assert one.get("/topics").status == 200 and other.get("/topics").status == 200
    names = sorted(cookie.name for cookie in one.jar)
    assert names == sorted(f"rocketq_dashboard_{urllib.parse.urlsplit(url).port}"
                           for url in (first, second))
