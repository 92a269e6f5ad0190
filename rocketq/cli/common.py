"""What every command of ``rocketq`` shares: the help formatter that shows defaults and the
parser that uses it, the error of a server that cannot listen, the stop on a signal, and a
failure as the reason part of a one-line error."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import signal
from collections.abc import Iterator
from typing import Any


class HelpFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to the help of an option whose default is worth telling (not None
    or False) and whose help does not already name one, so every default shows in --help."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = action.default
        if (not text or not action.option_strings or default is None or default is False
                or default is argparse.SUPPRESS or "default" in text.lower()):
            return text
        return f"{text} (default: %(default)s)"


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """HelpFormatter that keeps a description's own line breaks (one with examples)."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help shows defaults; its subcommands' parsers are Parsers too
    (argparse makes them of the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


class ListenError(OSError):
    """A server of this process could not listen on its address: the message names the
    server and the address."""


@contextlib.contextmanager
def _listening(role: str) -> Iterator[None]:
    """Turn a bind failure while ``role`` starts into a ListenError that names ``role`` and
    the address (the OSError's filename when the socket layer gives it)."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        where = f" on {exc.filename}" if exc.filename else ""
        reason = (exc.strerror or str(exc)).lower()
        hint = " (is another one running?)" if exc.errno == errno.EADDRINUSE else ""
        raise ListenError(exc.errno, f"the {role} cannot listen{where}: {reason}{hint}") \
            from None


def _stop_on_signal() -> asyncio.Event:
    """An event set on SIGINT or SIGTERM (Ctrl-C, or a service manager stopping us). Made
    before a server says it is ready, so a signal right after that still stops it cleanly."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def failure_reason(exc: BaseException) -> str:
    """An exception as the reason part of a one-line error (its class when it has no
    message, as a bare TimeoutError has not)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
