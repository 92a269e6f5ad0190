"""The ACL admin requests of a broker (RocketMQ 4.x's AdminBrokerProcessor, over its
PlainAccessValidator): accounts of ``plain_acl.yml`` created, changed and deleted, the global
white list replaced, and the file's accounts and version read.

- UPDATE_AND_CREATE_ACL_CONFIG (50): the header is RocketMQ's CreateAccessConfigRequestHeader
  (``accessKey``, ``secretKey``, ``whiteRemoteAddress``, ``admin``, ``defaultTopicPerm``,
  ``defaultGroupPerm``, ``topicPerms`` and ``groupPerms`` comma-separated). A field left out
  keeps the account's value (RocketMQ's Java header always carries ``admin``).
- DELETE_ACL_CONFIG (51): ``accessKey``.
- UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53): ``globalWhiteAddrs``, comma-separated.
- GET_BROKER_CLUSTER_ACL_INFO (52): the file's ``version`` (its dataVersion) and the broker's
  name, address and cluster in the response header.
- GET_BROKER_CLUSTER_ACL_CONFIG (54): ``{"globalWhiteAddrs": [...], "plainAccessConfigs":
  [...]}``, every account with its secret key; only admins may ask (acl/check.py).

The broker reloads the file when it changes, so writing the file is the update
(``acl/edit.py``); it is also reloaded at once here, so that the answer means the change is in
force. The file is read, changed and written (with its fsync) on a worker thread, one change
at a time, so that the event loop goes on serving meanwhile. A file broken by hand is
reported by where it stops being YAML, never by its text (which may hold secret keys). A
broker without ``aclEnable`` refuses them all: it has no accounts to change. Only a signed
admin account may send them, from any address (``acl/check.py`` ``ACL_CODES``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from ...acl import AccessControl
from ...acl.edit import (
    AclUpdateError,
    data_version,
    read_acl_data,
    with_account,
    with_global_white,
    without_account,
    write_acl_data,
)
from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...remoting import Connection
from ..config import BrokerConfig

log = logging.getLogger("rocketq.broker")

Handler = Callable[[Connection, RemotingCommand], Any]


def _split(text: str | None) -> list[str] | None:
    """RocketMQ's UtilAll.split on ``,``: None stays None (keep), blank is an empty list."""
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def _account_json(raw: dict[str, Any]) -> dict[str, Any]:
    """An account of the file as RocketMQ's PlainAccessConfig JSON."""
    return {"accessKey": str(raw.get("accessKey") or ""),
            "secretKey": str(raw.get("secretKey") or ""),
            "whiteRemoteAddress": str(raw.get("whiteRemoteAddress") or ""),
            "admin": raw.get("admin") is True or str(raw.get("admin")).lower() == "true",
            "defaultTopicPerm": str(raw.get("defaultTopicPerm") or "DENY"),
            "defaultGroupPerm": str(raw.get("defaultGroupPerm") or "DENY"),
            "topicPerms": [str(p) for p in raw.get("topicPerms") or []],
            "groupPerms": [str(p) for p in raw.get("groupPerms") or []]}


