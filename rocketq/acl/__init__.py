"""Access control: RocketMQ's plain ACL (``plain_acl.yml``), request signatures, and the
permission check brokers and NameServers make of every request."""

from .check import (
    BROKER_ADMIN_CODES,
    CONTROLLER_ADMIN_CODES,
    NAMESRV_ADMIN_CODES,
    AccessControl,
    AccessDenied,
    needed_perms,
)
from .plain import AclConfigError, PlainAcl, load_plain_acl, parse_plain_acl
from .signature import Credentials, signature, verify

__all__ = [
    "BROKER_ADMIN_CODES", "CONTROLLER_ADMIN_CODES", "NAMESRV_ADMIN_CODES", "AccessControl",
    "AccessDenied", "AclConfigError", "Credentials", "PlainAcl", "load_plain_acl", "needed_perms",
    "parse_plain_acl", "signature", "verify",
]
