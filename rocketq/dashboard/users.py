"""The dashboard's own accounts: a user file of ``name:hash`` lines, one per user.

The hash is scrypt (hashlib, standard library) with a random salt per entry, written as
``scrypt$<n>$<r>$<p>$<salt>$<key>`` (base64) so that its cost can grow without breaking older
entries. The file holds no password, only these hashes; it is read again at each login, so a
user added with ``rocketq dashboard add-user`` can log in without a restart.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
import re
import secrets
import tempfile
from dataclasses import dataclass

#: scrypt's cost: 2**14 rounds of 8-block mixing, about 16 MiB and 50 ms per check, slow
#: enough to make guessing a leaked file costly, fast enough for a login.
SCRYPT_N = 2 ** 14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
KEY_BYTES = 32
#: What a user name may be: no ':' (the field separator), no spaces, nothing to escape.
USER_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
#: The shortest password add_user takes.
MIN_PASSWORD = 8


class UserFileError(ValueError):
    """A user file that cannot be read or written as it is; the message says where."""


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R,
                  p: int = SCRYPT_P) -> str:
    """``password`` salted and hashed with scrypt, in the user file's notation."""
    salt = secrets.token_bytes(SALT_BYTES)
    key = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=KEY_BYTES,
                         maxmem=256 * n * r + (1 << 20))
    return "$".join(["scrypt", str(n), str(r), str(p), _b64(salt), _b64(key)])


def verify_password(password: str, encoded: str) -> bool:
    """Whether ``password`` matches ``encoded`` (a hash_password result); False for an entry
    that is not one, never an exception."""
    try:
        scheme, n, r, p, salt, key = encoded.split("$")
        if scheme != "scrypt":
            return False
        n_, r_, p_ = int(n), int(r), int(p)
        expected = base64.b64decode(key, validate=True)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt, validate=True),
                             n=n_, r=r_, p=p_, dklen=len(expected),
                             maxmem=256 * n_ * r_ + (1 << 20))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


@functools.cache
def _dummy() -> str:
    """Checked against when the name is unknown, so that a login takes as long either way
    and its timing does not tell which names exist."""
    return hash_password(secrets.token_hex(8))


def check_user_name(name: str) -> str:
    """``name`` if it may be a user's name; ValueError saying what is allowed if not."""
    if not USER_NAME.fullmatch(name):
        raise ValueError(f"a user name is 1 to 64 letters, digits or '_.@-', not {name!r}")
    return name


@dataclass(frozen=True)
class UserFile:
    """A user file on disk (``--users PATH``)."""

    path: str

    def read(self) -> dict[str, str]:
        """``name -> hash`` of every entry; blank lines and ``#`` comments are skipped.

        Raises:
            UserFileError: the file cannot be read, or a line is not ``name:hash``.
        """
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise UserFileError(f"cannot read the user file {self.path}: "
                                f"{exc.strerror or exc}") from None
        users = {}
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            name, sep, encoded = text.partition(":")
            if not sep or not USER_NAME.fullmatch(name) or not encoded.startswith("scrypt$"):
                raise UserFileError(f"{self.path}, line {number}: not a 'name:scrypt$...' "
                                    "entry (add users with rocketq dashboard add-user)")
            users[name] = encoded
        return users

    def check(self) -> int:
        """How many users the file has; UserFileError if it cannot be used (read at start,
        so that a broken file stops the dashboard before it serves)."""
        users = self.read()
        if not users:
            raise UserFileError(f"the user file {self.path} has no users (add one with "
                                f"rocketq dashboard add-user NAME --users {self.path})")
        return len(users)

    def authenticate(self, name: str, password: str) -> bool:
        """Whether ``name`` is a user of the file with this ``password``."""
        users = self.read()
        encoded = users.get(name)
        if encoded is None:
            verify_password(password, _dummy())
            return False
        return verify_password(password, encoded)

    def add(self, name: str, password: str) -> bool:
        """Write ``name`` with ``password`` (hashed) into the file, replacing an entry of the
        same name; the file is created (readable by its owner only) if need be and replaced
        whole, never left half written. Returns whether the user was new."""
        check_user_name(name)
        if len(password) < MIN_PASSWORD:
            raise ValueError(f"a password has at least {MIN_PASSWORD} characters")
        lines: list[str] = []
        if os.path.exists(self.path):
            self.read()  # refuse to rewrite a file that is not a user file
            with open(self.path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        entry = f"{name}:{hash_password(password)}"
        new = True
        for i, line in enumerate(lines):
            if line.strip().partition(":")[0] == name:
                lines[i], new = entry, False
        if new:
            lines.append(entry)
        directory = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".users-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
        return new


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
