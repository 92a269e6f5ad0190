"""``rocketmq_rpc_latency``: how long a server took to answer each request, by request code
and response code (RocketMQ's RemotingMetricsManager), from the remoting server's observer
hook.

The server times a request only while an exporter is attached (``set_observer``); each
answer adds one to a bucket of a small list per label set, and the histogram is built from
those lists when Prometheus asks. Oneway requests are not timed: they get no answer.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import Metric

from ..protocol import RequestCode
from .labels import Node, flag, request_code, response_code

#: RocketMQ's bucket bounds for rocketmq_rpc_latency, in milliseconds.
LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
#: Requests whose answer a broker may hold until a message arrives: ``is_long_polling`` is
#: true for one whose handler held it.
LONG_POLLING_CODES = frozenset({RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE,
                                RequestCode.POP_MESSAGE})


class RpcLatency:
    """The latencies of one server's answers, kept as bucket counts per (request code,
    response code, long polling, written); ``observe`` is the server's observer."""

    def __init__(self, node: Node) -> None:
        self.node = node
        #: key -> [count per bucket..., count past the last bucket, sum in ms]
        self.table: dict[tuple[int, int, bool, bool], list[float]] = {}

    def observe(self, code: int, response: int, seconds: float, held: bool,
                written: bool) -> None:
        """One request answered (the ``remoting.Observer`` signature)."""
        key = (code, response, held and code in LONG_POLLING_CODES, written)
        row = self.table.get(key)
        if row is None:
            row = self.table[key] = [0] * (len(LATENCY_BUCKETS_MS) + 1) + [0.0]
        ms = seconds * 1000.0
        row[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        row[-1] += ms

    def collect(self) -> Iterator[Metric]:
        node = self.node
        family = node.histogram(
            "rocketmq_rpc_latency", "Time from a request's arrival to its answer being "
            "written, in milliseconds", "protocol_type", "request_code", "response_code",
            "is_long_polling", "result")
        for (code, response, long_polling, written), row in list(self.table.items()):
            node.add_histogram(family, ["remoting", request_code(code),
                                        response_code(response, code),
                                        flag(long_polling),
                                        "success" if written else "write_channel_failed"],
                               LATENCY_BUCKETS_MS, row[:-1], row[-1])  # type: ignore[arg-type]
        yield family
