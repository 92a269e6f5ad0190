"""What a writing task of the Spark sink sends, and how (no Spark imports).

The task's own thread iterates Spark's Arrow batches (each ``next`` may wait on the JVM) and
turns their rows into batch elements; the worker's event loop thread sends them, up to
SEND_WINDOW requests in flight. So sends keep flowing while Spark computes the next input
batch, and a row costs no Message, coroutine or request of its own.

At least once, a topic's rows go in SEND_BATCH_MESSAGE requests of up to BATCH_BYTES, each
retried as any send is and acknowledged whole (every row of it stored). Exactly once, they go
in SINK_PREPARE requests, which the broker stores as half messages of the task's txn and
indexes as it stores them (``broker/transactions/sink.py``); each is sent once. Rows a batch does
not carry (a body of ``compress_over`` bytes or more, which goes compressed; a delay, which a
batch refuses) go one by one, as does a batch of halves for a topic the broker does not have
yet (the single send may create it) or to a broker without SINK_PREPARE.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..client.errors import BrokerError, MessageValidationError
from ..client.message import Message
from ..client.sync import _LoopThread
from ..client.unique_ids import unique_ids
from ..protocol import (
    AUTO_CREATE_TOPIC_KEY,
    IllegalTopicError,
    Property,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode_properties,
    encode_properties,
    validate_topic,
)
from ..protocol.codec import encode_batch
from ..protocol.message import MAX_PROPERTIES_SIZE
from .access import PLAIN, Access, worker_client

SEND_WINDOW = 8  # requests in flight per writing task
BATCH_BYTES = 128 * 1024  # rows' bytes per request, at most (one row may pass it alone)

#: Properties that make a message wait before delivery: such a row is sent alone.
_DELAYS = (Property.DELAY, Property.TIMER_DELIVER_MS, Property.TIMER_DELAY_MS,
           Property.TIMER_DELAY_SEC)
log = logging.getLogger("rocketq.spark")

#: Answers to a SINK_PREPARE that mean "send these halves one by one".
_ONE_BY_ONE = (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.TOPIC_NOT_EXIST)

#: How an element's properties begin: its UNIQ_KEY (the only one a plain row has).
_UNIQ_KEY = f"{Property.UNIQ_KEY}\x01"
#: A batch element: ``(flag, body, encoded properties)``.
Element = tuple[int, bytes, bytes]


@dataclass
class Halves:
    """How a task of an exactly-once sink sends: its rows as half messages of one txn of a
    sink's batch, checked (resolved from the broker's ledger) if left open ``check_after_s``."""

    sink: str
    batch: str
    txn: str
    check_after_s: int

    def properties(self) -> dict[str, str]:
        return {Property.SINK_NAME: self.sink, Property.SINK_BATCH: self.batch,
                Property.SINK_TXN: self.txn,
                Property.CHECK_IMMUNITY_TIME_IN_SECONDS: str(self.check_after_s)}


@dataclass
class Sent:
    """What a task sent: messages per broker name, and the brokers' addresses."""

    counts: dict[str, int]
    addrs: dict[str, str]

    @property
    def count(self) -> int:
        return sum(self.counts.values())


def _column(batch: Any, name: str) -> list[Any]:
    """A column of an Arrow record batch as Python values, or Nones when it is absent."""
    if name in batch.schema.names:
        return batch.column(name).to_pylist()  # type: ignore[no-any-return]
    return [None] * batch.num_rows


