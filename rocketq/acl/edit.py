"""Changes to a ``plain_acl.yml`` as RocketMQ's PlainPermissionManager makes them for the ACL
admin requests (updateAccessConfig, deleteAccessConfig, updateGlobalWhiteAddrsConfig): the
file is read, changed, its ``dataVersion`` counted up, and written back.

An update of an existing account changes the fields it is given and keeps the others
(createAclAccessConfigMap); a new account needs its secret key. The file is written whole (its
comments do not survive, as in RocketMQ) and only once the new content parses as an ACL file,
so a change a broker could not load is refused and nothing is written. It is written to a new
file then renamed over the old one, so the watcher never reads half of it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from .plain import ACCOUNT_KEYS, AclConfigError, parse_plain_acl, yaml_problem

#: Permission words RocketMQ's Permission.checkResourcePerms accepts.
PERM_WORDS = ("DENY", "PUB", "SUB", "PUB|SUB", "SUB|PUB")


class AclUpdateError(ValueError):
    """A change to the ACL file that cannot be made; the message says why."""


class AclFileError(ValueError):
    """The ACL file cannot be read as YAML; the message says where, and quotes none of it."""


def read_acl_data(path: str) -> dict[str, Any]:
    """The YAML mapping of the ACL file (empty if the file is empty). Raises OSError if it
    cannot be read, AclFileError if it is not YAML (UTF-8 text nested at most as deep as
    PyYAML reads), AclUpdateError if it is not a mapping."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise AclFileError(yaml_problem(os.path.basename(path), exc)) from None
    except UnicodeDecodeError:
        raise AclFileError(f"{os.path.basename(path)} is not UTF-8 text") from None
    except RecursionError:
        raise AclFileError(f"{os.path.basename(path)} nests too deeply to be read") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AclUpdateError(f"{path} is not a YAML mapping")
    return data


def _check_perms(entries: list[str], what: str) -> None:
    for entry in entries:
        name, eq, perm = entry.partition("=")
        if not eq or not name.strip() or perm.strip() not in PERM_WORDS:
            raise AclUpdateError(f"Parse resource permission failed for {what}: {entry!r} "
                                 f"(want name=PERM, PERM one of {', '.join(PERM_WORDS)})")


def with_account(data: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the account ``fields["accessKey"]`` created, or updated with the fields
    given (the keys of ACCOUNT_KEYS; a field left out keeps its value)."""
    access_key = str(fields.get("accessKey") or "")
    fields = {k: v for k, v in fields.items() if k in ACCOUNT_KEYS and v is not None}
    for key in ("defaultTopicPerm", "defaultGroupPerm"):
        if key in fields and str(fields[key]) not in PERM_WORDS:
            raise AclUpdateError(f"{key} must be one of {', '.join(PERM_WORDS)}, not "
                                 f"{fields[key]!r}")
    for key in ("topicPerms", "groupPerms"):
        if key in fields:
            _check_perms(list(fields[key]), key)
    out = dict(data)
    accounts = [dict(a) if isinstance(a, Mapping) else a for a in out.get("accounts") or []]
    for account in accounts:
        if isinstance(account, dict) and str(account.get("accessKey")) == access_key:
            account.update(fields)
            break
    else:
        if not fields.get("secretKey"):
            raise AclUpdateError(f"accessKey {access_key!r} is not in the ACL file; a new "
                                 f"account needs its secretKey")
        accounts.append(fields)
    out["accounts"] = accounts
    return out


def without_account(data: Mapping[str, Any], access_key: str) -> dict[str, Any]:
    """``data`` without the account ``access_key``; AclUpdateError if it has none."""
    accounts = list(data.get("accounts") or [])
    kept = [a for a in accounts
            if not (isinstance(a, Mapping) and str(a.get("accessKey")) == access_key)]
    if len(kept) == len(accounts):
        raise AclUpdateError(f"accessKey {access_key!r} is not in the ACL file")
    return {**data, "accounts": kept}


def with_global_white(data: Mapping[str, Any], addresses: list[str]) -> dict[str, Any]:
    """``data`` with ``globalWhiteRemoteAddresses`` replaced by ``addresses``."""
    return {**data, "globalWhiteRemoteAddresses": list(addresses)}


def data_version(data: Mapping[str, Any]) -> dict[str, int]:
    """The file's ``dataVersion`` (RocketMQ writes it as a one-element list)."""
    version = data.get("dataVersion")
    if isinstance(version, list):
        version = version[0] if version else None
    if not isinstance(version, Mapping):
        return {"counter": 0, "stateVersion": 0, "timestamp": 0}
    return {k: int(version.get(k) or 0) for k in ("counter", "stateVersion", "timestamp")}


def write_acl_data(path: str, data: Mapping[str, Any]) -> None:
    """Write ``data`` as the ACL file at ``path``, its dataVersion counted up. Raises
    AclUpdateError (nothing written) if the result is not a usable ACL file, OSError if it
    cannot be written."""
    import yaml

    version = data_version(data)
    new = {**data, "dataVersion": [{"counter": version["counter"] + 1,
                                    "stateVersion": version["stateVersion"],
                                    "timestamp": int(time.time() * 1000)}]}
    try:
        parse_plain_acl(new, path)
    except AclConfigError as exc:
        raise AclUpdateError(str(exc)) from None
    text = yaml.safe_dump(new, sort_keys=False, allow_unicode=True)
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".plain_acl.", suffix=".yml", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(temp, os.stat(path).st_mode & 0o777)
        except OSError:
            pass  # a file that is gone keeps mkstemp's 0600: secrets stay private
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
