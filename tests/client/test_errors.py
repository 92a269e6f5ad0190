"""One root for the client's errors: every error a client method raises is a ClientError, and
every error a public method's docstring names is exported from ``rocketq`` and derives from
ClientError.

Each public method documents its errors in a ``Raises:`` section (Google style): one
``ClassName: when`` line each, or ``Nothing.`` (or ``Nothing: why``) alone. An asyncio
method without a section of its own raises what its synchronous twin documents; a class
documents its constructor's errors in the class docstring.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import time

import pytest

import rocketq
import rocketq.aio
from rocketq import (
    Admin,
    ClientError,
    ClientTimeoutError,
    ConnectionClosedError,
    Message,
    NameServerError,
    Producer,
    PullConsumer,
    TransactionProducer,
)
from rocketq.client.sync import _LoopThread

from ..servers import ServerThread

CLIENT_CLASSES = ["Producer", "TransactionProducer", "PushConsumer", "PullConsumer",
                  "SimpleConsumer", "Admin"]
_ENTRY = re.compile(r"(\w+)(?::|\.$)")


def raises_section(doc: str | None) -> list[str] | None:
    """The class names a docstring's ``Raises:`` section lists (``[]`` for ``Nothing``), or
    None when it has no such section."""
    if not doc:
        return None
    lines = inspect.cleandoc(doc).splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "Raises:":
            continue
        header = len(line) - len(line.lstrip())
        names: list[str] = []
        entry_indent = None
        for body in lines[i + 1:]:
            if not body.strip():
                break
            indent = len(body) - len(body.lstrip())
            if indent <= header:
                break
            if entry_indent is None:
                entry_indent = indent
            if indent > entry_indent:
                continue  # a description's continuation line
            match = _ENTRY.match(body.strip())
            assert match, f"not a 'ClassName: when' line: {body.strip()!r}"
            names.append(match.group(1))
        assert names, "an empty Raises section"
        if "Nothing" in names:
            assert names == ["Nothing"], "'Nothing' with other errors"
            return []
        return names
    return None


def public_methods(cls: type) -> dict[str, object]:
    """Public methods of ``cls``, inherited ones included (properties are attributes)."""
    out = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, staticmethod | classmethod):
            raw = raw.__func__
        if inspect.isfunction(raw):
            out[name] = raw
    return out


def documented() -> list[tuple[str, list[str] | None]]:
    """``(where, errors)`` for every constructor and public method of the client classes
    (synchronous and asyncio) and Message; errors is None where nothing is documented."""
    found = []
    for name in CLIENT_CLASSES:
        sync_cls, async_cls = getattr(rocketq, name), getattr(rocketq.aio, name)
        sync_methods = public_methods(sync_cls)
        found.append((f"rocketq.{name}()", raises_section(sync_cls.__doc__)))
        found.append((f"rocketq.aio.{name}()", raises_section(async_cls.__doc__)
                      or raises_section(sync_cls.__doc__)))
        for method, fn in sync_methods.items():
            found.append((f"rocketq.{name}.{method}", raises_section(fn.__doc__)))
        for method, fn in public_methods(async_cls).items():
            errors = raises_section(fn.__doc__)
            if errors is None and method in sync_methods:
                errors = raises_section(sync_methods[method].__doc__)
            found.append((f"rocketq.aio.{name}.{method}", errors))
    found.append(("rocketq.Message()", raises_section(Message.__doc__)))
    for method, fn in public_methods(Message).items():
        found.append((f"rocketq.Message.{method}", raises_section(fn.__doc__)))
    return found


def test_every_public_method_documents_exported_client_errors():
    check_the_parser()
    problems = []
    for where, errors in documented():
        if errors is None:
            problems.append(f"{where} has no Raises section")
            continue
        for error in errors:
            exported = getattr(rocketq, error, None)
            if error not in rocketq.__all__ or exported is None:
                problems.append(f"{where} documents {error}, which rocketq does not export")
            elif not (inspect.isclass(exported) and issubclass(exported, ClientError)):
                problems.append(f"{where} documents {error}, which is not a ClientError")
            elif getattr(rocketq.aio, error, None) is not exported:
                problems.append(f"{where} documents {error}, which rocketq.aio lacks")
    assert not problems, "\n".join(problems)


def check_the_parser():
    """The parser reads entries, skips continuation lines, stops at the section's end."""
    def documented_fn():
        """Summary.

        Raises:
            BrokerError: refused, and the description
                goes on here.
            ClientTimeoutError: too slow.

        After the section.
        """

    def nothing():
        """Summary.

        Raises:
            Nothing.
        """

    assert raises_section(documented_fn.__doc__) == ["BrokerError", "ClientTimeoutError"]
    assert raises_section(nothing.__doc__) == []
    assert raises_section("Summary only.") is None