class Rows:
    """Turns Arrow record batches into batch elements per topic, checked as a send checks
    a message (a row the check refuses raises, and the task fails). Columns: ``body``
    (binary or string), optional ``topic`` (used when there is no ``default_topic``),
    ``tags``, ``keys`` (a string or a list of strings), ``properties`` (a map)."""

    def __init__(self, default_topic: str | None, max_message_size: int,
                 compress_over: int) -> None:
        self.default_topic = default_topic
        self.max_size = max_message_size
        self.compress_over = compress_over
        self._topics: set[str] = set()

    def _check_topic(self, topic: str | None) -> str:
        if not topic:
            raise ValueError("a row has no topic and the writer has no 'topic' option")
        try:
            validate_topic(topic)
        except IllegalTopicError as exc:
            raise MessageValidationError(str(exc)) from None
        if topic == AUTO_CREATE_TOPIC_KEY:
            raise MessageValidationError(f"the topic {topic} is reserved by the system")
        self._topics.add(topic)
        return topic

    def split(self, batch: Any) -> tuple[dict[str, list[Element]], list[Message]]:
        """The batch's rows: elements per topic, and the messages that go alone."""
        if "body" not in batch.schema.names:
            raise ValueError("the rocketq sink needs a 'body' column (binary or string)")
        names = batch.schema.names
        bodies = batch.column("body").to_pylist()
        plain = all(name not in names for name in ("tags", "keys", "properties"))
        topics = None if self.default_topic or "topic" not in names else _column(batch, "topic")
        out: dict[str, list[Element]] = {}
        alone: list[Message] = []
        default = self.default_topic
        if default is not None and default not in self._topics:
            self._check_topic(default)
        next_id = unique_ids.next
        # Below max_message_size: a body too large for a message goes to _odd, which says so.
        compress_over = self.compress_over
        if plain and topics is None and default is not None:
            # The common case: bodies only, one topic; a row costs a tuple and an id.
            elements = out[default] = []
            append = elements.append
            for body in bodies:
                if type(body) is str:  # a string column: sent UTF-8 encoded
                    body = body.encode()
                if not body or len(body) >= compress_over:
                    self._odd(default, body, None, None, None, out, alone)
                    continue
                append((0, body, f"{_UNIQ_KEY}{next_id()}\x02".encode()))
            if not elements:
                del out[default]
            return out, alone
        columns = [_column(batch, name) for name in ("tags", "keys", "properties")]
        for body, topic, tags, keys, props in zip(
                bodies, topics or [None] * len(bodies), *columns, strict=True):
            topic = default or topic  # the option wins, as in Kafka's sink
            if topic not in self._topics:
                topic = self._check_topic(topic)
            self._odd(topic, body, tags, keys, props, out, alone)
        return out, alone

    def _odd(self, topic: str, body: Any, tags: Any, keys: Any, props: Any,
             out: dict[str, list[Element]], alone: list[Message]) -> None:
        """One row through the whole check: an element of ``out[topic]``, or a message
        of ``alone``."""
        if body is None:
            raise ValueError(f"a row for {topic} has a null body")
        if isinstance(body, str):
            body = body.encode()
        if isinstance(keys, str):  # RocketMQ's own form: keys joined by spaces
            keys = keys.split()
        message = Message(topic, body, tags=tags or None, keys=keys or None,
                          properties=dict(props) if props else None)
        if not message.body:
            raise MessageValidationError("the message body is empty")
        if len(message.body) > self.max_size:
            raise MessageValidationError(f"the message body is {len(message.body)} bytes; "
                                         f"the maximum is {self.max_size}")
        properties = message.properties
        if len(message.body) >= self.compress_over or any(p in properties for p in _DELAYS):
            alone.append(message)
            return
        properties[Property.UNIQ_KEY] = unique_ids.next()
        raw = encode_properties(properties).encode()
        if len(raw) > MAX_PROPERTIES_SIZE:
            raise MessageValidationError(
                f"the message properties are over {MAX_PROPERTIES_SIZE} bytes")
        out.setdefault(topic, []).append((message.flag, message.body, raw))


def chunks(elements: list[Element], limit: int = BATCH_BYTES) -> Iterable[list[Element]]:
    """``elements`` in runs of at most ``limit`` bytes (a larger element alone)."""
    start, size = 0, 0
    for i, (_flag, body, props) in enumerate(elements):
        grown = size + len(body) + len(props) + 22
        if grown > limit and i > start:
            yield elements[start:i]
            start, grown = i, len(body) + len(props) + 22
        size = grown
    if start < len(elements):
        yield elements[start:] if start else elements


def _spread(producer: Any, topic: str) -> None:
    """Start the producer's round-robin over ``topic``'s queues at a random one, as
    RocketMQ's producers do (its index starts at a random number): a task may send only one
    or two batches, and tasks all starting at the first queue would put everything there."""
    if topic not in producer._counters:
        producer._counters[topic] = itertools.count(random.randrange(1 << 16))


async def _send_batch(producer: Any, topic: str, elements: list[Element]) -> dict[str, int]:
    """At least once: one SEND_BATCH_MESSAGE, retried as any send."""
    _spread(producer, topic)
    result = await producer._send_elements(topic, elements, None, producer.send_timeout)
    return {result.queue.broker_name: len(elements)}


async def _send_alone(producer: Any, message: Message, halves: Halves | None
                      ) -> dict[str, int]:
    """One message: a send (retried), or a half sent once."""
    if halves is None:
        result = await producer.send(message)
    else:
        message.properties.update(halves.properties())
        result = await producer._send_half(message, retries=0)
    return {result.queue.broker_name: 1}


