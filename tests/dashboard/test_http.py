"""The dashboard over plain HTTP: every page answers, bad input gets a clear 4xx page and
never a traceback, whatever comes from a person or a message is escaped, only the expected
Host names are answered, and changes need a logged-in user (none without a user file: the
dashboard is then read-only) and a CSRF token."""

from __future__ import annotations

import html
import subprocess
import urllib.parse

import pytest

from .conftest import (
    ALLOWED_HOST,
    FAILING_GROUP,
    PASSWORD,
    POISON,
    ROCKETQ,
    STOPPED_GROUP,
    TOPIC,
    USER,
    Browser,
    Cluster,
    Page,
    logged_in,
)

pytestmark = pytest.mark.slow

#: Every change the dashboard makes, with a form that would otherwise pass.
CHANGES = [
    ("/topics", {"name": "DashNever", "queues": "1", "message_type": "NORMAL"}),
    (f"/topics/{TOPIC}/update", {"read_queues": "4", "write_queues": "4", "perm": "6",
                                 "message_type": "NORMAL"}),
    (f"/topics/{TOPIC}/delete", {"confirm": TOPIC}),
    (f"/topics/{TOPIC}/send", {"body": "x"}),
    ("/groups", {"name": "dash-never"}),
    (f"/groups/{STOPPED_GROUP}/update", {"retry_max_times": "3"}),
    (f"/groups/{STOPPED_GROUP}/delete", {"confirm": STOPPED_GROUP}),
    (f"/groups/{STOPPED_GROUP}/reset", {"topic": TOPIC, "time": "0"}),
    (f"/groups/{STOPPED_GROUP}/skip", {"topic": TOPIC}),
    (f"/groups/{FAILING_GROUP}/resend", {"msg_id": "0" * 32}),
    ("/logout", {}),
]


def refused(page: Page, status: int, *words: str) -> None:
    """``page`` is an error page with ``status`` that says each of ``words`` (as a person
    reads it; a word with an entity in it is looked for in the HTML as it is)."""
    assert page.status == status, (page.status, page.text[:3000])
    assert "Traceback" not in page.text and 'File "' not in page.text
    shown = html.unescape(page.text)
    for word in words:
        assert word in (page.text if "&" in word else shown), (word, page.text[:3000])


def test_every_page_answers_with_its_headers(dashboard: str, cluster: Cluster) -> None:
    web = Browser(dashboard)
    broker = cluster.admin(lambda a: a.cluster())[0].address
    for path in ["/cluster", "/topics", "/topics?system=1", f"/topics/{TOPIC}", "/groups",
                 f"/groups/{STOPPED_GROUP}", f"/groups/{FAILING_GROUP}", "/messages",
                 f"/messages?by=key&topic={TOPIC}&key=order-3",
                 f"/connections?group={STOPPED_GROUP}", "/connections",
                 f"/brokers/{urllib.parse.quote(broker, safe='')}",
                 "/topics/" + urllib.parse.quote(f"%RETRY%{STOPPED_GROUP}", safe="")]:
        page = web.get(path)
        assert page.status == 200, (path, page.text[:3000])
        assert "script-src 'none'" in page.headers["Content-Security-Policy"]
        assert page.headers["X-Frame-Options"] == "DENY"
    assert web.get("/").status == 303
    assert web.get("/static/dashboard.css").status == 200


def test_the_standalone_serves_its_own_dashboard(cluster: Cluster) -> None:
    page = Browser(cluster.standalone_url).get("/topics")
    assert page.status == 200 and TOPIC in page.text


def test_only_the_expected_host_names_are_answered(dashboard: str) -> None:
    web = Browser(dashboard)
    for foreign in ("evil.example", "evil.example:80", "127.0.0.1.evil.example"):
        page = web.request("/topics", headers={"Host": foreign})
        assert page.status == 400, (foreign, page.status, page.text[:300])
        assert TOPIC not in page.text
    port = urllib.parse.urlsplit(dashboard).port
    for name in (f"localhost:{port}", f"127.0.0.1:{port}", ALLOWED_HOST,
                 f"{ALLOWED_HOST.upper()}:8080"):
        page = web.request("/topics", headers={"Host": name})
        assert page.status == 200 and TOPIC in page.text, (name, page.status)


