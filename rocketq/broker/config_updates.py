"""The broker config changes UPDATE_BROKER_CONFIG makes while the broker runs: each change
checked (known key, one of ``RUNTIME_KEYS``, a value in range) before any is made, set on
the live configs, and kept in ``<storePathRootDir>/config/broker.properties``, which the
next start applies over ``broker.conf`` so that a change survives a restart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..store.config import MessageStoreConfig, _convert
from .config import BrokerConfig, field_types
from .files import write_atomically
from .properties import parse_properties
from .runtime_keys import RUNTIME_KEYS
from .unknown_keys import nearest_key

#: Where the changes made with UPDATE_BROKER_CONFIG are kept, under ``storePathRootDir``. At
#: start they are applied over the ``broker.conf`` values, so a change survives a restart.
OVERRIDES_FILE = os.path.join("config", "broker.properties")


class ConfigUpdateError(ValueError):
    """A broker config change that cannot be made. ``static`` says the keys exist but are
    read only at start (answered NO_PERMISSION, as RocketMQ answers the keys of its
    configBlackList)."""

    def __init__(self, message: str, *, static: bool = False) -> None:
        super().__init__(message)
        self.static = static


def check_settings(values: dict[str, str]) -> dict[str, Any]:
    """Convert and check the ``key=value`` pairs of a config change, all of them before
    anything changes. Returns the typed values; raises ConfigUpdateError naming every key
    that is unknown, or else every key that cannot change while the broker runs, or else
    the first value that does not convert or is out of range."""
    types = field_types()
    unknown = sorted(k for k in values if k not in types)
    if unknown:
        named = []
        for key in unknown:
            near = nearest_key(key, types)
            named.append(f"{key} (did you mean {near}?)" if near else key)
        raise ConfigUpdateError(f"unknown config key(s): {', '.join(named)}")
    static = sorted(k for k in values if k not in RUNTIME_KEYS)
    if static:
        raise ConfigUpdateError(
            f"config key(s) {', '.join(static)} cannot change while the broker runs; set "
            "them in broker.conf and restart the broker", static=True)
    checked: dict[str, Any] = {}
    for key, raw in values.items():
        try:
            value = _convert(key, types[key], raw.strip())
        except ValueError as exc:
            raise ConfigUpdateError(f"bad value for {key}: {exc}") from None
        bounds = RUNTIME_KEYS[key]
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise ConfigUpdateError(
                f"bad value for {key}: {value} is outside {bounds[0]}..{bounds[1]}")
        if key == "namesrvAddr":
            _check_namesrv_addr(value)
        if key == "deleteWhen":
            hours = [h.strip() for h in value.split(";")]
            if not hours or not all(h.isdigit() and 0 <= int(h) <= 23 for h in hours):
                raise ConfigUpdateError(
                    f"bad value for deleteWhen: {value!r} is not hours of the day (0..23) "
                    "separated by ';'")
        checked[key] = value
    return checked


def _check_namesrv_addr(value: str) -> None:
    """``host:port`` addresses separated by ``;`` (RocketMQ's form; rocketq also takes
    ``,``), at least one."""
    addrs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise ConfigUpdateError("bad value for namesrvAddr: no NameServer address")
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigUpdateError(
                f"bad value for namesrvAddr: {addr!r} is not host:port")


def apply_settings(config: BrokerConfig, store_config: MessageStoreConfig,
                   values: dict[str, Any]) -> None:
    """Set checked values on the live configs (a key both have, such as maxMessageSize, on
    both)."""
    for key, value in values.items():
        if hasattr(config, key):
            setattr(config, key, value)
        if hasattr(store_config, key):
            setattr(store_config, key, value)


def _render(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def overrides_path(store_config: MessageStoreConfig) -> str:
    """``<storePathRootDir>/config/broker.properties``."""
    return os.path.join(store_config.storePathRootDir, OVERRIDES_FILE)


def save_overrides(path: str, values: dict[str, Any]) -> None:
    """Add ``values`` to the saved changes (replacing a key saved before), atomically: a
    failure raises OSError and leaves the file as it was."""

    saved = parse_properties(Path(path).read_text(encoding="utf-8")) \
        if os.path.exists(path) else {}
    saved.update({k: _render(v) for k, v in values.items()})
    text = "".join(f"{k}={v}\n" for k, v in sorted(saved.items()))
    write_atomically(path, ("# Changes made with updateBrokerConfig; applied over broker.conf "
                         "at start.\n" + text).encode())


def load_overrides(config: BrokerConfig, store_config: MessageStoreConfig) -> dict[str, Any]:
    """Apply the saved changes of an earlier run over the ``broker.conf`` values; returns
    them. A file with a key or value that would be refused today raises ValueError naming
    the file, so that the broker does not start with settings nobody chose."""
    path = overrides_path(store_config)
    values: dict[str, Any] = {}
    if os.path.exists(path):
        try:
            values = check_settings(parse_properties(Path(path).read_text(encoding="utf-8")))
        except ConfigUpdateError as exc:
            raise ValueError(f"{path}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                             ) from None
        apply_settings(config, store_config, values)
    # The store reads enableControllerMode too (it recovers only up to the confirm offset):
    # a broker built in code whose BrokerConfig alone says so must not recover as a plain one.
    store_config.enableControllerMode |= config.enableControllerMode
    return values
