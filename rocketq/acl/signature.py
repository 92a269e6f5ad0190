"""Request signatures as RocketMQ's clients make them (``AclClientRPCHook``).

The signed content is the values of every extField except ``Signature`` itself, in the order
of their keys, followed by the body; the signature is Base64(HMAC-SHA1(secret key, content))
in the extField ``Signature``, next to ``AccessKey`` (and ``SecurityToken`` when there is
one). The Java, C++ and ali-ons clients all sign this way, so a broker checks their requests
with one function. Sans-IO: commands in, strings out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..protocol import RemotingCommand

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"
#: Java's clients add this extField to a message query after signing it, so brokers leave
#: it out of the signed content (PlainAccessResource.parse).
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_UNSIGNED = (SIGNATURE, UNIQUE_KEY_QUERY)


@dataclass(frozen=True)
class Credentials:
    """An account's keys, as a client holds them (RocketMQ's SessionCredentials)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need a non-empty access key and secret key")

    def __repr__(self) -> str:  # never print the secret
        return f"Credentials(access_key={self.access_key!r}, secret_key='***')"

    @classmethod
    def of(cls, value: Credentials | tuple[str, ...] | list[str] | None) -> Credentials | None:
        """``("AK", "SK")``, ``("AK", "SK", "token")`` or Credentials; None stays None."""
        if value is None or isinstance(value, Credentials):
            return value
        if isinstance(value, (tuple, list)) and len(value) in (2, 3) and all(
                isinstance(v, str) for v in value):
            return cls(*value)
        raise TypeError("credentials must be (access_key, secret_key[, security_token])")

    def sign(self, cmd: RemotingCommand) -> None:
        """Add AccessKey, SecurityToken and Signature to a request about to be sent."""
        ext = cmd.ext_fields
        ext[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            ext[SECURITY_TOKEN] = self.security_token
        body: Iterable[bytes | memoryview] = (cmd.body_parts if cmd.body_parts is not None
                                              else (cmd.body,))
        ext[SIGNATURE] = signature(self.secret_key, ext, body)


def signed_text(ext_fields: Mapping[str, str]) -> bytes:
    """The header part of the signed content: the values in key order, unsigned keys left
    out."""
    return "".join([ext_fields[k] for k in sorted(ext_fields) if k not in _UNSIGNED]).encode()


def signature(secret_key: str, ext_fields: Mapping[str, str],
              body: Iterable[bytes | memoryview] = ()) -> str:
    """Base64(HMAC-SHA1(secret_key, signed header values + body))."""
    mac = hmac.new(secret_key.encode(), signed_text(ext_fields), hashlib.sha1)
    for part in body:
        mac.update(part)
    return base64.b64encode(mac.digest()).decode()


def verify(secret_key: str, cmd: RemotingCommand) -> bool:
    """Whether the request's Signature is the one ``secret_key`` makes of it."""
    given = cmd.ext_fields.get(SIGNATURE)
    if not given:
        return False
    expected = signature(secret_key, cmd.ext_fields, (cmd.body,))
    return hmac.compare_digest(expected.encode(), given.encode())
