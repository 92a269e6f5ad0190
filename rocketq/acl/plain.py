"""``plain_acl.yml``: RocketMQ 4.x's accounts and permissions, parsed and checked.

The schema is RocketMQ's own, so a file that works there works here::

    globalWhiteRemoteAddresses: ["10.10.103.*"]
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress: ""
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB"]
        groupPerms: ["groupA=DENY", "groupB=SUB"]

Permissions are RocketMQ's bits (``Permission.java``): DENY 1, ANY 2, PUB 4, SUB 8. An address
in ``globalWhiteRemoteAddresses``, or in an account's ``whiteRemoteAddress`` for requests that
name that account, is trusted as RocketMQ trusts it: its requests need no valid signature.
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DENY, ANY, PUB, SUB = 1, 2, 4, 8
_PERMS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
#: RocketMQ refuses an accessKey or secretKey of 6 characters or fewer
#: (PlainPermissionManager.checkPlainAccessConfig: ``length() <= ACCESS_KEY_MIN_LENGTH``, 6).
MIN_KEY_LENGTH = 7
#: The keys RocketMQ reads from the file (AclConstants); dataVersion is what its
#: updateAclConfig writes back.
FILE_KEYS = ("globalWhiteRemoteAddresses", "accounts", "dataVersion")
#: The keys RocketMQ reads from each account (PlainAccessConfig).
ACCOUNT_KEYS = ("accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
                "defaultGroupPerm", "topicPerms", "groupPerms")

log = logging.getLogger("rocketq.acl")


class AclConfigError(ValueError):
    """A ``plain_acl.yml`` that cannot be used; the message names the file and the entry."""


def parse_perm(text: Any) -> int:
    """``"PUB"``, ``"SUB"``, ``"PUB|SUB"``, ``"DENY"``; anything else is DENY, as in
    RocketMQ."""
    return _PERMS.get(str(text).strip(), DENY) if text is not None else DENY


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return "|".join(n for n, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit) or "DENY"


def allows(needed: int, owned: int) -> bool:
    """RocketMQ's Permission.checkPermission."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


class AddressPattern:
    """One of RocketMQ's remote address strategies: ``*``; an address; a list
    ``a,b``; ``192.168.1.{1,2,3}``; segments with ``*`` or a range, ``192.168.*.*`` or
    ``192.168.1.1-100``. An empty pattern matches nothing."""

    def __init__(self, text: str | None) -> None:
        self.text = (text or "").strip()
        self._any = self.text in ("*", "*.*.*.*")
        self._alternatives: list[list[tuple[int, int]] | str] = []
        if self.text and not self._any:
            for part in self._expand(self.text):
                self._alternatives.append(self._segments(part))

    @staticmethod
    def _expand(text: str) -> list[str]:
        if "{" in text:
            head, _, rest = text.partition("{")
            inner, close, tail = rest.partition("}")
            if not close or tail:
                raise AclConfigError(f"bad address pattern {text!r}")
            return [head + item.strip() for item in inner.split(",") if item.strip()]
        return [item.strip() for item in text.split(",") if item.strip()]

    @staticmethod
    def _segments(text: str) -> list[tuple[int, int]] | str:
        if ":" in text:  # IPv6: an exact address
            try:
                return str(ipaddress.ip_address(text))
            except ValueError:
                raise AclConfigError(f"bad address pattern {text!r}") from None
        parts = text.split(".")
        if len(parts) != 4:
            raise AclConfigError(f"bad address pattern {text!r}: want four '.'-separated parts")
        out = []
        for part in parts:
            if part == "*":
                out.append((0, 255))
                continue
            low, dash, high = part.partition("-")
            try:
                lo, hi = int(low), int(high) if dash else int(low)
            except ValueError:
                raise AclConfigError(f"bad address pattern {text!r}") from None
            if not 0 <= lo <= hi <= 255:
                raise AclConfigError(f"bad address pattern {text!r}: {part!r} is out of range")
            out.append((lo, hi))
        return out

    def matches(self, host: str) -> bool:
        if self._any:
            return True
        if not self._alternatives:
            return False
        parts = host.split(".")
        numbers: list[int] | None = None
        if len(parts) == 4 and all(p.isdigit() for p in parts):
            numbers = [int(p) for p in parts]
        for alternative in self._alternatives:
            if isinstance(alternative, str):
                if ":" in host and str(ipaddress.ip_address(host)) == alternative:
                    return True
            elif numbers is not None and all(
                    lo <= n <= hi for n, (lo, hi) in zip(numbers, alternative, strict=True)):
                return True
        return False

    def __repr__(self) -> str:
        return f"AddressPattern({self.text!r})"


@dataclass
class Account:
    """One entry of ``accounts``."""

    access_key: str
    secret_key: str
    white_remote_address: AddressPattern = field(default_factory=lambda: AddressPattern(""))
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)

    def perm(self, name: str, is_group: bool) -> int | None:
        """The account's permission on a topic or group; None: no rule at all (an admin
        without listed resources may do anything)."""
        listed = self.group_perms if is_group else self.topic_perms
        if name in listed:
            return listed[name]
        if self.admin and not self.topic_perms and not self.group_perms:
            return None
        return self.default_group_perm if is_group else self.default_topic_perm


@dataclass
class PlainAcl:
    """A parsed ``plain_acl.yml``."""

    global_white: list[AddressPattern]
    accounts: dict[str, Account]
    #: One line per key the file has that RocketMQ does not read (logged when parsed).
    warnings: list[str] = field(default_factory=list)

    def first_admin(self) -> Account | None:
        return next((a for a in self.accounts.values() if a.admin), None)


