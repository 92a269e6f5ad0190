"""Admin requests of a broker: UPDATE_BROKER_CONFIG, and bad fields of admin requests
answered INVALID_PARAMETER.

UPDATE_BROKER_CONFIG (mqadmin ``updateBrokerConfig -k KEY -v VALUE``) carries Java properties
text in its body, as AdminBrokerProcessor.updateBrokerConfig reads it with
MixAll.string2Properties. RocketMQ sets whatever key it knows (Configuration.update) and writes
the whole configuration back; rocketq is stricter, all or nothing: an unknown key, a value that
does not convert or is out of range, or a key that is read only at start refuses the whole
request and changes nothing. Accepted values are saved to
``<storePathRootDir>/config/broker.properties`` first, then set on the live configuration, so
a change survives a restart and a change that cannot be saved is not made.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.command import ProtocolError, RemotingCommand
from ..protocol.topic import AUTO_CREATE_TOPIC_KEY
from ..remoting import Connection
from .config import (
    ConfigUpdateError,
    apply_settings,
    check_settings,
    overrides_path,
    parse_properties,
    save_overrides,
)

if TYPE_CHECKING:
    from . import Broker

log = logging.getLogger("rocketq.broker")

Handler = Callable[[Connection, RemotingCommand], Any]

#: Requests of admin tools whose header fields a broker parses. A field that is missing or
#: not an integer is the caller's mistake: INVALID_PARAMETER naming it, not SYSTEM_ERROR.
ADMIN_CODES = (
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_TOPIC_CONFIG,
    RequestCode.UPDATE_BROKER_CONFIG, RequestCode.GET_BROKER_CONFIG,
    RequestCode.GET_BROKER_RUNTIME_INFO, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
    RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.GET_EARLIEST_MSG_STORETIME, RequestCode.VIEW_MESSAGE_BY_ID,
    RequestCode.QUERY_MESSAGE, RequestCode.GET_TOPIC_STATS_INFO, RequestCode.GET_CONSUME_STATS,
    RequestCode.GET_CONSUMER_CONNECTION_LIST, RequestCode.GET_PRODUCER_CONNECTION_LIST,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
)


def admin_handlers(broker: Broker) -> dict[int, Handler]:
    """Handlers to add to the broker's table: UPDATE_BROKER_CONFIG, and the broker's
    handlers of ADMIN_CODES wrapped so that a bad header field answers INVALID_PARAMETER."""
    handlers: dict[int, Handler] = {
        RequestCode.UPDATE_BROKER_CONFIG: functools.partial(update_broker_config, broker)}
    for code in ADMIN_CODES:
        handler = handlers.get(code) or broker._handlers.get(code)
        if handler is not None:
            handlers[code] = _invalid_parameter_on_bad_field(handler)
    return handlers


def _invalid_parameter_on_bad_field(handler: Handler) -> Handler:
    def handle(conn: Connection, cmd: RemotingCommand) -> Any:
        try:
            result = handler(conn, cmd)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))
        if inspect.isawaitable(result):
            return _awaited(result, cmd)
        return result
    return handle


async def _awaited(pending: Any, cmd: RemotingCommand) -> Any:
    try:
        return await pending
    except ProtocolError as exc:
        return cmd.response(ResponseCode.INVALID_PARAMETER, remark=str(exc))


def update_broker_config(broker: Broker, conn: Connection, cmd: RemotingCommand
                         ) -> RemotingCommand:
    """UPDATE_BROKER_CONFIG: check every key, save, apply, and take the changes up where
    they are not read on each use."""
    try:
        text = cmd.body.decode("utf-8")
    except UnicodeDecodeError:
        return cmd.response(ResponseCode.INVALID_PARAMETER,
                            remark="the body is not UTF-8 properties text")
    try:
        values = check_settings(parse_properties(text))
    except ConfigUpdateError as exc:
        code = ResponseCode.NO_PERMISSION if exc.static else ResponseCode.INVALID_PARAMETER
        return cmd.response(code, remark=str(exc))
    if not values:
        return cmd.response()
    path = overrides_path(broker.store_config)
    try:
        save_overrides(path, values)
    except OSError as exc:
        log.error("broker config not changed: %s cannot be saved: %s", path, exc)
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"the broker config cannot be saved, nothing changed: {exc}")
    before = {k: getattr(broker.config, k, getattr(broker.store_config, k, None))
              for k in values}
    apply_settings(broker.config, broker.store_config, values)
    log.info("broker config changed by %s:%s: %s", *conn.peer[:2], ", ".join(
        f"{k}={v}" for k, v in sorted(values.items())))
    _take_up(broker, values, before)
    return cmd.response()


def _take_up(broker: Broker, values: dict[str, Any], before: dict[str, Any]) -> None:
    """Make the changes that are not read on each use take effect."""
    if "maxMessageSize" in values or "syncFlushTimeout" in values:
        broker.store.reload_config()
    # Restart the wait with the new period; register with the new NameServers at once.
    reregister = "registerNameServerPeriod" in values or "namesrvAddr" in values
    if "autoCreateTopicEnable" in values and values["autoCreateTopicEnable"] != before[
            "autoCreateTopicEnable"]:
        # As at start: TBW102 exists while auto-creation is on, so clients find its route.
        try:
            if values["autoCreateTopicEnable"]:
                if broker.topics.get(AUTO_CREATE_TOPIC_KEY) is None:
                    broker.topics.update(broker.topics.auto_create_topic())
            else:
                broker.topics.delete(AUTO_CREATE_TOPIC_KEY)
            reregister = True
        except OSError as exc:
            log.error("TBW102 not changed (the broker will at its next start): %s", exc)
    if "brokerPermission" in values and values["brokerPermission"] != before[
            "brokerPermission"]:
        # The registration applies the broker's permission to its topics; a new DataVersion
        # makes the NameServers read them again (AdminBrokerProcessor does the same).
        broker.topics.next_version()
        reregister = True
    if reregister:
        broker.topics_changed()
