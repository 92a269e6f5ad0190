"""Checks of the arguments given to the client's constructors, run where they are given.

A group name or NameServer address that cannot work fails at construction, with the argument
named, instead of at the first send or as a retry logged forever. Producers, consumers and
the admin all call these, so each rule is written once.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from .errors import ArgumentTypeError, InvalidArgumentError

#: RocketMQ's Validators.checkGroup: these characters, at most GROUP_MAX_LENGTH of them.
GROUP_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
GROUP_MAX_LENGTH = 255


def type_name(value: object) -> str:
    """How an error message names the type of ``value``."""
    return "None" if value is None else type(value).__name__


def check_type(value: Any, expected: type | tuple[type, ...], name: str, what: str,
               hint: str = "") -> None:
    """Raise ArgumentTypeError naming ``name`` unless ``value`` is an ``expected`` (a bool is
    not taken for an int); ``what`` says what the argument must be ("a str"), ``hint`` how to
    fix a common mistake."""
    if not isinstance(value, expected) or isinstance(value, bool) and expected is int:
        raise ArgumentTypeError(f"{name} must be {what}, not {type_name(value)}"
                                + (f"; {hint}" if hint else ""))


def check_group(group: Any, role: str) -> str:
    """``group`` if it is a legal group name for ``role`` ("producer", "consumer"): RocketMQ's
    rule (letters, digits, ``_``, ``-`` and ``|``, at most 255), where brokers refuse any
    other name. ``%`` is refused too: it separates a namespace from a group and marks the
    ``%RETRY%`` and ``%DLQ%`` topics made from group names."""
    check_type(group, str, "group", f"the {role} group's name as a str")
    if not group:
        raise InvalidArgumentError(f"group: the {role} group's name is empty")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidArgumentError(f"group: the {role} group's name is {len(group)} characters;"
                                   f" the most RocketMQ allows is {GROUP_MAX_LENGTH}")
    if not GROUP_PATTERN.match(group) or "%" in group:
        raise InvalidArgumentError(
            f"group: the {role} group {group!r} may contain only letters, digits, '_', '-' "
            "and '|'")
    return group


#: A host name: letters, digits, '-' and '_' in dot-separated labels (no scheme, path,
#: user or blank).
HOST_PATTERN = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?"
                          r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?")


def address_problem(addr: str) -> str | None:
    """What is wrong with the NameServer address ``addr`` (one ``host:port``), naming the
    bad part, or None when it is a host name or IP address and a port in 1..65535."""
    if "://" in addr:
        scheme, _, rest = addr.partition("://")
        return (f"{addr!r} is a URL: a NameServer address has no scheme ({scheme}://) or "
                f"path; write host:port ({rest.split('/', 1)[0]!r}), several joined by ';'")
    host, sep, port = addr.rpartition(":")
    if not sep or not host:
        return f"{addr!r} has no port: write host:port (a NameServer listens on 9876 by default)"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"{addr!r}: the port {port!r} is not a number in 1..65535 (write host:port)"
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        if not HOST_PATTERN.fullmatch(bare):
            return f"{addr!r}: {host!r} is not a host name or IP address (write host:port)"
    return None


def check_namesrv(namesrv: Any) -> list[str]:
    """The addresses of ``namesrv``, ``"host:port"`` or several joined by ``;`` (or ``,``),
    refused at once when one is not a host and a port, with the bad part named."""
    example = "'host:port' or 'host:port;host:port'"
    check_type(namesrv, str, "namesrv", f"the NameServer addresses as a str like {example}")
    addrs = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise InvalidArgumentError(f"namesrv: no NameServer address given; use {example}")
    for addr in addrs:
        problem = address_problem(addr)
        if problem is not None:
            raise InvalidArgumentError(f"namesrv: {problem}")
    return addrs


#: The starting positions a consumer takes, and their names in RocketMQ's ConsumeFromWhere.
FROM_WHERE = {"last": "CONSUME_FROM_LAST_OFFSET", "first": "CONSUME_FROM_FIRST_OFFSET",
              "timestamp": "CONSUME_FROM_TIMESTAMP"}
#: Other spellings of the starting positions (Kafka's and Spark's), accepted everywhere a
#: starting position is: the client's ``from_where`` and the Spark options alike.
FROM_WHERE_ALIASES = {"earliest": "first", "latest": "last"}
#: The message models, and their names in RocketMQ's MessageModel.
MODELS = {"clustering": "CLUSTERING", "broadcasting": "BROADCASTING"}


def starting_position(value: str, option: str = "from_where") -> str:
    """``"first"``, ``"last"`` or ``"timestamp"`` for ``value``, which may also say
    ``"earliest"`` (first) or ``"latest"`` (last), in any case. Raises ValueError naming
    ``option`` and the accepted values for anything else."""
    word = value.strip().lower() if isinstance(value, str) else value
    word = FROM_WHERE_ALIASES.get(word, word)
    if word not in FROM_WHERE:
        raise InvalidArgumentError(f"{option} must be 'first' (or 'earliest'), 'last' "
                                   f"(or 'latest') or 'timestamp', not {value!r}")
    return word


__all__ = ["FROM_WHERE", "FROM_WHERE_ALIASES", "GROUP_MAX_LENGTH", "MODELS", "address_problem",
           "check_group", "check_namesrv", "check_type", "starting_position", "type_name"]
