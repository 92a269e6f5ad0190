"""The metrics port: prometheus_client's ASGI application on ``/metrics`` (families picked with
``name[]=``, gzip and OpenMetrics when the scraper asks for them), served by uvicorn on the
process's own event loop (``rocketq.asgi``).

Why not prometheus_client's ``start_http_server``: its thread would read the broker's tables
while the event loop changes them. Served on the loop, a scrape sees them between two
requests, and nothing needs a lock. The collectors only read counters and sizes, so a scrape
holds the loop for about as long as a handful of requests do.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, make_asgi_app

from ..asgi import AsgiServer

_INDEX = (b"<html><head><title>rocketq metrics</title></head><body>"
          b"<p><a href=\"/metrics\">/metrics</a>: Prometheus metrics of this process.</p>"
          b"</body></html>\n")


async def _answer(send: Any, status: int, body: bytes, *extra: tuple[bytes, bytes]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html; charset=utf-8"), *extra]})
    await send({"type": "http.response.body", "body": body})


def metrics_app(registry: CollectorRegistry, path: str = "/metrics") -> Any:
    """An ASGI application: ``registry`` on GET or HEAD of ``path``, a short page on ``/``,
    404 elsewhere, 405 to other methods."""
    scrape = make_asgi_app(registry)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] not in (path, "/"):
            await _answer(send, 404, b"Not Found\n")
        elif scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, b"Method Not Allowed\n", (b"allow", b"GET, HEAD"))
        elif scope["path"] == "/":
            await _answer(send, 200, _INDEX)
        else:
            await scrape(scope, receive, send)
    return app


class MetricsServer(AsgiServer):
    """Serves ``registry`` on ``host:port`` (port 0: any free one) while started."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0,
                 path: str = "/metrics") -> None:
        super().__init__(metrics_app(registry, path), host, port, lifespan=False)
        self.registry = registry
        self.path = path

    @property
    def url(self) -> str:
        """Where the metrics are served: ``http://host:port/metrics``."""
        return super().url.rstrip("/") + self.path
