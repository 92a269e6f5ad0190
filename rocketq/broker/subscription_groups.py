"""Subscription groups of a broker (RocketMQ's SubscriptionGroupManager): per consumer group,
whether it may consume, how its retries go, and which broker serves it. Persisted as
``config/subscriptionGroup.json`` in RocketMQ's shape, with a DataVersion.

A group is created with RocketMQ's defaults the first time a consumer of it heartbeats or pulls,
unless ``autoCreateSubscriptionGroup`` is false; ``updateSubGroup`` (200) creates or changes one,
201 lists them, 207 deletes one (the requests: broker/admin/groups.py). Every field of a request
is checked before anything changes, and the table changes in memory only once its new state is
on disk.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from ..protocol import JAVA_INT_MAX, JAVA_LONG_MAX
from ..protocol.topic import SYS_GROUP_PREFIX, SYSTEM_GROUPS
from .config import BrokerConfig
from .topics import MAX_QUEUE_NUMS, DataVersion, save_versioned

log = logging.getLogger("rocketq.broker")

GROUP_MAX_LENGTH = 255
_LEGAL = re.compile(r"^[%|a-zA-Z0-9_-]+$")
#: The most queues a retry topic may have: the bound rocketq puts on any topic's queues.
MAX_RETRY_QUEUES = MAX_QUEUE_NUMS


class GroupConfigError(ValueError):
    """A subscription group config that RocketMQ's rules refuse; the message names the field."""


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """One group's settings, with RocketMQ's defaults (SubscriptionGroupConfig)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    #: Attempts before a message goes to the group's DLQ, when the consumer does not say.
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5's FIFO group: POP consumers get a queue's next messages only once the
    #: ones out are acked (the 5.x clients' ``fifo`` setting comes from it).
    consume_message_orderly: bool = False

    def to_json(self) -> dict[str, Any]:
        return {_JSON_NAMES[k]: v for k, v in asdict(self).items()}

    @property
    def max_reconsume_times(self) -> int:
        """The reconsume count from which a send-back, or a send to the group's retry topic,
        goes to the DLQ when the request carries no maxReconsumeTimes: retryMaxTimes as it is.
        RocketMQ's broker compares it unchanged, so 0 and -1 both send the first failure to the
        DLQ; -1 means "16" only to a consumer's own maxReconsumeTimes, never to the broker."""
        return self.retry_max_times


#: Field -> RocketMQ's JSON name, and the bounds of the integer fields.
_JSON_NAMES = {
    "group_name": "groupName", "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable", "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes", "broker_id": "brokerId",
    "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
    "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
    "consume_message_orderly": "consumeMessageOrderly",
}
_INT_BOUNDS = {"retryQueueNums": (0, MAX_RETRY_QUEUES), "retryMaxTimes": (-1, JAVA_INT_MAX),
               "brokerId": (0, JAVA_LONG_MAX), "whichBrokerWhenConsumeSlowly": (0, JAVA_LONG_MAX)}


def validate_group(name: Any) -> str:
    """The group name, if RocketMQ accepts it (the rules of topic names, 255 characters)."""
    if not isinstance(name, str) or not name.strip():
        raise GroupConfigError("groupName is empty")
    if len(name) > GROUP_MAX_LENGTH:
        raise GroupConfigError(
            f"groupName is {len(name)} characters long; the limit is {GROUP_MAX_LENGTH}")
    if not _LEGAL.fullmatch(name):  # fullmatch: '$' alone would let a final newline pass
        raise GroupConfigError(f"groupName {name[:60]!r} contains illegal characters; allowed "
                               "are letters, digits, '%', '|', '_' and '-'")
    return name


