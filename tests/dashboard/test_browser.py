"""The dashboard as a person sees it, in headless Chromium: every page against a standalone
broker with traffic (read-only, without a user file), the forms that change things (logged
in, with a user file), and logins. A screenshot of each page goes
to $ROCKETQ_SCREENSHOTS (or the test's temporary directory)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .conftest import (
    FAILING_GROUP,
    HTML_BODY,
    LATE,
    LIVE_GROUP,
    PASSWORD,
    PRODUCER_GROUP,
    STOPPED_GROUP,
    TOPIC,
    USER,
    Cluster,
)

pytestmark = pytest.mark.slow

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                 "google-chrome"))), None)
DRIVER = shutil.which("chromedriver")
#: Messages in TOPIC: 20 orders, one with HTML in its body, LATE sent after the group stopped.
STORED = 21 + LATE


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("Chromium or chromedriver is not installed (make test-deps installs "
                    "Debian's chromium and chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    where = os.environ.get("ROCKETQ_SCREENSHOTS")
    path = pathlib.Path(where) if where else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def all_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def until(check: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def click(driver: Any, selector: str) -> None:
    """Click what ``selector`` finds and wait for the page it leads to."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    for attempt in range(3):
        page = css(driver, "html")
        try:
            css(driver, selector).click()
            break
        except (StaleElementReferenceException, WebDriverException) as exc:
            # Chromium now and then loses a node found an instant before ("does not belong
            # to the document") on a loaded machine: find it again.
            if attempt == 2 or ("stale" not in str(exc) and "document" not in str(exc)):
                raise
    WebDriverWait(driver, 15).until(expected_conditions.staleness_of(page))
    WebDriverWait(driver, 15).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def fill(driver: Any, form: str, values: dict[str, str]) -> None:
    """Type ``values`` into the fields of ``form`` (a CSS selector) and submit it. When
    Chromium loses the form's nodes meanwhile ("does not belong to the document", seen on a
    loaded machine), the form is found and filled again, up to five times."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    for attempt in range(5):
        try:
            for name, value in values.items():
                field = css(driver, f"{form} [name={name}]")
                if field.tag_name == "select":
                    from selenium.webdriver.support.select import Select

                    Select(field).select_by_visible_text(value)
                elif field.get_attribute("type") == "datetime-local":
                    driver.execute_script("arguments[0].value = arguments[1]", field, value)
                else:
                    field.clear()
                    field.send_keys(value)
            click(driver, f"{form} button[type=submit]")
            return
        except (StaleElementReferenceException, WebDriverException) as exc:
            if attempt == 4 or ("stale" not in str(exc) and "document" not in str(exc)):
                raise
            time.sleep(0.3)


def notice(driver: Any) -> str:
    return " ".join(n.text for n in all_css(driver, ".notice"))


def column(driver: Any, table: str, index: int) -> list[str]:
    return [row.find_elements("css selector", "td")[index].text
            for row in all_css(driver, f"{table} tbody tr")
            if len(row.find_elements("css selector", "td")) > index]


def log_in(driver: Any, base: str) -> None:
    """Log in as USER with the login form (loaded again, up to three times, when Chromium on a
    loaded machine shows the page without it)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    for _ in range(3):
        driver.get(f"{base}/login")
        try:
            WebDriverWait(driver, 10).until(lambda d: all_css(d, "#login [name=username]"))
            break
        except TimeoutException:
            continue
    assert all_css(driver, "#login [name=username]"), driver.page_source[:2000]
    fill(driver, "#login", {"username": USER, "password": PASSWORD})
    assert css(driver, "#user").text == USER


