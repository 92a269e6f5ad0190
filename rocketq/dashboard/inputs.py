"""What a person types into the dashboard, checked before anything is asked of the cluster.

Each reader takes the raw text of a form field or query parameter and returns the value or
raises BadInput with a message that says what was wrong and what is expected; the dashboard
answers that with a 400 page. The checks are RocketMQ's own where it has them (topic names,
group names), so a name the cluster would refuse never reaches it.

Times are UTC throughout: a date and time typed without a zone is read as UTC, and every time
the dashboard writes into a field or a table is UTC, so that what a page shows does not depend
on the zone of the machine it runs on.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping

from ..protocol import IllegalTopicError, validate_topic

#: Group names: RocketMQ's Validators.checkGroup (the topic rule, 255 characters at most).
_GROUP = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")
#: Message ids: a unique id (UNIQ_KEY: 32 hex digits, 34 from a RocketMQ 5 client) or an
#: offset id (32 hex digits); 56 for either made on an IPv6 host.
_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}(?:[0-9A-Fa-f]{2}|[0-9A-Fa-f]{24})?")
#: Message types a topic may take (RocketMQ 5's TopicMessageType).
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
#: Longest body a test message may have (the broker's default maxMessageSize is 4 MiB; a
#: form is not the place for more than this).
MAX_TEST_BODY = 64 * 1024
#: Most queues a topic may be given from a form.
MAX_QUEUES = 1024
#: The times the dashboard takes and shows: from the epoch to the last ms of year 9999 (the
#: end of Python's datetime), UTC.
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
MAX_MS = 253_402_300_799_999


class BadInput(ValueError):
    """Input the dashboard refuses; ``str()`` is the message shown to the person, and
    ``status`` the HTTP status it is answered with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def text(form: Mapping[str, object], name: str, *, required: bool = True,
         limit: int = 1024) -> str:
    """A form field as stripped text; BadInput if missing (when ``required``) or too long."""
    value = form.get(name)
    if value is None or not isinstance(value, str):
        value = ""
    value = value.strip()
    if required and not value:
        raise BadInput(f"the field '{name}' is required")
    if len(value) > limit:
        raise BadInput(f"the field '{name}' is longer than {limit} characters")
    return value


def secret(form: Mapping[str, object], name: str, *, limit: int = 1024) -> str:
    """A form field exactly as sent, not stripped (a password may begin or end with spaces);
    BadInput if too long."""
    value = form.get(name)
    if not isinstance(value, str):
        return ""
    if len(value) > limit:
        raise BadInput(f"the field '{name}' is longer than {limit} characters")
    return value


def topic_name(value: str) -> str:
    """A topic name RocketMQ accepts (letters, digits, '%', '|', '_', '-'; 127 characters)."""
    try:
        validate_topic(value)
    except IllegalTopicError as exc:
        raise BadInput(f"not a valid topic name: {exc}") from None
    return value


def group_name(value: str) -> str:
    """A consumer group name RocketMQ accepts."""
    if not _GROUP.fullmatch(value):
        raise BadInput(f"not a valid group name: {value!r} (allowed are letters, digits, "
                       "'%', '|', '_' and '-', at most 255)")
    return value


def message_id(value: str) -> str:
    """A message id: the producer's unique id or the broker's offset id, in hex."""
    value = value.strip()
    if not _MSG_ID.fullmatch(value):
        raise BadInput(f"not a message id: {value!r} (a message id is 32 hexadecimal digits, "
                       "34 from a RocketMQ 5 client, as a send returns it, or the broker's "
                       "offset id)")
    return value.upper()


def integer(value: str, name: str, *, low: int = 0, high: int = 2 ** 63 - 1) -> int:
    """A whole number between ``low`` and ``high``."""
    try:
        number = int(value.strip())
    except ValueError:
        raise BadInput(f"{name} must be a whole number, not {value!r}") from None
    if not low <= number <= high:
        raise BadInput(f"{name} must be between {low} and {high}, not {number}")
    return number


def message_type(value: str) -> str:
    """One of RocketMQ 5's message types, upper case."""
    upper = value.strip().upper()
    if upper not in MESSAGE_TYPES:
        raise BadInput(f"the message type must be one of {', '.join(MESSAGE_TYPES)}, "
                       f"not {value!r}")
    return upper


def perm(value: str) -> int:
    """Topic permission bits as RocketMQ takes them: 2 (write), 4 (read) or 6 (both)."""
    number = integer(value, "the permission")
    if number not in (2, 4, 6):
        raise BadInput(f"the permission must be 2 (write only), 4 (read only) or 6 "
                       f"(read and write), not {number}")
    return number


def timestamp(value: str, name: str) -> int:
    """A point in time as ms since the epoch, from ms since the epoch or a date-time as a
    browser's datetime-local field sends it (``2024-05-01T12:00``, UTC unless it names its
    zone). It must lie between the epoch and the end of year 9999 (``MAX_MS``): whatever is
    asked of the cluster with it can also be written back on a page."""
    value = value.strip()
    if len(value) > 64:
        raise BadInput(f"{name} is not a time: it is longer than 64 characters")
    if value.isascii() and value.isdigit():
        ms = int(value)
    else:
        try:
            when = datetime.datetime.fromisoformat(value)
        except ValueError:
            raise BadInput(f"{name} is not a time: {value!r} (give a date and time in UTC "
                           "such as 2024-05-01T12:00, or ms since the epoch)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        delta = when - EPOCH
        ms = delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000
    if not 0 <= ms <= MAX_MS:
        raise BadInput(f"{name} is out of range: {value!r} (times go from 1970-01-01 to "
                       "9999-12-31, UTC)")
    return ms


def time_field(ms: int) -> str:
    """ms since the epoch as a datetime-local field's value (UTC, to the second); a time
    before the epoch or past ``MAX_MS`` is written as the nearest of the two, so that any
    number gives a field's value."""
    ms = min(max(int(ms), 0), MAX_MS)
    return (EPOCH + datetime.timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S")


def time_text(ms: int) -> str:
    """ms since the epoch as a person reads it in a notice: ``2024-05-01 12:00:00 UTC``."""
    return time_field(ms).replace("T", " ") + " UTC"
