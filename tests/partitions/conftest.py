"""The partition tests' network: a fresh one per test, checked to leave nothing behind."""

from __future__ import annotations

import pytest

from .net import Network, Unavailable, leftovers


@pytest.fixture
def net():
    try:
        network = Network().__enter__()
    except Unavailable as exc:  # a container without the rights to make a bridge
        pytest.skip(str(exc))
    try:
        yield network
    finally:
        network.close()
    assert not leftovers(), "the network left namespaces or links behind"
