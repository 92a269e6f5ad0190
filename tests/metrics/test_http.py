"""The metrics port: what it answers, and that clients sending garbage, too much or nothing
cost it nothing but their own connection."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from rocketq.metrics import Exporter, MetricsServer
from rocketq.protocol import RemotingCommand, RequestCode, ResponseCode
from rocketq.remoting import RemotingClient

from ..conftest import run_async


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("rocketq_test_things", "Things", registry=reg).inc(3)
    Counter("rocketq_test_others", "Others", registry=reg).inc(1)
    return reg


def raw(port: int, data: bytes, timeout: float = 5) -> bytes:
    """Send ``data`` on a fresh connection; everything the server answers until it closes."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:  # closed on us while we still sent
            pass
        return out


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_answers_scrapes_and_survives_bad_clients():
    async def main():
        server = MetricsServer(registry(), "127.0.0.1", 0)
        await server.start()
        port = server.port
        try:
            status, headers, body = await asyncio.to_thread(get, server.url)
            assert status == 200 and headers["Content-Type"].startswith("text/plain")
            names = {f.name for f in text_string_to_metric_families(body.decode())}
            assert {"rocketq_test_things", "rocketq_test_others"} <= names
            # Families picked by name, gzip, OpenMetrics: as prometheus_client serves them.
            status, _, body = await asyncio.to_thread(
                get, server.url + "?name[]=rocketq_test_things_total")
            assert b"rocketq_test_things_total 3.0" in body and b"others" not in body
            status, headers, body = await asyncio.to_thread(get, server.url,
                                                            **{"Accept-Encoding": "gzip"})
            assert headers["Content-Encoding"] == "gzip"
            assert b"rocketq_test_things_total" in gzip.decompress(body)
            _, headers, body = await asyncio.to_thread(
                get, server.url, Accept="application/openmetrics-text; version=1.0.0")
            assert headers["Content-Type"].startswith("application/openmetrics-text")
            assert body.endswith(b"# EOF\n")
            # Other paths and methods.
            assert (await asyncio.to_thread(get, f"http://127.0.0.1:{port}/nope"))[0] == 404
            assert (await asyncio.to_thread(get, f"http://127.0.0.1:{port}/"))[0] == 200
            answer = await asyncio.to_thread(
                raw, port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                           b"Connection: close\r\n\r\nabc")
            assert answer.startswith(b"HTTP/1.1 405 ") and b"allow: get, head" in answer.lower()
            answer = await asyncio.to_thread(
                raw, port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
            head, _, rest = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ") and rest == b""
            # Not HTTP, malformed, too long: refused (uvicorn's parser), and the port serves on.
            for bad in (b"\x16\x03\x01 hello\r\n\r\n", b"GET /metrics SPDY/3\r\n\r\n",
                        b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
                        b"GET /metrics HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                        b"GET /" + b"a" * (1 << 20) + b" HTTP/1.1\r\n\r\n"):
                answer = await asyncio.to_thread(raw, port, bad)
                assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), (bad[:40], answer)
                assert (await asyncio.to_thread(get, server.url))[0] == 200
            # A client that connects and says nothing, and one that sends half a request,
            # do not hold up the scrapes meanwhile.
            idle = socket.create_connection(("127.0.0.1", port))
            half = socket.create_connection(("127.0.0.1", port))
            half.sendall(b"GET /metrics HTTP/1.1\r\nHost")
            for _ in range(3):
                assert (await asyncio.to_thread(get, server.url))[0] == 200
            # Several requests on one connection (keep-alive), as Prometheus scrapes.
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            for _ in range(3):
                await asyncio.to_thread(conn.request, "GET", "/metrics")
                response = await asyncio.to_thread(conn.getresponse)
                assert response.status == 200 and response.read()
            conn.close()
            idle.close()
            half.close()
        finally:
            await server.stop()
        with pytest.raises(OSError):
            await asyncio.to_thread(get, server.url)
    run_async(main())


def test_a_collector_that_fails_answers_500_and_the_next_scrape_works():
    class Flaky:
        calls = 0

        def collect(self):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("boom")
            return []

    async def main():
        reg = registry()
        reg.register(Flaky())  # type: ignore[arg-type]
        server = MetricsServer(reg, "127.0.0.1", 0)
        await server.start()
        try:
            assert (await asyncio.to_thread(get, server.url))[0] == 500
            assert (await asyncio.to_thread(get, server.url))[0] == 200
        finally:
            await server.stop()
    run_async(main())


def test_a_busy_port_is_an_error_that_names_it():
    async def main():
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            server = MetricsServer(registry(), "127.0.0.1", taken.getsockname()[1])
            with pytest.raises(OSError):
                await server.start()
    run_async(main())


def test_names_asked_for_pick_the_exporters_families(cluster):
    async def main():
        await cluster.start_namesrv()
        broker = await cluster.start_broker()
        exporter = Exporter("127.0.0.1", 0)
        exporter.add_broker(broker)
        exporter.add_namesrv(cluster.namesrvs[0])
        await exporter.start()
        try:
            client = RemotingClient()
            r = await client.invoke(broker.address, RemotingCommand.request(
                RequestCode.GET_BROKER_RUNTIME_INFO))  # one request timed
            assert r.code == ResponseCode.SUCCESS
            await client.close()
            every = await asyncio.to_thread(get, exporter.url)
            assert b"rocketmq_topic_number" in every[2] and b"process_cpu" in every[2]
            # Sample names (prometheus_client's filter), a family's name for all of its
            # samples, and the process collector's: each exactly what was asked for.
            status, _, body = await asyncio.to_thread(
                get, exporter.url + "?name[]=rocketmq_topic_number"
                "&name[]=rocketmq_rpc_latency_count&name[]=rocketmq_broker_tps"
                "&name[]=process_open_fds")
            assert status == 200
            samples = {s.name for f in text_string_to_metric_families(body.decode())
                       for s in f.samples}
            assert samples == {"rocketmq_topic_number", "rocketmq_rpc_latency_count",
                               "rocketmq_broker_tps", "process_open_fds"}
            _, _, body = await asyncio.to_thread(
                get, exporter.url + "?name[]=rocketmq_rpc_latency")
            samples = {s.name for f in text_string_to_metric_families(body.decode())
                       for s in f.samples}
            assert samples == {"rocketmq_rpc_latency_bucket", "rocketmq_rpc_latency_count",
                               "rocketmq_rpc_latency_sum"}
            _, _, body = await asyncio.to_thread(get, exporter.url + "?name[]=nothing_such")
            assert list(text_string_to_metric_families(body.decode())) == []
        finally:
            await exporter.stop()
            await cluster.stop()
    run_async(main())
