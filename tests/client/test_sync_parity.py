"""The synchronous classes (``rocketq``) mirror the asyncio ones (``rocketq.aio``) exactly.

Each sync class wraps its async twin, so the two must offer the same public methods with the
same parameters (names, kinds, defaults, annotations); the only difference allowed is that the
async ones may be coroutines. ``async with`` maps to ``with``. Anything else that differs is
listed in EXCEPTIONS with its reason; every other difference fails here, so a method added to
one side only cannot go unnoticed. The sync wrappers must also run every call on the client's
event loop thread, since the async objects' state belongs to that loop.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import rocketq
import rocketq.aio
from rocketq.client.sync import _LoopThread

CLASSES = ["Admin", "Producer", "PullConsumer", "PushConsumer", "SimpleConsumer",
           "TransactionProducer"]

#: (sync class, member) -> why the two APIs differ there. An entry also covers the sync
#: class's subclasses (TransactionProducer inherits Producer's).
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("Producer", "send_async"):
        "sync only: returns a concurrent.futures.Future instead of blocking; asyncio code "
        "gets the same with asyncio.create_task(producer.send(...)) (checked against send "
        "in test_send_async_takes_the_parameters_of_send)",
    ("Producer", "group"):
        "sync only: a read-only view of the async producer's plain ``group`` attribute",
    ("PushConsumer", "client_id"):
        "sync only: a read-only view of the async consumer's ``instance.client_id``",
    ("PushConsumer", "process_queues"):
        "async only: the live ProcessQueue objects belong to the event loop; another thread "
        "reading them would race the pulls",
}

#: Context-manager methods: ``async with`` on the async class, ``with`` on the sync one.
DUNDERS = {"__aenter__": "__enter__", "__aexit__": "__exit__"}


def members(cls: type, dunders: set[str]) -> dict[str, Any]:
    """Public methods and properties of ``cls`` (inherited ones included), by name as the
    sync API names them; plain data attributes are not API surface compared here."""
    out = {}
    for name in dir(cls):
        if name.startswith("_") and name not in dunders:
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, property | staticmethod | classmethod) or inspect.isfunction(raw):
            out[DUNDERS.get(name, name)] = raw
    return out


def parameters(fn: Any) -> list[tuple[str, Any, Any, Any]]:
    """``(name, kind, default, annotation)`` of each parameter but ``self``."""
    if isinstance(fn, staticmethod | classmethod):
        fn = fn.__func__
    params = list(inspect.signature(fn).parameters.values())
    if not isinstance(fn, staticmethod):
        params = params[1:]
    return [(p.name, p.kind, p.default, p.annotation) for p in params]


def excused(sync_cls: type, name: str) -> bool:
    return any((base.__name__, name) in EXCEPTIONS for base in sync_cls.__mro__)


def pairs() -> Iterator[tuple[str, type, type]]:
    for name in CLASSES:
        yield name, getattr(rocketq, name), getattr(rocketq.aio, name)


@pytest.mark.parametrize("name", CLASSES)
def test_same_public_methods_and_signatures(name):
    sync_cls, async_cls = getattr(rocketq, name), getattr(rocketq.aio, name)
    sync = members(sync_cls, {"__enter__", "__exit__"})
    asyn = members(async_cls, set(DUNDERS))
    problems = []
    for member in sorted(set(sync) | set(asyn)):
        if excused(sync_cls, member):
            continue
        if member not in sync:
            problems.append(f"{name}.{member} is only in rocketq.aio")
            continue
        if member not in asyn:
            problems.append(f"{name}.{member} is only in rocketq")
            continue
        s, a = sync[member], asyn[member]
        if isinstance(s, property) or isinstance(a, property):
            if not (isinstance(s, property) and isinstance(a, property)):
                problems.append(f"{name}.{member} is a property on one side only")
            continue
        if inspect.iscoroutinefunction(s) or inspect.isasyncgenfunction(s):
            problems.append(f"rocketq.{name}.{member} is a coroutine")
        if parameters(s) != parameters(a):
            problems.append(f"{name}.{member}: rocketq{inspect.signature(s)} != "
                            f"rocketq.aio{inspect.signature(a)}")
    assert not problems, "\n".join(problems)


def keyword_options(cls: type) -> dict[str, tuple[Any, Any]]:
    """``name -> (default, annotation)`` of the keyword-only options of ``cls()``, those it
    passes on through ``**options`` included (AsyncTransactionProducer's are the producer's);
    ``instance`` (a ClientInstance of an event loop) is the asyncio classes' own."""
    out: dict[str, tuple[Any, Any]] = {}
    for name, kind, default, annotation in parameters(cls.__init__):
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(keyword_options(cls.__mro__[1]))
        elif kind is inspect.Parameter.KEYWORD_ONLY and name != "instance":
            out[name] = (default, annotation)
    return out


