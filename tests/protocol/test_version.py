"""MQVersion numbers and names, as RocketMQ's table gives them."""

from __future__ import annotations

import pytest

from rocketq.protocol import CURRENT_VERSION
from rocketq.protocol.version import VERSION_NAMES, version_name, version_number


@pytest.mark.parametrize(("number", "name"), [
    (0, "V3_0_0_SNAPSHOT"), (15, "V3_0_0_FINAL"), (16, "V3_0_1_SNAPSHOT"), (17, "V3_0_1"),
    (45, "V3_0_15"), (46, "V3_1_0_SNAPSHOT"), (86, "V3_3_1_SNAPSHOT"),
    (212, "V4_0_0_SNAPSHOT"), (232, "V4_1_0_SNAPSHOT"), (401, "V4_9_4"), (409, "V4_9_8"),
    (412, "V5_0_0_SNAPSHOT"), (441, "V5_1_4"), (475, "V5_3_1"), (479, "V5_3_3"),
    (611, "V5_9_9"), (612, "HIGHER_VERSION"),
])
def test_numbers_and_names(number, name):
    assert version_name(number) == name
    assert version_number(name) == number


def test_the_ends_of_the_table():
    assert len(VERSION_NAMES) == len(set(VERSION_NAMES)) == 613
    assert version_name(10_000) == "HIGHER_VERSION"
    assert version_name(-1) == "UNKNOWN"
    assert version_name(CURRENT_VERSION).startswith("V")
    with pytest.raises(ValueError, match="V9_9_9"):
        version_number("V9_9_9")
