"""RocketMQ's version numbers (MQVersion): every request carries one (``version``), and a
client's heartbeat names its own; admin tools show it by name, ``V4_9_8``.

The number is the index of the name in RocketMQ's ``MQVersion.Version`` enum. The enum is
regular after its first sixteen names (3.0.0's pre-releases): a ``_SNAPSHOT`` then the
release, for 3.0.1 to 3.0.15, 3.1.0 to 3.2.9, 3.3.1 to 3.9.9 (no x.y.0 there), 4.0.0 to
5.9.9, and ``HIGHER_VERSION`` last. It is built here from that rule rather than listed; a
test pins numbers RocketMQ's table gives (``V4_9_8`` is 409, ``V5_3_3`` 479).
"""

from __future__ import annotations

_FIRST = ("V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1", "V3_0_0_BETA1", "V3_0_0_BETA2", "V3_0_0_BETA3",
          "V3_0_0_BETA4", "V3_0_0_BETA5", "V3_0_0_BETA6_SNAPSHOT", "V3_0_0_BETA6",
          "V3_0_0_BETA7_SNAPSHOT", "V3_0_0_BETA7", "V3_0_0_BETA8_SNAPSHOT", "V3_0_0_BETA8",
          "V3_0_0_BETA9_SNAPSHOT", "V3_0_0_BETA9", "V3_0_0_FINAL")


def _releases() -> list[str]:
    releases = [f"3_0_{patch}" for patch in range(1, 16)]
    releases += [f"3_{minor}_{patch}" for minor in (1, 2) for patch in range(10)]
    releases += [f"3_{minor}_{patch}" for minor in range(3, 10) for patch in range(1, 10)]
    releases += [f"{major}_{minor}_{patch}" for major in (4, 5) for minor in range(10)
                 for patch in range(10)]
    return releases


#: Every name of RocketMQ's MQVersion.Version, by its number.
VERSION_NAMES: tuple[str, ...] = (
    *_FIRST, *(name for release in _releases()
               for name in (f"V{release}_SNAPSHOT", f"V{release}")), "HIGHER_VERSION")
_NUMBERS = {name: number for number, name in enumerate(VERSION_NAMES)}


def version_name(value: int) -> str:
    """The name of version number ``value`` (MQVersion.getVersionDesc): ``V4_9_8`` for 409;
    numbers past the table are ``HIGHER_VERSION``, as RocketMQ names them, and negative ones
    (no version sent) ``UNKNOWN``."""
    if value < 0:
        return "UNKNOWN"
    return VERSION_NAMES[min(value, len(VERSION_NAMES) - 1)]


def version_number(name: str) -> int:
    """The number of a version name (``V5_3_3`` -> 479); ValueError for a name RocketMQ does
    not have."""
    try:
        return _NUMBERS[name]
    except KeyError:
        raise ValueError(f"not a RocketMQ version name: {name!r}") from None
