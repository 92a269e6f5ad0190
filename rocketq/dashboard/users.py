"""The dashboard's own accounts: a user file of ``name:hash`` lines, one per user.

The hash is scrypt (hashlib, standard library) with a random salt per entry, written as
``scrypt$<n>$<r>$<p>$<salt>$<key>`` (base64) so that its cost can grow without breaking older
entries. The file holds no password, only these hashes. The dashboard reads it again whenever
it changes on disk (it looks at every request), so a user added with ``rocketq dashboard
add-user`` can log in without a restart, and a user removed from the file, or given a new
password, is logged out at the next request (``stamp``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import os
import re
import secrets
import tempfile
import threading

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

log = logging.getLogger("rocketq.dashboard")


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


def stamp(encoded: str) -> str:
    """A short fingerprint of a user's entry (``name:hash``'s hash), kept in the session at
    login: a new password makes a new entry, and so ends the sessions logged in with the old
    one. It says nothing of the password: it is a digest of a salted scrypt hash."""
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]


class UserFile:
    """A user file on disk (``--users PATH``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        #: (inode, mtime, size) of the file last read, and what it held.
        self._seen: tuple[int, int, int] | None = None
        self._users: dict[str, str] = {}
        self._problem: str | None = None

    def __repr__(self) -> str:
        return f"UserFile({self.path!r})"

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

    def current(self) -> dict[str, str]:
        """``name -> hash`` as the file holds it now: read again only when it changed on
        disk (another inode, mtime or size), so that asking at every request costs one
        ``stat``. A file that cannot be read or is broken counts as having no users (every
        login fails, every session ends) and says why in the log, once per change."""
        try:
            info = os.stat(self.path)
            key: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except OSError:
            key = None
        with self._lock:
            if key is not None and key == self._seen:
                return self._users
            try:
                users, problem = self.read(), None
            except UserFileError as exc:
                users, problem = {}, str(exc)
            if problem and problem != self._problem:
                log.warning("dashboard: nobody can log in: %s", problem)
            self._seen, self._users, self._problem = key, users, problem
            return users

    def entry(self, name: str) -> str | None:
        """The hash of ``name`` in the file as it is now, None if it is not a user."""
        return self.current().get(name)

    def authenticate(self, name: str, password: str) -> str | None:
        """The entry (hash) of ``name`` if it is a user of the file with this ``password``,
        else None. It takes as long for a name the file does not hold, and it is slow (an
        scrypt hash): the dashboard calls it in a worker thread."""
        encoded = self.entry(name)
        if encoded is None:
            verify_password(password, _dummy())
            return None
        return encoded if verify_password(password, encoded) else None

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
