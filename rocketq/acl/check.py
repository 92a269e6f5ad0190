"""Which permissions a request needs, and the check a broker or NameServer makes of every
request before serving it (RocketMQ's PlainAccessValidator, PlainPermissionManager).

The order is RocketMQ's: a globally white-listed address passes; otherwise the request must
name a known AccessKey; an address white-listed for that account passes; otherwise the
signature must be right, admin codes need an admin account, and every topic and group the
request touches needs its permission. Except for the ACL's own requests (``ACL_CODES``): they
can rewrite the accounts and read every secret key, so they need a signed admin account from
any address, white-listed or not.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from ..protocol import RemotingCommand, RequestCode, ResponseCode, fastjson, is_retry_topic
from ..protocol.topic import RETRY_GROUP_TOPIC_PREFIX
from .plain import PUB, SUB, AclConfigError, PlainAcl, allows, load_plain_acl, perm_name
from .signature import ACCESS_KEY, SIGNATURE, verify

log = logging.getLogger("rocketq.acl")

#: Codes only an admin account may send to a broker: RocketMQ's Permission.ADMIN_CODE, and
#: the other codes that change a broker's state for everyone.
BROKER_ADMIN_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
    RequestCode.DELETE_SUBSCRIPTIONGROUP, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
    # The ACL's own, reading the accounts (with their secret keys) included.
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
})
#: The ACL admin requests: always a signed admin account, the white lists notwithstanding.
ACL_CODES = frozenset({
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, RequestCode.DELETE_ACL_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
})
#: Codes only an admin account may send to a NameServer: registering brokers and changing
#: routes or KV config.
NAMESRV_ADMIN_CODES = frozenset({
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV, RequestCode.PUT_KV_CONFIG,
    RequestCode.DELETE_KV_CONFIG, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
})

#: Codes only an admin account may send to a controller: the ones that change what it keeps
#: or decides (joining a group, heartbeats that keep a master's lease, asking for an election,
#: changing the SyncStateSet). Its reads need a signed account too, admin or not.
CONTROLLER_ADMIN_CODES = frozenset({
    RequestCode.BROKER_HEARTBEAT, RequestCode.CONTROLLER_REGISTER_BROKER,
    RequestCode.CONTROLLER_ELECT_MASTER, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
})

_SENDS = {RequestCode.SEND_MESSAGE: ("topic",), RequestCode.SEND_REPLY_MESSAGE: ("topic",),
          RequestCode.SEND_MESSAGE_V2: ("b",), RequestCode.SEND_BATCH_MESSAGE: ("b",),
          RequestCode.SEND_REPLY_MESSAGE_V2: ("b",), RequestCode.SINK_PREPARE: ("topic",)}


def needed_perms(cmd: RemotingCommand) -> Iterator[tuple[str, bool, int]]:
    """``(name, is_group, permission)`` for each topic and group the request touches, as
    RocketMQ maps them (PlainAccessResource.parse), plus batch, reply and lite-pull sends and
    offset queries, which RocketMQ leaves unchecked. A retry topic ``%RETRY%g`` stands for
    the group ``g``."""
    ext = cmd.ext_fields
    code = cmd.code
    if code in _SENDS:
        topic = ext.get(_SENDS[code][0], "")
        # A consumer sending back to its retry topic needs SUB on its group.
        yield _resource(topic, SUB if is_retry_topic(topic) else PUB)
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        yield _resource(ext.get("topic", ""), SUB)
        yield ext.get("consumerGroup", ""), True, SUB
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        yield ext.get("group", ""), True, SUB
        yield _resource(ext.get("originTopic", ""), PUB)
    elif code == RequestCode.QUERY_MESSAGE:
        yield _resource(ext.get("topic", ""), SUB)
    elif code == RequestCode.HEART_BEAT:
        for data in _heartbeat_consumers(cmd.body):
            yield str(data.get("groupName", "")), True, SUB
            for sub in data.get("subscriptionDataSet") or ():
                if isinstance(sub, dict):
                    yield _resource(str(sub.get("topic", "")), SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        if ext.get("consumerGroup"):
            yield ext["consumerGroup"], True, SUB
    elif code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET,
                  RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE,
                  RequestCode.CHANGE_MESSAGE_INVISIBLETIME):
        yield ext.get("consumerGroup", ""), True, SUB
        yield _resource(ext.get("topic", ""), SUB)
    elif code == RequestCode.BATCH_ACK_MESSAGE:
        for ack in _batch_acks(cmd.body):
            yield str(ack.get("c", "")), True, SUB
            yield _resource(str(ack.get("t", "")), SUB)


def _resource(topic: str, perm: int) -> tuple[str, bool, int]:
    if is_retry_topic(topic):
        return topic[len(RETRY_GROUP_TOPIC_PREFIX):], True, perm
    return topic, False, perm


def _batch_acks(body: bytes) -> list[dict[str, Any]]:
    """The entries of a BATCH_ACK_MESSAGE body (``{"acks": [{"c": group, "t": topic, ...}]}``);
    none when it is not that (the broker's handler refuses it with the reason)."""
    try:
        data = orjson.loads(body or b"")
    except orjson.JSONDecodeError:
        try:
            data = fastjson.loads(body or b"")  # as the broker's handler reads it
        except ValueError:
            return []
    acks = data.get("acks") if isinstance(data, dict) else None
    return [a for a in acks or () if isinstance(a, dict)]


def _heartbeat_consumers(body: bytes) -> list[dict[str, Any]]:
    if not body:
        return []
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            data = fastjson.loads(body)
        except ValueError:
            return []  # the broker's own handler refuses it with the reason
    consumers = data.get("consumerDataSet") if isinstance(data, dict) else None
    return [c for c in consumers or () if isinstance(c, dict)]


class AccessDenied(Exception):
    """A request the ACL refuses; the message says what was refused and why, ``reason`` which
    check refused it: ``unsigned``, ``unknown_access_key``, ``no_signature``,
    ``bad_signature``, ``not_admin`` or ``no_permission``."""

    def __init__(self, message: str, reason: str = "no_permission") -> None:
        super().__init__(message)
        self.reason = reason


class AccessControl:
    """The ACL of one server: ``plain_acl.yml`` kept loaded and reloaded when it changes.

    ``admin_codes`` are the request codes that need an admin account on this server.
    """

    #: Seconds between looks at the file (RocketMQ's watcher looks every 500 ms).
    WATCH_INTERVAL = 0.5
    #: Refusals remembered for logging once each; past this many the memory starts over.
    MAX_LOGGED = 10_000

    def __init__(self, path: str | os.PathLike[str], admin_codes: frozenset[int]) -> None:
        self.path = os.fspath(path)
        self.admin_codes = admin_codes
        self.acl: PlainAcl = load_plain_acl(self.path)  # AclConfigError: refuse to start
        self._stamp = self._file_stamp()
        self._logged: set[tuple[str, str, str]] = set()
        #: Requests refused, by AccessDenied.reason (remoting and gRPC alike).
        self.refused: dict[str, int] = {}
        self._watch_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ the file
    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def reload_if_changed(self) -> bool:
        """Load the file again if it changed; a broken file is logged and the accounts in
        force stay as they were. Returns whether new accounts took effect."""
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        if stamp is None:
            log.error("the ACL file %s is gone; the accounts loaded before stay in force",
                      self.path)
            return False
        try:
            self.acl = load_plain_acl(self.path)
        except AclConfigError as exc:
            log.error("%s; the accounts loaded before stay in force", exc)
            return False
        self._logged.clear()
        log.info("reloaded %s: %d account(s)", self.path, len(self.acl.accounts))
        return True

    def start_watching(self) -> None:
        """Reload the file whenever it changes, until :meth:`stop_watching`."""
        async def watch() -> None:
            while True:
                await asyncio.sleep(self.WATCH_INTERVAL)
                self.reload_if_changed()
        self._watch_task = asyncio.get_running_loop().create_task(watch())

    async def stop_watching(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            try:
                await self._watch_task
            except asyncio.CancelledError:
                pass
            self._watch_task = None

    # ------------------------------------------------------------------ checking
    def check(self, cmd: RemotingCommand, host: str) -> None:
        """Raise AccessDenied unless the request from ``host`` may be served."""
        signed = cmd.ext_fields.get(SIGNATURE)
        always_signed = cmd.code in ACL_CODES
        self.check_access(host, cmd.ext_fields.get(ACCESS_KEY), signed,
                          lambda secret: verify(secret, cmd),
                          always_signed or cmd.code in self.admin_codes,
                          f"request code={cmd.code}", lambda: needed_perms(cmd),
                          always_signed=always_signed)

    def check_access(self, host: str, access_key: str | None, signed: str | None,
                     verify_with: Callable[[str], bool], admin: bool, what: str,
                     perms: Callable[[], Iterable[tuple[str, bool, int]]], *,
                     always_signed: bool = False) -> None:
        """The check of any request, whatever carries it (a remoting command, a gRPC call):
        from ``host``, by ``access_key``, carrying the signature ``signed`` that
        ``verify_with(secret key)`` checks, needing an admin account when ``admin``, and
        ``perms()``: ``(name, is_group, permission)`` of each topic and group it touches.
        With ``always_signed`` no white list lets it skip the signature and admin checks.
        Raises AccessDenied."""
        try:
            self._check_access(host, access_key, signed, verify_with, admin, what, perms,
                               always_signed)
        except AccessDenied as exc:
            self.refused[exc.reason] = self.refused.get(exc.reason, 0) + 1
            raise

    def _check_access(self, host: str, access_key: str | None, signed: str | None,
                      verify_with: Callable[[str], bool], admin: bool, what: str,
                      perms: Callable[[], Iterable[tuple[str, bool, int]]],
                      always_signed: bool) -> None:
        acl = self.acl
        if not always_signed:
            for pattern in acl.global_white:
                if pattern.matches(host):
                    return
        if not access_key:
            hint = (" of an admin account (no white list passes the ACL's own requests)"
                    if always_signed else "")
            raise AccessDenied("the request is not signed (no AccessKey): give the client "
                               f"credentials{hint}", "unsigned")
        account = acl.accounts.get(access_key)
        if account is None:
            raise AccessDenied(f"No acl config for {access_key}: unknown AccessKey",
                               "unknown_access_key")
        if not always_signed and account.white_remote_address.matches(host):
            return
        if not signed:
            raise AccessDenied(f"the request of accessKey={access_key} carries no Signature",
                               "no_signature")
        if not verify_with(account.secret_key):
            raise AccessDenied(f"Check signature failed for accessKey={access_key}: wrong "
                               f"secret key, or the request was altered on the way",
                               "bad_signature")
        if admin and not account.admin:
            raise AccessDenied(f"Need admin permission for {what}, but "
                               f"accessKey={access_key} is not an admin", "not_admin")
        for name, is_group, needed in perms():
            owned = account.perm(name, is_group)
            if owned is not None and not allows(needed, owned):
                kind = "group" if is_group else "topic"
                raise AccessDenied(
                    f"No {perm_name(needed)} permission "
                    f"for {kind} {name} (accessKey={access_key} has {perm_name(owned)})")

    def refusal(self, cmd: RemotingCommand, host: str) -> RemotingCommand | None:
        """None if the request may be served, else the response refusing it (NO_PERMISSION,
        the reason in the remark). Each client and reason is logged once."""
        try:
            self.check(cmd, host)
        except AccessDenied as exc:
            reason = str(exc)
            key = (host, cmd.ext_fields.get(ACCESS_KEY, ""), reason)
            if key not in self._logged:
                if len(self._logged) >= self.MAX_LOGGED:
                    self._logged.clear()
                self._logged.add(key)
                log.warning("refused request %d from %s: %s", cmd.code, host, reason)
            return cmd.response(ResponseCode.NO_PERMISSION, remark=f"access denied: {reason}")
        return None

    def guard(self, handler: Callable[[Any, RemotingCommand], Any]
              ) -> Callable[[Any, RemotingCommand], Any]:
        """``handler`` behind this ACL: a refused request is answered (if not oneway) and
        never reaches it."""
        refusal = self.refusal

        def guarded(conn: Any, cmd: RemotingCommand) -> Any:
            refused = refusal(cmd, conn.peer[0])
            if refused is not None:
                return None if cmd.is_oneway else refused
            return handler(conn, cmd)
        return guarded