def test_the_errors_keep_their_builtin_bases():
    assert issubclass(ConnectionClosedError, ClientError)
    assert issubclass(ConnectionClosedError, ConnectionError)
    assert issubclass(ClientTimeoutError, TimeoutError)
    assert issubclass(rocketq.ArgumentTypeError, TypeError)
    assert issubclass(rocketq.InvalidArgumentError, ValueError)
    assert issubclass(rocketq.MessageValidationError, ValueError)
    from rocketq.remoting import RemotingError, RemotingTimeoutError

    assert issubclass(RemotingError, ClientError)
    assert issubclass(RemotingTimeoutError, ClientTimeoutError)


def test_a_send_to_a_broker_that_is_down_is_a_client_error(servers):
    servers.create_topic("Down", 2)
    with Producer("pg", namesrv=servers.namesrv, send_timeout=2.0) as producer:
        sent = producer.send(Message("Down", b"before"))
        servers.stop_broker(servers.brokers[0])
        began = time.monotonic()
        try:
            producer.send(Message("Down", b"after"))
        except ClientError as exc:
            error: Exception = exc
        else:
            raise AssertionError("a send to a stopped broker succeeded")
        assert time.monotonic() - began < 10
        assert "connect" in str(error) or "closed" in str(error) or "route" in str(error), error
    # Other calls that reach the broker directly fail the same way.
    with Admin(namesrv=servers.namesrv) as admin:
        with pytest.raises(ClientError):
            admin.view_message(sent.offset_msg_id)


def test_an_asyncio_send_to_a_broker_that_is_down_is_a_client_error(servers):
    servers.create_topic("Down", 2)

    async def go():
        async with rocketq.aio.Producer("pg", namesrv=servers.namesrv) as producer:
            await producer.send(Message("Down", b"before"))
            servers.stop_broker(servers.brokers[0])
            with pytest.raises(ClientError):
                await producer.send(Message("Down", b"after"))

    asyncio.run(asyncio.wait_for(go(), 30))


def test_calls_with_the_nameserver_down_are_client_errors(tmp_path):
    st = ServerThread(tmp_path)
    try:
        st.start_namesrv()
        st.start_broker()
        st.create_topic("Orphan", 2)
        namesrv = st.namesrv
        # The whole cluster goes down under a producer that knows the route: the broker
        # refuses connections and no NameServer answers for a fresher route.
        running = Producer("running", namesrv=namesrv, send_timeout=2.0).start()
        running.send(Message("Orphan", b"before"))
        for broker in list(st.brokers):
            st.stop_broker(broker)
        st.call(st.namesrvs[0].stop())
        with pytest.raises(ClientError):
            running.send(Message("Orphan", b"after"))
        running.shutdown()
        # Clients that start with the NameServer down.
        with Producer("pg", namesrv=namesrv) as producer:
            for call in (lambda: producer.send(Message("Orphan", b"x")),
                         lambda: producer.send_batch([Message("Orphan", b"x")]),
                         lambda: producer.send_oneway(Message("Orphan", b"x")),
                         lambda: producer.request(Message("Orphan", b"x"), timeout=1.0)):
                with pytest.raises(NameServerError, match="no NameServer answered"):
                    call()
        with TransactionProducer("tg", object(), namesrv=namesrv) as tx:
            with pytest.raises(ClientError):
                tx.send_message_in_transaction(Message("Orphan", b"x"))
        with Admin(namesrv=namesrv) as admin:
            with pytest.raises(ClientError):
                admin.masters()
            with pytest.raises(ClientError):
                admin.create_topic("Orphan2")
        with PullConsumer("cg", namesrv=namesrv) as consumer:
            with pytest.raises(ClientError):
                consumer.fetch_queues("Orphan")
    finally:
        st.stop()


def test_a_sync_call_that_times_out_raises_a_client_timeout_error():
    loop = _LoopThread.get()
    with pytest.raises(ClientTimeoutError) as waited:
        loop.run(asyncio.sleep(10), timeout=0.2)
    assert isinstance(waited.value, TimeoutError)

    async def times_out():
        await asyncio.wait_for(asyncio.sleep(10), 0.05)

    with pytest.raises(ClientTimeoutError):
        loop.run(times_out(), timeout=5)


def test_a_request_nobody_answers_is_a_client_timeout_error(servers):
    servers.create_topic("Asked", 1)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        with pytest.raises(ClientTimeoutError, match="no reply"):
            producer.request(Message("Asked", b"anyone?"), timeout=0.5)