def test_without_a_user_file_the_dashboard_is_read_only(dashboard: str,
                                                        cluster: Cluster) -> None:
    web = Browser(dashboard)
    page = web.get(f"/topics/{TOPIC}")
    assert page.status == 200 and "Read-only" in page.text
    assert 'method="post"' not in page.text and 'name="csrf"' not in page.text
    assert 'id="read-only"' in page.text
    before = cluster.admin(lambda a: a.topic(TOPIC))
    for path, form in CHANGES:
        for token in ({}, {"csrf": "x" * 43}):
            refused(web.post(path, {**form, **token}, csrf=False), 403,
                    "read-only", "rocketq dashboard add-user NAME --users FILE",
                    "--users FILE", "--dashboard-users FILE")
    refused(web.post("/login", {"username": USER, "password": PASSWORD}, csrf=False), 403,
            "read-only")
    after = cluster.admin(lambda a: a.topic(TOPIC))
    assert (after.read_queues, after.write_queues, after.perm, after.message_type) == \
        (before.read_queues, before.write_queues, before.perm, before.message_type)
    assert "DashNever" not in web.get("/topics").text
    assert "dash-never" not in web.get("/groups?system=1").text


def test_unknown_things_are_404(dashboard: str) -> None:
    web = Browser(dashboard)
    refused(web.get("/topics/NoSuchTopic"), 404, "NoSuchTopic")
    refused(web.get("/groups/no-such-group"), 404, "no-such-group")
    refused(web.get("/messages/" + "AB" * 16), 404, "AB" * 16)
    refused(web.get("/brokers/127.0.0.1:1"), 404, "127.0.0.1:1")
    refused(web.get("/nowhere"), 404, "No page at /nowhere")
    refused(web.get("/messages?by=key&topic=NoSuchTopic&key=k"), 404, "NoSuchTopic")


def test_names_rocketmq_refuses_are_refused_and_echoed_escaped(guarded: str) -> None:
    web = logged_in(guarded)
    page = web.get("/topics/" + urllib.parse.quote("<b>x", safe=""))
    refused(page, 400, "not a valid topic name", "&lt;b&gt;x")
    assert "<b>x" not in page.text
    bad = '<img src=x onerror=alert(1)>'
    page = web.post("/topics", {"name": bad, "queues": "4", "message_type": "NORMAL"})
    refused(page, 400, "illegal characters", "&lt;img src=x onerror=alert(1)&gt;")
    assert bad not in page.text
    refused(web.post("/topics", {"name": "T" * 200, "queues": "4"}), 400, "limit is 127")
    refused(web.get("/groups/" + urllib.parse.quote("<i>g", safe="")), 400,
            "not a valid group name", "&lt;i&gt;g")
    page = web.get("/connections?group=" + urllib.parse.quote('"><svg onload=x>'))
    refused(page, 400, "&#34;&gt;&lt;svg onload=x&gt;")


def test_bad_numbers_times_and_ids_are_refused(guarded: str) -> None:
    web = logged_in(guarded)
    refused(web.post("/topics", {"name": "DashBad", "queues": "many"}), 400,
            "the number of queues must be a whole number")
    refused(web.post("/topics", {"name": "DashBad", "queues": "0"}), 400, "between 1 and")
    refused(web.post(f"/topics/{TOPIC}/update", {"read_queues": "4", "write_queues": "-2",
                                                 "perm": "6", "message_type": "NORMAL"}),
            400, "write queues must be between")
    refused(web.post(f"/topics/{TOPIC}/update", {"read_queues": "4", "write_queues": "4",
                                                 "perm": "7", "message_type": "NORMAL"}),
            400, "permission must be 2")
    refused(web.post(f"/topics/{TOPIC}/update", {"read_queues": "4", "write_queues": "4",
                                                 "perm": "6", "message_type": "LOUD"}),
            400, "message type must be one of")
    refused(web.post(f"/groups/{STOPPED_GROUP}/reset", {"topic": TOPIC, "time": "yesterday"}),
            400, "not a time", "yesterday")
    refused(web.post(f"/groups/{STOPPED_GROUP}/reset", {"topic": TOPIC}), 400,
            "the field 'time' is required")
    refused(web.get(f"/messages?by=time&topic={TOPIC}&begin=1900-01-01T00:00"
                    f"&end=2024-05-01T00:00"), 400, "out of range")
    refused(web.get(f"/messages?by=time&topic={TOPIC}&begin=soon&end=later"), 400,
            "not a time")
    refused(web.get(f"/messages?by=time&topic={TOPIC}&begin=2024-05-02T00:00"
                    f"&end=2024-05-01T00:00"), 400, "before its start")
    refused(web.get("/messages?by=shape"), 400, "search by time, key or id")
    refused(web.get("/messages/not-an-id"), 400, "not a message id")
    refused(web.get("/messages?by=id&id=12345"), 400, "not a message id")
    refused(web.post(f"/groups/{FAILING_GROUP}/resend", {"msg_id": "<x>"}), 400,
            "not a message id", "&lt;x&gt;")
    refused(web.post(f"/topics/{TOPIC}/delete", {"confirm": "wrong"}), 400,
            "type the topic's name")
    refused(web.post("/topics", {"name": TOPIC, "queues": "4"}), 409, "exists already")