async def _prepare(producer: Any, topic: str, elements: list[Element], halves: Halves
                   ) -> dict[str, int]:
    """Exactly once: one SINK_PREPARE to a queue of the topic, sent once. A broker that
    does not know the request or the topic gets the halves one by one instead."""
    deadline = time.monotonic() + producer.send_timeout
    route = await producer._publish_route(topic, deadline)
    _spread(producer, topic)
    mq = producer._choose(route.publish_queues, None)
    instance = producer.instance
    addr = instance.broker_addr(mq.broker_name) or \
        await instance.broker_addr_or_refresh(mq.broker_name, topic)
    cmd = RemotingCommand.request(RequestCode.SINK_PREPARE, {
        "topic": topic, "queueId": mq.queue_id, "producerGroup": producer.group,
        "sink": halves.sink, "batch": halves.batch, "txn": halves.txn,
        "checkImmunity": halves.check_after_s, "bornTimestamp": int(time.time() * 1000)},
        encode_batch(elements))
    r = await instance.remoting.invoke(addr, cmd, max(0.001, deadline - time.monotonic()))
    if r.code == ResponseCode.SUCCESS:
        return {mq.broker_name: len(elements)}
    if r.code not in _ONE_BY_ONE:
        raise BrokerError(r.code, f"preparing {len(elements)} halves of txn {halves.txn} on "
                                  f"{mq.broker_name} refused: {r.remark}")
    counts: dict[str, int] = {}
    for flag, body, props in elements:
        message = Message(topic, body, flag=flag)
        message.properties = decode_properties(props)
        for broker, n in (await _send_alone(producer, message, halves)).items():
            counts[broker] = counts.get(broker, 0) + n
    return counts


def send_rows(loop: _LoopThread, make_producer: Callable[[], Any], default_topic: str | None,
              batches: Iterable[Any], halves: Halves | None = None) -> Sent:
    """Send every row of ``batches`` (Arrow record batches) with a producer made by
    ``make_producer`` on ``loop``. The first failure raises (pending sends are cancelled);
    at least once, Spark's retry of the task sends its rows again, and exactly once, the
    failed attempt's halves are rolled back and its retry sends them under a new txn."""
    producer = loop.run(_started(make_producer))
    window = threading.Semaphore(SEND_WINDOW)
    sent: list[concurrent.futures.Future[dict[str, int]]] = []
    failed = threading.Event()

    def done(future: concurrent.futures.Future[dict[str, int]]) -> None:
        if not future.cancelled() and future.exception() is not None:
            failed.set()
        window.release()

    def submit(coro: Any) -> None:
        window.acquire()
        if failed.is_set():
            coro.close()
            window.release()
            _raise_first(sent)
            raise RuntimeError("a send of this task failed")
        future = asyncio.run_coroutine_threadsafe(coro, loop.loop)
        sent.append(future)
        future.add_done_callback(done)

    rows = Rows(default_topic, producer.max_message_size, producer.compress_over)
    counts: dict[str, int] = {}
    finished = False
    try:
        for batch in batches:  # on this thread: the loop sends meanwhile
            by_topic, alone = rows.split(batch)
            for topic, elements in by_topic.items():
                for chunk in chunks(elements):
                    submit(_send_batch(producer, topic, chunk) if halves is None
                           else _prepare(producer, topic, chunk, halves))
            for message in alone:
                submit(_send_alone(producer, message, halves))
        concurrent.futures.wait(sent, return_when=concurrent.futures.FIRST_EXCEPTION)
        _raise_first(sent)
        for future in sent:
            for broker, n in future.result().items():
                counts[broker] = counts.get(broker, 0) + n
        finished = True
    finally:
        for future in sent:
            future.cancel()
        try:
            addrs = loop.run(_stopped(producer, list(counts)))
        except Exception:
            if finished:
                raise
            # The write failed already: its error is the one the task reports.
            log.warning("stopping the producer of a failed write", exc_info=True)
    return Sent(counts, addrs)


def send_batches(namesrv: str, default_topic: str | None, group: str,
                 batches: Iterable[Any], halves: Halves | None = None,
                 access: Access = PLAIN) -> Sent:
    """Send each row of Arrow record batches as a message (see :func:`send_rows`: the rows are read
    on this thread and sent in batches from the worker's event loop, up to SEND_WINDOW
    requests in flight). The first failed send raises (the Spark task then fails and is
    retried: at least once). With ``halves``, the rows go as half messages, each sent once
    (no retry: a failed task's halves are rolled back, and its retry sends them under a new
    txn). Columns: ``body`` (binary or string), optional ``topic`` (used when there is no
    ``default_topic``), ``tags``, ``keys`` (a string or a list of strings), ``properties``
    (a map)."""
    loop, _client = worker_client(access)
    return send_rows(loop, partial(access.producer, group, namesrv), default_topic, batches,
                     halves)


def _raise_first(futures: list[concurrent.futures.Future[dict[str, int]]]) -> None:
    """Raise the error of the first of ``futures`` that failed, if one did."""
    for future in futures:
        if future.done() and not future.cancelled() and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]


async def _started(make_producer: Callable[[], Any]) -> Any:
    producer = make_producer()
    await producer.start()
    return producer


async def _stopped(producer: Any, brokers: list[str]) -> dict[str, str]:
    """The brokers' addresses, once the producer is shut down."""
    addrs = {name: producer.instance.broker_addr(name) or "" for name in brokers}
    await producer.shutdown()
    return addrs