@pytest.mark.parametrize("name", CLASSES)
def test_constructors_take_the_async_options_by_name(name):
    """Every sync class's signature names every option of the asyncio one, with the same
    defaults and annotations (help() and editors show them), and takes no ``**options``."""
    sync_cls, async_cls = getattr(rocketq, name), getattr(rocketq.aio, name)
    sync = parameters(sync_cls.__init__)
    assert all(p[1] is not inspect.Parameter.VAR_KEYWORD for p in sync), "takes **options"
    positional = [p for p in sync if p[1] is not inspect.Parameter.KEYWORD_ONLY]
    assert positional == [p for p in parameters(async_cls.__init__)
                          if p[1] is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert keyword_options(sync_cls) == keyword_options(async_cls)


def test_consumer_options_reach_the_asyncio_consumers():
    push = rocketq.PushConsumer("sig-g", namesrv="127.0.0.1:1", model="broadcasting",
                                from_where="first", pull_batch_size=7, orderly=True,
                                max_reconsume_times=3, offset_store_dir="/nonexistent-dir")
    pull = rocketq.PullConsumer("sig-g", namesrv="127.0.0.1:1", from_where="first",
                                pull_batch_size=9, auto_commit=False, max_poll_records=11)
    for consumer in (push, pull):
        consumer.shutdown()
    inner = push._async
    assert (inner.pull_batch_size, inner.orderly, inner.max_reconsume_times) == (7, True, 3)
    inner = pull._async
    assert (inner.pull_batch_size, inner.auto_commit, inner.max_poll_records) == (9, False, 11)


@pytest.mark.parametrize("name", ["Producer", "TransactionProducer"])
def test_producer_options_reach_the_asyncio_producers(name):
    """Every option of the sync producers (their signatures are checked by
    test_constructors_take_the_async_options_by_name) is passed on."""
    sync_cls = getattr(rocketq, name)
    shown = inspect.signature(sync_cls).parameters
    assert shown["send_timeout"].default == 3.0 and "tls" in shown
    # Every option reaches the asyncio producer.
    tx = name == "TransactionProducer"
    args = ("sig-g", object(), "127.0.0.1:1") if tx else ("sig-g", "127.0.0.1:1")
    extra = {"check_threads": 2} if tx else {}
    producer = sync_cls(*args, **extra, send_timeout=7.5, retries=5, compress_over=99,
                        max_message_size=12345, latency_fault_tolerance=True,
                        default_topic_queue_nums=3, auto_batch=True, batch_max_bytes=777)
    inner = producer._async
    assert (inner.send_timeout, inner.retries, inner.compress_over, inner.max_message_size,
            inner.default_topic_queue_nums) == (7.5, 5, 99, 12345, 3)
    assert inner.fault is not None and inner.accumulator is not None
    assert inner.accumulator.max_bytes == 777
    if tx:
        assert inner.executor._max_workers == 2


def test_exceptions_are_current():
    """Every listed exception names a member that exists on exactly one side."""
    for (cls_name, member), reason in EXCEPTIONS.items():
        assert reason
        sync_cls, async_cls = getattr(rocketq, cls_name), getattr(rocketq.aio, cls_name)
        in_sync = member in members(sync_cls, {"__enter__", "__exit__"})
        in_async = member in members(async_cls, set(DUNDERS))
        assert in_sync != in_async, f"{cls_name}.{member} is listed but not a difference"


def test_send_async_takes_the_parameters_of_send():
    send_async = parameters(rocketq.Producer.send_async)
    assert [p for p in send_async if p[0] != "callback"] == parameters(rocketq.aio.Producer.send)


class Arg(float):
    """A distinct argument value; iterable (as itself) for wrappers that copy an iterable
    into a list, and a float for wrappers that add to a timeout."""

    def __iter__(self) -> Iterator[Arg]:
        return iter((self,))


def build(name: str) -> Any:
    cls = getattr(rocketq, name)
    if name == "Admin":
        return cls("127.0.0.1:1")
    if name == "TransactionProducer":
        return cls("parity-tx", object(), "127.0.0.1:1")
    return cls("parity", "127.0.0.1:1")


@pytest.mark.parametrize("name", CLASSES)
def test_each_call_runs_on_the_loop_with_its_arguments(name):
    """Every public sync method calls its async twin on the loop thread, with each argument
    passed on (a list copy of an iterable counts as passed on)."""
    client = build(name)
    loop_thread = _LoopThread.get().thread
    for member, raw in members(type(client), set()).items():
        if excused(type(client), member) or isinstance(raw, property):
            continue
        target = getattr(type(client._async), member)
        calls: list[tuple[threading.Thread, inspect.BoundArguments]] = []

        def record(*args: Any, _target: Any = target, _calls: list[Any] = calls,
                   **kwargs: Any) -> None:
            bound = inspect.signature(_target).bind(None, *args, **kwargs)
            _calls.append((threading.current_thread(), bound))

        if inspect.iscoroutinefunction(target):
            async def recorder(*args: Any, _record: Any = record, **kwargs: Any) -> None:
                _record(*args, **kwargs)
        else:
            recorder = record
        setattr(client._async, member, recorder)
        sent = {p[0]: Arg(i + 0.5) for i, p in enumerate(parameters(raw))
                if p[1] not in (inspect.Parameter.VAR_POSITIONAL,
                                inspect.Parameter.VAR_KEYWORD)}
        result = getattr(client, member)(**sent)
        if isinstance(result, concurrent.futures.Future):
            result.result(5)
        delattr(client._async, member)
        assert len(calls) == 1, f"{name}.{member} did not call its async twin once"
        thread, bound = calls[0]
        assert thread is loop_thread, f"{name}.{member} ran off the event loop thread"
        for param, value in sent.items():
            got = bound.arguments.get(param)
            assert got is value or got == [value], f"{name}.{member} dropped {param}"


def test_send_async_passes_every_send_option():
    producer = build("Producer")
    calls: list[dict[str, Any]] = []

    async def send(message: Any, **options: Any) -> str:
        calls.append({"message": message, **options})
        return "sent"

    producer._async.send = send
    done = threading.Event()
    sent = {"queue": Arg(1), "selector": Arg(2), "arg": Arg(3), "timeout": Arg(4)}
    future = producer.send_async(Arg(0), lambda f: done.set(), **sent)
    assert future.result(5) == "sent"
    assert done.wait(5)
    assert calls == [{"message": Arg(0), **sent}]
    assert all(calls[0][k] is v for k, v in sent.items())