class AclRequests:
    """Serves the ACL admin requests over the broker's AccessControl (None: ACL off)."""

    def __init__(self, acl: AccessControl | None, config: BrokerConfig,
                 address: Callable[[], str]) -> None:
        self.acl = acl
        self.config = config
        self.address = address  # the broker's address, once it listens
        self._changing = asyncio.Lock()  # one read-change-write of the file at a time

    def handlers(self) -> dict[int, Handler]:
        """The request handlers to add to the broker's table."""
        return {RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: self.update_account,
                RequestCode.DELETE_ACL_CONFIG: self.delete_account,
                RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: self.update_global_white,
                RequestCode.GET_BROKER_CLUSTER_ACL_INFO: self.version_info,
                RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG: self.acl_config}

    def _off(self, cmd: RemotingCommand, code: int) -> RemotingCommand:
        return cmd.response(code, remark=f"the ACL of broker {self.config.brokerName} is off "
                                         "(aclEnable=false): it has no accounts to read or "
                                         "change")

    async def _change(self, cmd: RemotingCommand, failed: int, what: str,
                      change: Callable[[dict[str, Any]], dict[str, Any]]) -> RemotingCommand:
        """Read the file, apply ``change``, write it and take it up; a refusal is answered
        ``failed`` with the reason, and leaves the file as it was."""
        acl = self.acl
        if acl is None:
            return self._off(cmd, failed)
        path = acl.path

        def rewrite() -> None:
            write_acl_data(path, change(read_acl_data(path)))

        async with self._changing:
            try:
                await asyncio.to_thread(rewrite)
            except AclUpdateError as exc:
                return cmd.response(failed, remark=f"{what} refused: {exc}")
            except (OSError, ValueError) as exc:  # AclFileError's words quote nothing of it
                log.error("%s: %s cannot be changed: %s", what, path, exc)
                return cmd.response(failed, remark=f"{what} failed, the ACL file is "
                                                   f"unchanged: {exc}")
            acl.reload_if_changed()
        log.info("%s (%s)", what, path)
        return cmd.response()

    async def update_account(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_ACL_CONFIG: create the account, or change the fields given."""
        ext = cmd.ext_fields
        access_key = ext.get("accessKey") or ""
        fields: dict[str, Any] = {
            "accessKey": access_key, "secretKey": ext.get("secretKey") or None,
            "whiteRemoteAddress": ext.get("whiteRemoteAddress"),
            "defaultTopicPerm": ext.get("defaultTopicPerm") or None,
            "defaultGroupPerm": ext.get("defaultGroupPerm") or None,
            "topicPerms": _split(ext.get("topicPerms")),
            "groupPerms": _split(ext.get("groupPerms"))}
        if ext.get("admin") is not None:
            fields["admin"] = str(ext["admin"]).strip().lower() == "true"
        return await self._change(cmd, ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
                                  f"account {access_key} updated by {conn.peer[0]}",
                                  lambda data: with_account(data, fields))

    async def delete_account(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DELETE_ACL_CONFIG: remove the account."""
        access_key = cmd.ext_fields.get("accessKey") or ""
        return await self._change(cmd, ResponseCode.DELETE_ACL_CONFIG_FAILED,
                                  f"account {access_key} deleted by {conn.peer[0]}",
                                  lambda data: without_account(data, access_key))

    async def update_global_white(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: replace globalWhiteRemoteAddresses."""
        addresses = _split(cmd.ext_fields.get("globalWhiteAddrs") or "") or []
        return await self._change(cmd, ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
                                  f"global white list set to {addresses} by {conn.peer[0]}",
                                  lambda data: with_global_white(data, addresses))

    def _data(self, cmd: RemotingCommand) -> dict[str, Any] | RemotingCommand:
        if self.acl is None:
            return self._off(cmd, ResponseCode.SYSTEM_ERROR)
        try:
            return read_acl_data(self.acl.path)
        except (OSError, ValueError) as exc:
            log.error("%s cannot be read: %s", self.acl.path, exc)
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"the ACL file cannot be read: {exc}")

    def version_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CLUSTER_ACL_INFO: the file's version and where it is."""
        data = self._data(cmd)
        if isinstance(data, RemotingCommand):
            return data
        return cmd.response(ResponseCode.SUCCESS, {
            "version": orjson.dumps(data_version(data)).decode(),
            "brokerName": self.config.brokerName, "brokerAddr": self.address(),
            "clusterName": self.config.brokerClusterName})

    def acl_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CLUSTER_ACL_CONFIG: the global white list and every account."""
        data = self._data(cmd)
        if isinstance(data, RemotingCommand):
            return data
        white = data.get("globalWhiteRemoteAddresses") or []
        accounts = [a for a in data.get("accounts") or [] if isinstance(a, dict)]
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({
            "globalWhiteAddrs": [str(w) for w in ([white] if isinstance(white, str) else white)
                                 if w is not None],
            "plainAccessConfigs": [_account_json(a) for a in accounts]}))
