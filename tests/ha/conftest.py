from __future__ import annotations

import pytest

from ..servers import ServerThread


@pytest.fixture
def st(tmp_path):
    """A NameServer on an event loop thread, for brokers the test starts; all stopped after."""
    servers = ServerThread(tmp_path)
    try:
        servers.start_namesrv()
        yield servers
    finally:
        servers.stop()
