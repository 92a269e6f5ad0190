"""The subscription group admin requests (RocketMQ's AdminBrokerProcessor over its
SubscriptionGroupManager): UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, mqadmin ``updateSubGroup``)
creates or changes a group, GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) lists them (what slaves
copy), DELETE_SUBSCRIPTIONGROUP (207) deletes one, with its offsets when ``removeOffset`` says
so. Every field of a request is checked before anything changes; the table itself is
broker/subscription_groups.py.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import orjson

from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...remoting import Connection
from ..offsets.table import ConsumerOffsets
from ..subscription_groups import GroupConfigError, SubscriptionGroupTable, group_config_from_json

Handler = Callable[[Connection, RemotingCommand], RemotingCommand]


def subscription_group_handlers(table: SubscriptionGroupTable, offsets: ConsumerOffsets
                                ) -> dict[int, Handler]:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) and
    DELETE_SUBSCRIPTIONGROUP (207) over the broker's table (and its offsets, for 207's
    ``removeOffset``)."""
    return {
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: functools.partial(_update, table),
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: functools.partial(_get_all, table),
        RequestCode.DELETE_SUBSCRIPTIONGROUP: functools.partial(_delete, table, offsets),
    }


def _update(table: SubscriptionGroupTable, conn: Connection, cmd: RemotingCommand
            ) -> RemotingCommand:
    try:
        data = orjson.loads(cmd.body) if cmd.body else None
    except orjson.JSONDecodeError:
        try:  # orjson refuses integers beyond 64 bits; the check below names their field
            data = json.loads(cmd.body)
        except (ValueError, RecursionError) as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                remark=f"the body is not SubscriptionGroupConfig JSON: {exc}")
    try:
        cfg = group_config_from_json(data)
    except GroupConfigError as exc:
        return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
    return _saved(cmd, table.update, cfg)


def _saved(cmd: RemotingCommand, change: Callable[[Any], Any], arg: Any) -> RemotingCommand:
    """Answer a change of the table: SUCCESS, or SYSTEM_ERROR when it could not be saved (and
    so was not made)."""
    try:
        change(arg)
    except OSError as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"the subscription groups cannot be saved, nothing changed: "
                                   f"{exc}")
    return cmd.response()


def _get_all(table: SubscriptionGroupTable, conn: Connection, cmd: RemotingCommand
             ) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(table.wrapper()))


def _delete(table: SubscriptionGroupTable, offsets: ConsumerOffsets, conn: Connection,
            cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.field("groupName") or ""
    if not group:
        return cmd.response(ResponseCode.INVALID_PARAMETER,
                            remark="the request lacks the field 'groupName'")
    answer = _saved(cmd, table.delete, group)
    if answer.code == ResponseCode.SUCCESS and cmd.bool_field("removeOffset"):
        offsets.remove_group(group)
        offsets.persist(force=True)
    return answer
