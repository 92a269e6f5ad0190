"""Scraping over real HTTP, parsed as Prometheus parses it."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str, timeout: float = 10) -> dict[str, list]:
    """Every sample of the exposition at ``url``, by sample name (``rocketmq_messages_in_total``,
    ``rocketmq_rpc_latency_count``, ...)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list], name: str, **labels: str) -> float | None:
    """The value of the one sample named ``name`` whose labels include ``labels``; None when
    there is none."""
    found = [s.value for s in samples.get(name, ())
             if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def total(samples: dict[str, list], name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(s.value for s in samples.get(name, ())
               if all(s.labels.get(k) == v for k, v in labels.items()))


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + count):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise OSError("no free consecutive ports")
