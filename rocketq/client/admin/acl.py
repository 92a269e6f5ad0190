"""The accounts of the brokers' ``plain_acl.yml`` (mqadmin getAccessConfigSubCommand,
updateAclConfig, deleteAclConfig, updateGlobalWhiteAddr), over RocketMQ 4.x's ACL admin
requests. Each broker has its own file: a change goes to every master (or to the brokers
named), and a read merges what they hold."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ...protocol import RemotingCommand, RequestCode
from ..errors import InvalidArgumentError
from .base import AdminBase

#: Permissions an account may have on a topic or group (RocketMQ's Permission names).
PERMS = ("DENY", "PUB", "SUB", "PUB|SUB")


@dataclass
class AclUser:
    """An account of ``plain_acl.yml`` (RocketMQ's PlainAccessConfig)."""

    access_key: str
    secret_key: str
    #: Addresses whose requests with this access key need no signature ('' for none).
    white_remote_address: str = ""
    #: Whether it may send admin requests (create topics, change settings and accounts).
    admin: bool = False
    #: Its permission on topics and groups not listed below: DENY, PUB, SUB or PUB|SUB.
    default_topic_perm: str = "DENY"
    default_group_perm: str = "DENY"
    #: ``name -> permission`` of the topics and groups listed.
    topic_perms: dict[str, str] = field(default_factory=dict)
    group_perms: dict[str, str] = field(default_factory=dict)
    #: The addresses of the brokers whose files have the account.
    brokers: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AclUser:
        def perms(entries: Any) -> dict[str, str]:
            pairs = (str(e).partition("=") for e in entries or ())
            return {name.strip(): perm.strip() for name, _, perm in pairs}

        return cls(str(data.get("accessKey") or ""), str(data.get("secretKey") or ""),
                   str(data.get("whiteRemoteAddress") or ""), bool(data.get("admin")),
                   str(data.get("defaultTopicPerm") or "DENY"),
                   str(data.get("defaultGroupPerm") or "DENY"),
                   perms(data.get("topicPerms")), perms(data.get("groupPerms")))


@dataclass
class AclConfig:
    """What the brokers' ACL files hold."""

    #: Address patterns whose requests pass without an account.
    global_white_addresses: list[str]
    users: list[AclUser]


def _perm(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    word = str(value).strip().upper()
    if word == "SUB|PUB":
        word = "PUB|SUB"
    if word not in PERMS:
        raise InvalidArgumentError(f"{what} must be one of {', '.join(PERMS)}, not {value!r}")
    return word


def _perm_list(perms: Mapping[str, str] | None, what: str) -> str | None:
    """``{"Orders": "PUB"}`` as the request's ``Orders=PUB`` list, ','-separated."""
    if perms is None:
        return None
    for name in perms:
        if not name or any(c in name for c in ",= "):
            raise InvalidArgumentError(f"{what}: {name!r} is not a topic or group name")
    return ",".join(f"{name}={_perm(perm, f'{what}[{name}]')}" for name, perm in perms.items())


class AclAdmin(AdminBase):
    """Accounts and the global white list of the brokers' ACL files."""

    async def acl_config(self, *, broker: str | None = None) -> AclConfig:
        """The global white list and accounts of the broker at ``broker``, else of every
        master merged (an account as the first master by address has it, the brokers that
        have it listed). Needs an admin account.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused (its ACL is off, or the account is no admin).
        """
        white: list[str] = []
        users: dict[str, AclUser] = {}
        for addr in await self._targets([broker] if broker else None, None):
            r = await self._ask(addr, RemotingCommand.request(
                RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG), "reading the ACL")
            data = orjson.loads(r.body)
            white += [w for w in data.get("globalWhiteAddrs") or () if w not in white]
            for raw in data.get("plainAccessConfigs") or ():
                user = AclUser.from_json(raw)
                users.setdefault(user.access_key, user).brokers.append(addr)
        return AclConfig(white, [users[k] for k in sorted(users)])

    async def acl_users(self, *, broker: str | None = None) -> list[AclUser]:
        """The accounts of the brokers' ACL files, by access key (see ``acl_config``).

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused (its ACL is off, or the account is no admin).
        """
        return (await self.acl_config(broker=broker)).users

    async def update_acl_user(self, access_key: str, *, secret_key: str | None = None,
                              white_remote_address: str | None = None,
                              admin: bool | None = None, default_topic_perm: str | None = None,
                              default_group_perm: str | None = None,
                              topic_perms: Mapping[str, str] | None = None,
                              group_perms: Mapping[str, str] | None = None,
                              brokers: list[str] | None = None,
                              cluster: str | None = None) -> list[str]:
        """Create account ``access_key`` (``secret_key`` is then needed), or change the
        fields given and keep the rest (RocketMQ's updateAccessConfig), in the ACL files of
        the brokers named, else of every broker of ``cluster``, else of every master. A
        permission is DENY, PUB, SUB or PUB|SUB; ``topic_perms`` and ``group_perms`` replace
        the lists. Returns the brokers' addresses; each takes the change at once.

        Raises:
            InvalidArgumentError: a permission or resource name that is not one.
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused (a key of 6 characters or fewer, a new account
                without a secret key, its ACL off); every broker is tried first.
        """
        header: dict[str, Any] = {
            "accessKey": access_key, "secretKey": secret_key,
            "whiteRemoteAddress": white_remote_address,
            "admin": None if admin is None else bool(admin),
            "defaultTopicPerm": _perm(default_topic_perm, "default_topic_perm"),
            "defaultGroupPerm": _perm(default_group_perm, "default_group_perm"),
            "topicPerms": _perm_list(topic_perms, "topic_perms"),
            "groupPerms": _perm_list(group_perms, "group_perms")}
        header = {k: v for k, v in header.items() if v is not None}

        async def update(addr: str) -> None:
            await self._ask(addr, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, header),
                f"updating account {access_key}")
        return await self._on_each(await self._targets(brokers, cluster), update)

    async def delete_acl_user(self, access_key: str, *, brokers: list[str] | None = None,
                              cluster: str | None = None) -> list[str]:
        """Delete account ``access_key`` from the ACL files of the brokers named, else of
        every broker of ``cluster``, else of every master. Returns the brokers' addresses.

        Raises:
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused (no such account, its ACL off); every broker is
                tried first.
        """
        async def delete(addr: str) -> None:
            await self._ask(addr, RemotingCommand.request(
                RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key}),
                f"deleting account {access_key}")
        return await self._on_each(await self._targets(brokers, cluster), delete)

    async def update_acl_white_list(self, addresses: list[str], *,
                                    brokers: list[str] | None = None,
                                    cluster: str | None = None) -> list[str]:
        """Replace the global white list (``globalWhiteRemoteAddresses``: address patterns
        whose requests pass without an account) of the brokers named, else of every broker
        of ``cluster``, else of every master. Returns the brokers' addresses.

        Raises:
            InvalidArgumentError: an address pattern holds a ','.
            NameServerError: no NameServer answered.
            ConnectionClosedError: a broker could not be reached.
            ClientTimeoutError: a broker did not answer in time.
            BrokerError: a broker refused (a pattern it cannot read, its ACL off); every
                broker is tried first.
        """
        if any("," in a for a in addresses):
            raise InvalidArgumentError("addresses: give one pattern per item, without ','")

        async def update(addr: str) -> None:
            await self._ask(addr, RemotingCommand.request(
                RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                {"globalWhiteAddrs": ",".join(a.strip() for a in addresses)}),
                "updating the global white list")
        return await self._on_each(await self._targets(brokers, cluster), update)
