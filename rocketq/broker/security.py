"""The broker's security settings taken from its config: the ACL guarding its port, the
credentials it signs its own requests with, TLS for its ports and its own connections."""

from __future__ import annotations

import logging
import os
import ssl

import orjson

from ..acl import BROKER_ADMIN_CODES, AccessControl, AclConfigError, Credentials
from ..remoting.tls import TlsSettings, outgoing_context
from .config import BrokerConfig

ACL_FILE_NAME = "plain_acl.yml"

log = logging.getLogger("rocketq.broker")


def acl_file(config: BrokerConfig, config_dir: str) -> str:
    """Where the broker's accounts are: ``aclFile``, else ``<store>/config/plain_acl.yml``."""
    return config.aclFile or os.path.join(config_dir, ACL_FILE_NAME)


def access_control(config: BrokerConfig, config_dir: str) -> AccessControl | None:
    """The broker's ACL when ``aclEnable`` is on; AclConfigError if its file is missing or
    wrong (a broker meant to check requests must not start without accounts)."""
    if not config.aclEnable:
        return None
    path = acl_file(config, config_dir)
    if not os.path.exists(path):
        raise AclConfigError(f"aclEnable=true but there is no ACL file at {path} (write one, "
                             f"or give its path with --acl-file)")
    return AccessControl(path, BROKER_ADMIN_CODES)


def inner_credentials(config: BrokerConfig, acl: AccessControl | None) -> Credentials | None:
    """What the broker signs its own requests with: ``innerClientAuthenticationCredentials``,
    else the first admin account of its ACL file, else nothing."""
    text = config.innerClientAuthenticationCredentials.strip()
    if text:
        try:
            data = orjson.loads(text)
            return Credentials(str(data["accessKey"]), str(data["secretKey"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise AclConfigError('innerClientAuthenticationCredentials must be JSON like '
                                 '{"accessKey": "...", "secretKey": "..."}') from None
    if acl is not None:
        admin = acl.acl.first_admin()
        if admin is not None:
            return Credentials(admin.access_key, admin.secret_key)
    return None


def own_credentials(config: BrokerConfig, acl: AccessControl | None) -> Credentials | None:
    """``inner_credentials``, with a warning when the ACL is on but there are none: the
    NameServers that check requests would refuse the broker's registration."""
    inner = inner_credentials(config, acl)
    if acl is not None and inner is None:
        log.warning("ACL is on but the broker has no credentials of its own: NameServers "
                    "that check requests will refuse its registration (add an admin "
                    "account to %s, or set innerClientAuthenticationCredentials)", acl.path)
    return inner


def server_tls(config: BrokerConfig) -> TlsSettings:
    """``tls_settings``, its certificate loaded at once when TLS is on: a certificate that
    cannot be loaded fails the broker's construction, not its first connection."""
    tls = tls_settings(config)
    if tls.enabled:
        _ = tls.server_context
    return tls


def tls_settings(config: BrokerConfig) -> TlsSettings:
    """The TLS mode and certificate of the broker's ports."""
    return TlsSettings.from_config({**config.tls, "tlsMode": config.tlsMode
                                    if config.tlsMode != "disabled" else ""})


def outgoing_tls(config: BrokerConfig) -> ssl.SSLContext | None:
    """TLS for the broker's own connections (NameServers, master, controllers)."""
    return outgoing_context(config.tls, tls_settings(config).mode)
