from __future__ import annotations

import pytest

from rocketq.store import MessageStore, MessageStoreConfig


def small_config(root, **overrides) -> MessageStoreConfig:
    """A store config with files small enough that tests cross file boundaries."""
    values = dict(
        storePathRootDir=str(root),
        mappedFileSizeCommitLog=64 * 1024,
        mappedFileSizeConsumeQueue=20 * 100,
        maxMessageSize=16 * 1024,
        maxHashSlotNum=1024,
        maxIndexNum=4096,
        flushIntervalCommitLog=50,
        flushIntervalConsumeQueue=50,
    )
    values.update(overrides)
    return MessageStoreConfig(**values)


@pytest.fixture
def config(tmp_path):
    return small_config(tmp_path / "store")


@pytest.fixture
def store(config):
    s = MessageStore(config)
    yield s
    s.close()
