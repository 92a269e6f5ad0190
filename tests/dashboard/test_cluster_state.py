"""What the Cluster and broker pages say of brokers that refuse sends, of brokers gone from the
NameServer's list, and of the day's counts across a master's death: real brokers and a real
NameServer on a loop thread, the dashboard served in this process, read over HTTP."""

from __future__ import annotations

import re
import time
import urllib.parse
from typing import Any

import pytest

from rocketq import Message, Producer
from rocketq.client.admin import AsyncAdmin
from rocketq.dashboard import create_app

from ..broker.test_disk_full import fill_to, small_disk
from ..conftest import wait_for
from ..servers import ServerThread
from .conftest import Browser


@pytest.fixture
def servers(tmp_path: Any):
    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        yield st
    finally:
        st.stop()


def dashboard(serve: Any, st: ServerThread) -> Browser:
    return Browser(serve(create_app(AsyncAdmin(st.namesrv), interval=60, close_admin=True)))


def facts(page: str) -> dict[str, str]:
    """The Cluster page's totals: title -> figure."""
    return {dt: dd for dt, dd in re.findall(
        r"<dt[^>]*>([^<]+)</dt><dd>([^<]*)</dd>", page.split('id="totals"')[1].split("</dl>")[0])}


def broker_path(address: str) -> str:
    return "/brokers/" + urllib.parse.quote(address, safe="")


def test_a_broker_over_the_disk_warning_level_says_it_refuses_sends(tmp_path, serve,
                                                                     servers) -> None:
    disk = tmp_path / "disk"
    with small_disk(disk, "16m"):
        broker = servers.start_broker(
            storePathRootDir=str(disk), mappedFileSizeCommitLog=1 << 20,
            mappedFileSizeConsumeQueue=20 * 256, maxHashSlotNum=64, maxIndexNum=256,
            cleanFileForciblyEnable="false", cleanResourceInterval=100)
        web = dashboard(serve, servers)
        page = web.get("/cluster").text
        assert "refusing sends" not in page and ">taken<" in page
        fill_to(disk, 95)
        assert wait_for(lambda: broker.store.refusal is not None, 5)
        info = broker.runtime_info()
        assert info["writeable"] == "false"
        assert "over diskSpaceWarningLevelRatio=90" in info["notWriteableReason"]
        page = web.get("/cluster").text
        notice = re.search(r"broker-a \(([^)]+)\) is refusing sends: ([^<]+)</p>", page)
        assert notice, page
        assert notice.group(1) == broker.address
        assert "disk is full" in notice.group(2) and "% used, over " in notice.group(2)
        assert "diskSpaceWarningLevelRatio=90" in notice.group(2)
        assert ">refused<" in page
        page = web.get(broker_path(broker.address)).text
        found = re.search(r'id="state">Refusing sends: ([^<]+)</p>', page)
        assert found and "diskSpaceWarningLevelRatio=90" in found.group(1), page


def test_a_broker_without_write_permission_says_it_refuses_sends(serve, servers) -> None:
    broker = servers.start_broker(brokerPermission=4)  # read only
    assert broker.runtime_info()["writeable"] == "false"
    web = dashboard(serve, servers)
    page = web.get("/cluster").text
    assert "is refusing sends: brokerPermission=4 forbids writes" in page, page
    assert "Refusing sends: brokerPermission=4 forbids writes" in web.get(
        broker_path(broker.address)).text


def test_a_replica_gone_from_the_namesrv_is_still_expected(
        tmp_path, serve, servers) -> None:
    servers.start_broker("broker-a", storePathRootDir=str(tmp_path / "m0"))
    slaves = [servers.start_broker("broker-a", brokerId=i, brokerRole="SLAVE",
                                   storePathRootDir=str(tmp_path / f"s{i}")) for i in (1, 2)]
    servers.create_topic("Counted", 2)
    web = dashboard(serve, servers)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(7):
            producer.send(Message("Counted", b"before %d" % i))
    totals = facts(web.get("/cluster").text)
    assert totals["Brokers answering"] == "3 of 3", totals
    assert totals["Produced today"] == "7", totals
    # A replica goes: the NameServer no longer lists it, the dashboard still expects it.
    gone = slaves[1]
    servers.stop_broker(gone)
    assert wait_for(lambda: len(servers.call(_listed(servers.namesrv))) == 2, 10, 0.1)
    page = web.get("/cluster").text
    assert facts(page)["Brokers answering"] == "2 of 3"
    assert f"{gone.address}</a></td>" in page
    assert "not registered with the NameServer any more" in page
    assert "not registered with the NameServer" in web.get(broker_path(gone.address)).text
    assert facts(page)["Produced today"] == "7"


def test_produced_today_keeps_what_a_dead_master_counted(tmp_path, serve, servers) -> None:
    master = servers.start_broker("broker-a", storePathRootDir=str(tmp_path / "m0"))
    servers.start_broker("broker-a", brokerId=1, brokerRole="SLAVE",
                         storePathRootDir=str(tmp_path / "s1"))
    servers.create_topic("Counted", 2)
    web = dashboard(serve, servers)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for i in range(7):
            producer.send(Message("Counted", b"before %d" % i))
    assert facts(web.get("/cluster").text)["Produced today"] == "7"
    # The master goes and another takes its place (a new process, another address): what
    # the old one produced today still counts, and the new one's counts are added.
    servers.stop_broker(master)
    servers.start_broker("broker-a", storePathRootDir=str(tmp_path / "m1"))
    servers.create_topic("Counted", 2)
    with Producer("pg2", namesrv=servers.namesrv) as producer:
        for i in range(3):
            producer.send(Message("Counted", b"after %d" % i))
    totals = facts(web.get("/cluster").text)
    assert totals["Brokers answering"] == "2 of 3", totals
    assert totals["Produced today"] == "10", totals


async def _listed(namesrv: str) -> list[Any]:
    async with AsyncAdmin(namesrv) as admin:
        return await admin.cluster()


def test_the_book_counts_each_broker_process_and_forgets_at_midnight_and_after_a_day(
        ) -> None:
    from rocketq.client.admin.cluster import BrokerStatus
    from rocketq.dashboard.brokers import FORGET_AFTER, BrokerBook

    def status(address: str, boot: str, put: int) -> BrokerStatus:
        return BrokerStatus("c", "broker-a", 0, address, "ASYNC_MASTER", runtime={
            "bootTimestamp": boot, "msgPutTotalTodayNow": str(put),
            "msgPutTotalTodayMorning": "0"})

    now = [time.mktime((2026, 3, 1, 12, 0, 0, 0, 0, -1))]
    book = BrokerBook(clock=lambda: now[0])
    book.update([status("h:1", "1", 5)])
    # Restarted at the same address: a new process, whose count starts again.
    book.update([status("h:1", "2", 2)])
    assert book.today() == (7, 0)
    now[0] += 13 * 3600  # past midnight: yesterday's counts go, the gone broker stays
    listed = book.update([])
    assert book.today() == (0, 0)
    assert [b.address for b in listed] == ["h:1"] and "not registered" in listed[0].error
    now[0] += FORGET_AFTER
    assert book.update([]) == []