def test_a_message_body_and_keys_are_shown_escaped(dashboard: str, cluster: Cluster) -> None:
    web = Browser(dashboard)
    page = web.get(f"/messages/{cluster.ids['html-body']}?topic={TOPIC}")
    assert page.status == 200, page.text[:3000]
    assert '<script>alert("body")' not in page.text
    assert "&lt;script&gt;alert(&#34;body&#34;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" \
        in page.text
    found = web.get(f"/messages?by=key&topic={TOPIC}&key=order-3")
    assert cluster.ids["order-3"] in found.text


def test_a_reset_to_a_time_out_of_range_is_refused_before_it_runs(guarded: str,
                                                                  cluster: Cluster) -> None:
    web = logged_in(guarded)
    # One more message in POISON: FAILING_GROUP (offline) lags by it, so a reset shows.
    cluster.admin(lambda a: a.send_message(POISON, b"one more", keys="poison-late"))

    def lag() -> int:
        return cluster.admin(lambda a: a.consumer_progress(FAILING_GROUP, POISON)).total_lag

    before = lag()
    assert before >= 1
    for when, words in [("99999999999999999", "the time is out of range"),
                        ("9999-12-31T23:59:59-05:00", "the time is out of range"),
                        ("1969-12-31T23:59:59", "the time is out of range"),
                        ("0001-01-01T00:00", "the time is out of range"),
                        ("10000-01-01T00:00", "the time is not a time"),
                        ("9" * 5000, "longer than 1024 characters")]:
        page = web.post(f"/groups/{FAILING_GROUP}/reset", {"topic": POISON, "time": when})
        refused(page, 400, words)
    assert lag() == before
    page = web.post(f"/groups/{FAILING_GROUP}/reset", {"topic": POISON,
                                                      "time": "9999-12-31T23:59:59"})
    assert page.status == 303, page.text[:3000]
    assert "reset to 9999-12-31 23:59:59 UTC" in html.unescape(web.get(page.headers[
        "Location"]).text)
    assert lag() == 0


def test_changes_need_the_session_csrf_token(guarded: str) -> None:
    web = logged_in(guarded)
    for path, form in CHANGES:
        refused(web.post(path, form, csrf=False), 403, "Reload the page")
        refused(web.post(path, {**form, "csrf": "x" * 43}, csrf=False), 403)
    refused(web.get("/topics/DashOrders/delete"), 405, "forms")
    assert "DashNever" not in web.get("/topics").text
    assert TOPIC in web.get("/topics").text


def test_with_a_user_file_everything_needs_a_login(guarded: str) -> None:
    web = Browser(guarded)
    page = web.get("/groups")
    assert page.status == 303 and page.headers["Location"] == "/login?next=%2Fgroups"
    refused(web.post("/topics", {"name": "DashGuarded", "queues": "1"}), 401,
            "Log in to make changes")
    refused(web.post("/login", {"username": USER, "password": "wrong one"}), 401,
            "Wrong user name or password")
    refused(web.post("/login", {"username": "mallory", "password": PASSWORD}), 401,
            "Wrong user name or password")
    refused(web.post("/login", {"username": USER, "password": PASSWORD}, csrf=False), 403)
    page = web.post("/login", {"username": USER, "password": PASSWORD, "next": "/groups"})
    assert page.status == 303 and page.headers["Location"] == "/groups"
    assert f'<span id="user">{USER}</span>' in web.get("/cluster").text
    page = web.post("/login", {"username": USER, "password": PASSWORD,
                               "next": "https://elsewhere.example/"})
    assert page.headers["Location"] == "/"
    page = web.post("/topics", {"name": "DashGuarded", "queues": "1",
                                "message_type": "NORMAL"})
    assert page.status == 303 and page.headers["Location"] == "/topics/DashGuarded"
    assert "DashGuarded" in web.get("/topics").text
    assert web.post("/logout", {}).status == 303
    assert web.get("/topics").status == 303