def test_a_person_reads_the_cluster(browser: Any, dashboard: str, cluster: Cluster,
                                    shots: pathlib.Path) -> None:
    base = dashboard.rstrip("/")

    def chart_drawn() -> bool:
        browser.get(f"{base}/cluster")
        return bool(all_css(browser, "#tps-chart svg polyline"))

    until(chart_drawn, "the TPS chart")
    assert "broker-a" in column(browser, "#brokers", 1)
    assert any("MASTER" in role for role in column(browser, "#brokers", 4))
    browser.save_screenshot(str(shots / "cluster.png"))

    browser.get(f"{base}/topics")
    assert TOPIC in column(browser, "#topics", 0)
    # Without a user file: read-only, and no form to change anything.
    assert css(browser, "#read-only").text == "read-only"
    assert not all_css(browser, "#create-topic")
    assert "--users FILE" in css(browser, ".hint.read-only").text
    browser.save_screenshot(str(shots / "topics.png"))
    click(browser, f'#topics a[href="/topics/{TOPIC}"]')
    assert css(browser, "#topic-name").text == TOPIC
    assert len(column(browser, "#queues", 0)) == 4
    assert sum(map(int, column(browser, "#queues", 3))) == STORED
    assert not all_css(browser, "form[method=post]")
    browser.save_screenshot(str(shots / "topic.png"))

    browser.get(f"{base}/groups")
    lags = dict(zip(column(browser, "#groups", 0), column(browser, "#groups", 5), strict=True))
    assert lags[STOPPED_GROUP] == str(LATE)
    browser.save_screenshot(str(shots / "groups.png"))
    click(browser, f'#groups a[href="/groups/{STOPPED_GROUP}"]')
    assert css(browser, "#total-lag").text == str(LATE)
    assert "No member online" in css(browser, "#members").text
    assert sum(map(int, column(browser, "#progress", 5))) == LATE
    until(lambda: browser.get(browser.current_url) or all_css(browser, "#lag-chart polyline"),
          "the lag chart")
    browser.save_screenshot(str(shots / "group.png"))

    browser.get(f"{base}/connections?group={STOPPED_GROUP}")
    assert "None online" in css(browser, "#consumers").text
    browser.get(f"{base}/connections")
    fill(browser, "#connections-form", {"group": LIVE_GROUP})
    [language] = column(browser, "#consumers", 2)
    assert language == "PYTHON" and column(browser, "#consumers", 3)[0].startswith("V")
    browser.save_screenshot(str(shots / "connections.png"))
    fill(browser, "#connections-form", {"group": PRODUCER_GROUP})
    assert len(column(browser, "#producers", 0)) == 1

    browser.get(f"{base}/messages")
    fill(browser, "#by-key", {"topic": TOPIC, "key": "order-3"})
    assert column(browser, "#results", 0) == [cluster.ids["order-3"]]
    browser.save_screenshot(str(shots / "messages.png"))
    click(browser, "#results tbody a")
    assert json.loads(css(browser, "#body").text) == {"id": 3}
    assert css(browser, "#msg-keys").text == "order-3"
    statuses = dict(zip(column(browser, "#trace", 0), column(browser, "#trace", 1),
                        strict=True))
    assert statuses[LIVE_GROUP] == "CONSUMED"
    assert statuses[STOPPED_GROUP] == "NOT_ONLINE"
    browser.save_screenshot(str(shots / "message.png"))

    browser.get(f"{base}/messages/{cluster.ids['html-body']}?topic={TOPIC}")
    assert css(browser, "#body").text == HTML_BODY
    assert not all_css(browser, "#body b")  # shown as text, not markup


def test_a_person_changes_things(browser: Any, guarded: str, cluster: Cluster,
                                 shots: pathlib.Path) -> None:
    base = guarded.rstrip("/")
    log_in(browser, base)
    browser.get(f"{base}/topics")
    fill(browser, "#create-topic", {"name": "DashCreated", "queues": "2",
                                    "message_type": "FIFO"})
    assert "Topic DashCreated created" in notice(browser)
    browser.get(f"{base}/topics")
    rows = dict(zip(column(browser, "#topics", 0), column(browser, "#topics", 4), strict=True))
    assert rows["DashCreated"] == "FIFO"

    browser.get(f"{base}/topics/DashCreated")
    fill(browser, "#send-message", {"tags": "t", "keys": "form-key",
                                    "body": "hello from the form"})
    assert "Test message sent" in notice(browser)
    click(browser, "#sent a")
    assert css(browser, "#body").text == "hello from the form"

    # A reset to a time before the first message: the group will read everything again.
    browser.get(f"{base}/groups/{STOPPED_GROUP}")
    fill(browser, "#reset-offset", {"topic": TOPIC, "time": "2001-01-01T00:00:00"})
    assert f"Offsets of {STOPPED_GROUP} in {TOPIC} reset" in notice(browser)
    assert css(browser, "#total-lag").text == str(STORED)
    assert set(column(browser, "#progress", 4)) == {"0"}
    browser.save_screenshot(str(shots / "group-reset.png"))
    fill(browser, "#skip-accumulated", {"topic": TOPIC})
    assert "skipped" in notice(browser)
    assert css(browser, "#total-lag").text == "0"

    browser.get(f"{base}/groups/{FAILING_GROUP}")
    dead = column(browser, "#dlq", 0)
    assert sorted(dead) == sorted(cluster.dead)
    browser.save_screenshot(str(shots / "dlq.png"))
    resent = column(browser, "#dlq", 0)[0]
    click(browser, "#dlq tbody tr:first-child button")
    assert f"resent to {FAILING_GROUP}" in notice(browser)
    browser.get(f"{base}/messages")  # it waits in the group's retry topic
    fill(browser, "#by-time", {"topic": f"%RETRY%{FAILING_GROUP}"})
    assert column(browser, "#results", 0) == [resent]


def test_a_change_needs_a_login_with_a_user_file(browser: Any, guarded: str,
                                                 shots: pathlib.Path) -> None:
    base = guarded.rstrip("/")
    browser.delete_all_cookies()
    browser.get(f"{base}/topics")
    assert "/login" in browser.current_url
    browser.save_screenshot(str(shots / "login.png"))
    fill(browser, "#login", {"username": USER, "password": "not the password"})
    assert "Wrong user name or password" in css(browser, "#login-problem").text
    fill(browser, "#login", {"username": USER, "password": PASSWORD})
    assert browser.current_url == f"{base}/topics"
    assert css(browser, "#user").text == USER
    fill(browser, "#create-topic", {"name": "DashAfterLogin", "queues": "1"})
    assert "Topic DashAfterLogin created" in notice(browser)
    click(browser, "header form button")
    assert "/login" in browser.current_url
    browser.get(f"{base}/topics/DashAfterLogin")
    assert "/login" in browser.current_url