def _resource_perms(entries: Any, what: str, key: str) -> dict[str, int]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise AclConfigError(f"{key}: {what}Perms must be a list of 'name=PERM'")
    out = {}
    for entry in entries:
        name, eq, perm = str(entry).partition("=")
        if not eq or not name.strip():
            raise AclConfigError(f"{key}: cannot parse {what} permission {entry!r} "
                                 f"(want 'name=PUB|SUB')")
        out[name.strip()] = parse_perm(perm)
    return out


def _flag(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"


def parse_plain_acl(data: Mapping[str, Any] | None, source: str = "plain_acl.yml"
                    ) -> PlainAcl:
    """Check and convert the loaded YAML of a ``plain_acl.yml``."""
    data = data or {}
    if not isinstance(data, Mapping):
        raise AclConfigError(f"{source}: not a YAML mapping")
    white = data.get("globalWhiteRemoteAddresses") or []
    if isinstance(white, str):
        white = [white]
    if not isinstance(white, list):
        raise AclConfigError(f"{source}: globalWhiteRemoteAddresses must be a list of "
                             f"address patterns")
    try:
        global_white = [AddressPattern(str(w)) for w in white if w is not None]
    except AclConfigError as exc:
        raise AclConfigError(f"{source}: globalWhiteRemoteAddresses: {exc}") from None
    warnings: list[str] = []
    _warn_unknown_keys(data, FILE_KEYS, source, warnings)
    accounts: dict[str, Account] = {}
    entries = data.get("accounts") or []
    if not isinstance(entries, list):
        raise AclConfigError(f"{source}: accounts must be a list of accounts")
    for i, raw in enumerate(entries):
        where = f"{source}: accounts[{i}]"
        if not isinstance(raw, Mapping):
            raise AclConfigError(f"{where} is not a mapping")
        ak = str(raw.get("accessKey") or "")
        sk = str(raw.get("secretKey") or "")
        # Before the checks below: a misspelt accessKey is then explained as well as refused.
        _warn_unknown_keys(raw, ACCOUNT_KEYS, f"accounts[{i}] of {source}", warnings)
        if len(ak) < MIN_KEY_LENGTH:
            raise AclConfigError(
                f"{where}: accessKey {ak!r} has {len(ak)} characters; RocketMQ requires "
                f"accessKey and secretKey longer than {MIN_KEY_LENGTH - 1} characters")
        if len(sk) < MIN_KEY_LENGTH:  # the secret itself is not shown
            raise AclConfigError(
                f"{where}: the secretKey of accessKey {ak!r} has {len(sk)} characters; "
                f"RocketMQ requires accessKey and secretKey longer than "
                f"{MIN_KEY_LENGTH - 1} characters")
        if ak in accounts:
            raise AclConfigError(f"{where}: accessKey {ak!r} is listed twice")
        address = raw.get("whiteRemoteAddress")
        if isinstance(address, (list, Mapping)):
            raise AclConfigError(f"{where}: whiteRemoteAddress must be one address pattern")
        try:
            white_address = AddressPattern(str(address) if address else None)
        except AclConfigError as exc:
            raise AclConfigError(f"{where}: whiteRemoteAddress: {exc}") from None
        accounts[ak] = Account(
            ak, sk, white_address, _flag(raw.get("admin")),
            parse_perm(raw.get("defaultTopicPerm")), parse_perm(raw.get("defaultGroupPerm")),
            _resource_perms(raw.get("topicPerms"), "topic", where),
            _resource_perms(raw.get("groupPerms"), "group", where))
    return PlainAcl(global_white, accounts, warnings)


def _warn_unknown_keys(entry: Mapping[Any, Any], known: tuple[str, ...], where: str,
                       warnings: list[str]) -> None:
    """Log (and add to ``warnings``) a line for each key of ``entry`` that is not one of
    ``known``, with the nearest known key, compared without regard to case: such a key is
    ignored, so a misspelt ``defaultTopicPerm`` would leave the account at DENY with nobody
    told why."""
    by_lower = {k.lower(): k for k in known}
    for key in entry:
        if key in known:
            continue
        near = difflib.get_close_matches(str(key).lower(), list(by_lower), n=1, cutoff=0.75)
        hint = f": did you mean {by_lower[near[0]]}?" if near else ""
        line = f"unknown key {key} in {where}, ignored{hint}"
        log.warning("%s", line)
        warnings.append(line)


def yaml_problem(name: str, exc: Exception) -> str:
    """``NAME is not valid YAML at line L, column C``: where PyYAML stopped, and nothing of
    its message, which quotes the line (a secretKey, it may be)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return f"{name} is not valid YAML"
    return f"{name} is not valid YAML at line {mark.line + 1}, column {mark.column + 1}"


def load_plain_acl(path: str | os.PathLike[str]) -> PlainAcl:
    """Read and check a ``plain_acl.yml``; AclConfigError says what is wrong with it."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise AclConfigError(f"cannot read the ACL file {os.fspath(path)}: "
                             f"{exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise AclConfigError(yaml_problem(os.fspath(path), exc)) from None
    except UnicodeDecodeError as exc:
        raise AclConfigError(f"{os.fspath(path)} is not UTF-8 text: {exc}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise AclConfigError(f"{os.fspath(path)} nests too deeply to be read") from None
    return parse_plain_acl(data, os.fspath(path))