def test_acl_credentials_without_a_user_file_are_refused(tmp_path) -> None:
    proc = subprocess.run([*ROCKETQ, "dashboard", "--port", "0", "--access-key", "ak",
                           "--secret-key", "sk"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "give it a user file with --users PATH" in proc.stderr
    proc = subprocess.run([*ROCKETQ, "standalone", "--data-dir", str(tmp_path),
                           "--acl-file", str(tmp_path / "plain_acl.yml"),
                           "--dashboard-port", "0"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert "--dashboard-users PATH" in proc.stderr


ACL = """
globalWhiteRemoteAddresses:
accounts:
  - accessKey: dash-admin
    secretKey: dash-admin-secret
    admin: true
"""


def test_with_the_acl_on_it_signs_with_its_credentials(tmp_path) -> None:
    from .conftest import Process, free_port, small_conf

    (tmp_path / "plain_acl.yml").write_text(ACL)
    users = tmp_path / "users"
    added = subprocess.run([*ROCKETQ, "dashboard", "add-user", USER, "--users", str(users)],
                           input=PASSWORD, capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    ns_port = free_port()
    standalone = Process(["standalone", "--data-dir", str(tmp_path / "data"),
                          "--namesrv-port", str(ns_port), "--broker-port", str(free_port()),
                          "--grpc-port", "0", "-c", small_conf(tmp_path),
                          "--acl-file", str(tmp_path / "plain_acl.yml"),
                          "--dashboard-port", "0", "--dashboard-users", str(users)],
                         tmp_path / "standalone.log", "connect clients")
    dashboards = [standalone.url(r"dashboard on (http://[^\s]+/)")]
    signed = Process(["dashboard", "--namesrv", f"127.0.0.1:{ns_port}", "--port", "0",
                      "--users", str(users), "--access-key", "dash-admin",
                      "--secret-key", "dash-admin-secret"], tmp_path / "signed.log",
                     "rocketq dashboard on")
    unsigned = Process(["dashboard", "--namesrv", f"127.0.0.1:{ns_port}", "--port", "0"],
                       tmp_path / "unsigned.log", "rocketq dashboard on")
    try:
        for i, url in enumerate([*dashboards, signed.url()]):
            web = Browser(url)
            assert web.post("/login", {"username": USER, "password": PASSWORD}).status == 303
            created = web.post("/topics", {"name": f"DashAcl{i}", "queues": "2",
                                           "message_type": "NORMAL"})
            assert created.status == 303, created.text[:3000]
            page = web.get("/topics")
            assert page.status == 200 and f"DashAcl{i}" in page.text
        refused(Browser(unsigned.url()).get("/topics"), 400, "The cluster refused")
    finally:
        for process in (unsigned, signed, standalone):
            assert process.stop() == 0, process.log.read_text()[-3000:]


def test_topic_and_group_forms_change_the_cluster(guarded: str) -> None:
    web = logged_in(guarded)
    made = web.post("/topics", {"name": "DashShort", "queues": "4", "message_type": "NORMAL"})
    assert made.status == 303 and made.headers["Location"] == "/topics/DashShort"
    changed = web.post("/topics/DashShort/update", {"read_queues": "4", "write_queues": "2",
                                                    "perm": "4", "message_type": "DELAY"})
    assert changed.status == 303
    page = html.unescape(web.get("/topics/DashShort").text)
    assert "Topic DashShort updated." in page
    for fact in ("<dt>Permission</dt><dd>R--</dd>", "<dt>Message type</dt><dd>DELAY</dd>",
                 "<dt>Write queues</dt><dd>2</dd>"):
        assert fact in page
    assert web.post("/topics/DashShort/delete", {"confirm": "DashShort"}).status == 303
    refused(web.get("/topics/DashShort"), 404, "no topic DashShort")

    assert web.post("/groups", {"name": "dash-made"}).status == 303
    assert web.post("/groups/dash-made/update", {"retry_max_times": "3"}).status == 303
    page = web.get("/groups/dash-made").text
    assert "Group dash-made updated." in page
    assert "<dt>Retries before the DLQ</dt><dd>3</dd>" in page
    assert "<dt>Consumes</dt><dd>no</dd>" in page  # its box was left unticked
    assert web.post("/groups/dash-made/delete", {"confirm": "dash-made"}).status == 303
    refused(web.get("/groups/dash-made"), 404, "no consumer group dash-made")