def group_config_from_json(data: Any, base: SubscriptionGroupConfig | None = None
                           ) -> SubscriptionGroupConfig:
    """A config from SubscriptionGroupConfig JSON (an updateSubGroup body), every field checked:
    booleans must be JSON booleans, integers JSON integers within their Java type and
    RocketMQ's meaning. Fields left out keep ``base``'s values, or the defaults. Fields rocketq
    does not know (5.x's groupRetryPolicy, attributes, ...) are ignored."""
    if not isinstance(data, Mapping):
        raise GroupConfigError("the body is not a SubscriptionGroupConfig JSON object")
    name = validate_group(data.get("groupName", base.group_name if base else None))
    values: dict[str, Any] = {"group_name": name}
    for field_name, json_name in _JSON_NAMES.items():
        if field_name == "group_name" or json_name not in data:
            continue
        value = data[json_name]
        if json_name in _INT_BOUNDS:
            low, high = _INT_BOUNDS[json_name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise GroupConfigError(f"{json_name} is not an integer: {str(value)[:40]!r}")
            if not low <= value <= high:
                raise GroupConfigError(
                    f"{json_name} is {str(value)[:40]}; it must be within {low}..{high}")
        elif not isinstance(value, bool):
            raise GroupConfigError(f"{json_name} is not a boolean: {str(value)[:40]!r}")
        values[field_name] = value
    if base is not None:
        return SubscriptionGroupConfig(**{**asdict(base), **values})
    return SubscriptionGroupConfig(**values)


class SubscriptionGroupTable:
    """The subscription groups of a broker, saved before they change."""

    def __init__(self, config: BrokerConfig, config_dir: str) -> None:
        self.config = config
        self.path = os.path.join(config_dir, "subscriptionGroup.json")
        self.lock = threading.RLock()
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self._load()
        missing = {g: SubscriptionGroupConfig(g) for g in SYSTEM_GROUPS if g not in self.groups}
        if missing:
            with self.lock:
                self._change(missing)

    def _load(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as fh:
            data = orjson.loads(fh.read())
        for name, cfg in (data.get("subscriptionGroupTable") or {}).items():
            try:
                self.groups[name] = group_config_from_json(cfg)
            except GroupConfigError as exc:
                raise GroupConfigError(f"{self.path}: group {name!r}: {exc}") from None
        version = data.get("dataVersion") or {}
        self.data_version = DataVersion(int(version.get("counter", 0)),
                                        int(version.get("stateVersion", 0)),
                                        int(version.get("timestamp", 0)))

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.groups.get(group)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with the defaults when the broker allows it
        (``autoCreateSubscriptionGroup``, or a ``CID_RMQ_SYS_`` group), else None. RocketMQ's
        findSubscriptionGroupConfig. A group whose name is illegal is not created; one whose
        creation cannot be saved (a full disk) is created in memory only, as RocketMQ's is,
        so that consumption goes on: it has only defaults, is saved with the table's next
        change, and is created again after a restart."""
        cfg = self.groups.get(group)
        if cfg is not None or not (self.config.autoCreateSubscriptionGroup
                                   or group.startswith(SYS_GROUP_PREFIX)):
            return cfg
        try:
            cfg = SubscriptionGroupConfig(validate_group(group))
        except GroupConfigError:
            return None
        with self.lock:
            existing = self.groups.get(group)
            if existing is not None:
                return existing
            try:
                self._change({group: cfg})
            except OSError as exc:
                log.warning("subscription group %s created in memory only: %s cannot be "
                            "saved: %s", group, self.path, exc)
                self.groups = {**self.groups, group: cfg}
        return cfg

    def notifies(self, group: str) -> bool:
        """Whether the members of ``group`` are told when a consumer joins or leaves it
        (notifyConsumerIdsChangedEnable; true for a group not in the table, as in RocketMQ)."""
        cfg = self.groups.get(group)
        return cfg is None or cfg.notify_consumer_ids_changed_enable

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        """Create or change a group. Raises OSError, leaving the table as it was, when the new
        table cannot be saved."""
        with self.lock:
            self._change({cfg.group_name: cfg})

    def delete(self, group: str) -> bool:
        with self.lock:
            if group not in self.groups:
                return False
            self._change({group: None})
            return True

    def wrapper(self) -> dict[str, Any]:
        """SubscriptionGroupWrapper: the table and its DataVersion (what 201 answers)."""
        with self.lock:
            return {"subscriptionGroupTable": {n: g.to_json() for n, g in self.groups.items()},
                    "dataVersion": self.data_version.to_json()}

    def take_all(self, table: dict[str, Any]) -> None:
        """Make this table the master's (a slave's sync); OSError if it cannot be saved,
        GroupConfigError on a group config that is not one."""
        theirs = {name: group_config_from_json(cfg) for name, cfg in table.items()}
        with self.lock:
            changes: dict[str, SubscriptionGroupConfig | None] = {
                name: cfg for name, cfg in theirs.items()
                if self.groups.get(name) is None
                or self.groups[name].to_json() != cfg.to_json()}
            changes.update({name: None for name in self.groups if name not in theirs})
            if changes:
                self._change(changes)

    def _change(self, changes: dict[str, SubscriptionGroupConfig | None]) -> None:
        """Save the table with ``changes`` (None removes a group) and the next DataVersion,
        then make them in memory; a failed save raises and changes nothing."""
        self.groups = save_versioned(self.path, "subscriptionGroupTable", self.groups, changes,
                                     self.data_version, SubscriptionGroupConfig.to_json)
