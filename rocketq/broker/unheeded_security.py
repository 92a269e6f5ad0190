"""RocketMQ security settings rocketq does not implement: a broker (or a NameServer's or
controller's ``--tls-config`` file) that sets one to a value that would protect something
refuses to start, naming the key and what to do, rather than run open with a warning.

Every key RocketMQ reads that rocketq does not (``ROCKETMQ_KEYS`` less rocketq's own) was
gone through, with the proxy's and TLS settings a broker.conf may carry. Those that protect
something when set are in ``UNHEEDED``; a key set to its harmless value (``false``, empty)
still starts. Considered and left as plain "not used" warnings, since none protects anything
by itself, or rocketq already behaves as the protecting value:

- ACL 2.0's plumbing: ``authenticationProvider``, ``authenticationMetadataProvider``,
  ``authenticationStrategy``, ``authorizationProvider``, ``authorizationMetadataProvider``,
  ``authorizationStrategy`` (class names, in force only with the ``...Enabled`` switches
  refused below), ``authConfigPath``, ``migrateAuthFromV1Enabled`` (copies plain_acl.yml into
  ACL 2.0 users), the ``acl*``/``userCache*``/``statefulAuth*Cache*`` cache sizes, and
  ``authenticationWhitelist``/``authorizationWhitelist`` (they open, not close).
- ``tls.test.mode.enable`` and the proxy's ``tlsTestModeEnable`` (true: a self-signed
  certificate, peers unverified): rocketq has no test mode; it serves the certificate of
  ``tls.server.certPath`` only, as with false. ``tls.server.authClient`` (verify client
  certificates): rocketq always verifies the certificates ``tls.server.need.client.auth``
  asks for, against ``tls.server.trustCertPath``.
- ``validateSystemTopicWhenUpdateTopic`` (refuse to update system topics): rocketq always
  refuses. ``forceVerifyPropCRC``, ``checkCRCOnRecover``, ``enabledAppendPropCRC``: integrity
  checks against corruption, not security.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .runtime_keys import RUNTIME_KEYS


def _true(value: str, _: Mapping[str, Any]) -> bool:
    """Java's Boolean.parseBoolean: "true" in any case, anything else false."""
    return value.strip().lower() == "true"


def _set(value: str, _: Mapping[str, Any]) -> bool:
    return bool(value.strip())


def _runtime_key_blocked(value: str, _: Mapping[str, Any]) -> bool:
    return any(key.strip() in RUNTIME_KEYS for key in value.split(";"))


def _narrower_bind(value: str, values: Mapping[str, Any]) -> bool:
    """bindAddress names one interface, not the one rocketq listens on (127.0.0.1 when
    brokerIP1 is, else every interface)."""
    value = value.strip()
    ours = "127.0.0.1" if str(values.get("brokerIP1", "127.0.0.1")).strip() == "127.0.0.1" \
        else "0.0.0.0"
    return value not in ("", "0.0.0.0", "::", ours)


def _unverified_server(value: str, values: Mapping[str, Any]) -> bool:
    return _true(value, values) and not str(values.get("tls.client.trustCertPath", "")).strip()


def _tls_mode_on(value: str, _: Mapping[str, Any]) -> bool:
    return value.strip().lower() in ("permissive", "enforcing")


def _client_auth_on(value: str, _: Mapping[str, Any]) -> bool:
    return value.strip().lower() in ("optional", "require")


_ACL_V1 = ("use aclEnable=true with a plain_acl.yml (RocketMQ 4.x's ACL, which rocketq "
           "checks on the remoting and gRPC ports)")


@dataclass(frozen=True)
class Unheeded:
    """A security setting rocketq does not implement: what it means in RocketMQ, when a
    value protects something, and what to write instead."""

    meaning: str
    protects: Callable[[str, Mapping[str, Any]], bool]
    instead: str


#: Key -> what it is. Each would protect something in RocketMQ when ``protects`` its value.
UNHEEDED: dict[str, Unheeded] = {
    # RocketMQ 5.3's ACL 2.0 (AuthConfig), the only ACL RocketMQ 5.3 has.
    "authenticationEnabled": Unheeded(
        "ACL 2.0 authentication (RocketMQ 5.3): every request must be signed by a user "
        "the broker knows", _true, f"rocketq has no ACL 2.0 yet: {_ACL_V1}, or set it to false"),
    "authorizationEnabled": Unheeded(
        "ACL 2.0 authorization (RocketMQ 5.3): each user's requests are checked against "
        "its policies", _true, f"rocketq has no ACL 2.0 yet: {_ACL_V1}, or set it to false"),
    "initAuthenticationUser": Unheeded(
        "the ACL 2.0 super user (RocketMQ 5.3), created at the first start", _set,
        f"rocketq has no ACL 2.0 users: {_ACL_V1} (its admin account signs the broker's "
        "own requests), or remove it"),
    # The proxy's ACL switches (rmq-proxy.json keys a broker.conf may carry in local mode).
    "enableACL": Unheeded(
        "the RocketMQ 5.0-5.2 proxy checks client requests against the ACL", _true,
        f"{_ACL_V1}, or set it to false"),
    "enableAclRpcHookForClusterMode": Unheeded(
        "a proxy in cluster mode signs its requests to the brokers (with "
        "innerClientAuthenticationCredentials)", _true,
        "rocketq has no cluster-mode proxy: its gRPC port is in the broker (local mode), "
        "whose own requests are signed with innerClientAuthenticationCredentials or the first "
        "admin account of its plain_acl.yml; remove it, or set it to false"),
    # Remoting (NettyServerConfig, NettyClientConfig) and the broker's config updates.
    "useTLS": Unheeded(
        "the broker's own connections (to NameServers, its master) use TLS", _true,
        "write tls.enable=true, rocketq's key for it (tls.client.* for the certificates)"),
    "bindAddress": Unheeded(
        "the one interface the broker's port listens on", _narrower_bind,
        "rocketq listens on 127.0.0.1 when brokerIP1 is 127.0.0.1, else on every interface: "
        "set brokerIP1=127.0.0.1 for a loopback-only broker, or firewall the port; then "
        "remove bindAddress"),
    "configBlackList": Unheeded(
        "keys updateBrokerConfig may not change remotely", _runtime_key_blocked,
        "rocketq lets updateBrokerConfig change only the keys docs/operations.md lists; "
        "take those out of configBlackList (the others are refused already), or guard the "
        "broker with aclEnable (config updates need an admin account)"),
    # TLS (RocketMQ's TlsSystemConfig, read from -D properties or tls.config.file).
    "tls.config.file": Unheeded(
        "a file RocketMQ reads its tls.* settings from", _set,
        "rocketq reads the tls.* keys from broker.conf itself (or a NameServer's "
        "--tls-config file): copy them in, and remove tls.config.file"),
    "tls.client.authServer": Unheeded(
        "the broker verifies the certificates of the servers it connects to (against "
        "tls.client.trustCertPath, else the JDK's CAs)", _unverified_server,
        "give tls.client.trustCertPath (rocketq verifies servers against it only), or set "
        "tls.client.authServer=false"),
    # The proxy's own gRPC TLS certificate (rmq-proxy.json).
    "tlsCertPath": Unheeded(
        "the certificate the RocketMQ proxy serves TLS with", _set,
        "write tlsMode=enforcing with tls.server.certPath and tls.server.keyPath (TLS on "
        "the remoting and gRPC ports alike)"),
    "tlsKeyPath": Unheeded(
        "the key the RocketMQ proxy serves TLS with", _set,
        "write tlsMode=enforcing with tls.server.certPath and tls.server.keyPath (TLS on "
        "the remoting and gRPC ports alike)"),
}

#: TlsSystemConfig's field names, which RocketMQ never reads from a file, for its
#: dotted keys, which it and rocketq read.
for _field, _key, _protects in (
        ("tlsEnable", "tls.enable", _true),
        ("tlsServerMode", "tls.server.mode", _tls_mode_on),
        ("tlsServerNeedClientAuth", "tls.server.need.client.auth", _client_auth_on),
        ("tlsServerAuthClient", "tls.server.authClient", _true),
        ("tlsClientAuthServer", "tls.client.authServer", _true),
        ("tlsConfigFile", "tls.config.file", _set)):
    UNHEEDED[_field] = Unheeded(
        f"the Java field behind RocketMQ's {_key}, which RocketMQ does not read from a file",
        _protects, f"write {_key} instead")


_Values = TypeVar("_Values", bound=Mapping[str, Any])


class UnheededSecurityError(ValueError):
    """Settings that would protect something in RocketMQ and that rocketq cannot honour: the
    message names each key, what it means there and what to do."""


def unheeded_settings(values: Mapping[str, Any]) -> list[str]:
    """One line per key of ``values`` that is in ``UNHEEDED`` with a protecting value."""
    lines = []
    for key, value in values.items():
        entry = UNHEEDED.get(key)
        if entry is not None and entry.protects(str(value), values):
            # The key alone: a value may be a password (initAuthenticationUser).
            lines.append(f"{key}: in RocketMQ, {entry.meaning}; {entry.instead}")
    return lines


def refuse_unheeded(values: _Values) -> _Values:
    """``values``, unless a security setting of them is one rocketq would otherwise ignore (a
    server left open where its file says it is closed): then UnheededSecurityError naming
    every such key."""
    lines = unheeded_settings(values)
    if lines:
        raise UnheededSecurityError(
            "security settings rocketq does not have; refusing to start rather than run "
            "without them:\n  " + "\n  ".join(lines))
    return values
