"""What goes into the CommitLog and what comes back: a message on its way in (RocketMQ's
MessageExtBrokerInner), a batch (MessageExtBatch), and where each was stored (PutResult, and
BatchResults for a batch's elements)."""

from __future__ import annotations

import enum
import time
from array import array
from collections.abc import Sequence
from typing import overload

from ..protocol import MessageRecord, encode_properties
from ..protocol.message import host_to_bytes
from . import records


class StoreMessage:
    """A message on its way into the store: what a SEND request carries, before the store
    assigns offsets and timestamps (RocketMQ's MessageExtBrokerInner).

    ``properties`` is the encoded property string as UTF-8 bytes (``name\\x01value\\x02...``,
    as a SEND request carries it); :meth:`create` builds one from a dict.
    """

    __slots__ = ("topic", "queue_id", "body", "flag", "properties", "sysflag", "born_timestamp",
                 "born_host", "born_port", "reconsume_times", "prepared_transaction_offset")

    def __init__(self, topic: str, body: bytes, queue_id: int = 0, *,
                 properties: bytes | str = b"",
                 flag: int = 0, sysflag: int = 0, born_timestamp: int = 0,
                 born_host: bytes = b"\x7f\x00\x00\x01", born_port: int = 0,
                 reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.body = body
        self.flag = flag
        self.properties = properties.encode() if isinstance(properties, str) else properties
        self.sysflag = sysflag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.born_port = born_port
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset

    @classmethod
    def create(cls, topic: str, body: bytes, queue_id: int = 0, *, tags: str | None = None,
               keys: Sequence[str] | str | None = None,
               properties: dict[str, str] | None = None, born_host: str = "127.0.0.1",
               born_port: int = 0, **kwargs: int) -> StoreMessage:
        """Build a message from friendly arguments (tags, keys, a property dict)."""
        props = dict(properties or {})
        if tags:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = keys if isinstance(keys, str) else " ".join(keys)
        kwargs.setdefault("born_timestamp", int(time.time() * 1000))
        return cls(topic, body, queue_id, properties=encode_properties(props).encode(),
                   born_host=host_to_bytes(born_host), born_port=born_port, **kwargs)

    @classmethod
    def from_record(cls, record: MessageRecord, topic: str, queue_id: int, properties: str,
                    **overrides: int) -> StoreMessage:
        """A stored record written again elsewhere (delivery of a delayed or committed
        message, a consumer's retry): body, flags and birth kept, destination replaced."""
        fields = dict(flag=record.flag, sysflag=record.sysflag,
                      born_timestamp=record.born_timestamp,
                      born_host=host_to_bytes(record.born_host[0]),
                      born_port=record.born_host[1], reconsume_times=record.reconsume_times,
                      prepared_transaction_offset=record.prepared_transaction_offset)
        fields.update(overrides)
        return cls(topic, record.body, queue_id, properties=properties, **fields)


class BatchMessage:
    """A batch on its way into the store (RocketMQ's MessageExtBatch): the elements stay in
    the request's body and are encoded straight into consecutive records of one queue, with
    ``suffix`` (encoded properties, such as the cluster name) added to each element's.

    The body is ``[TOTALSIZE][MAGIC][BODYCRC][FLAG][BODYLEN][body][PROPLEN i16][properties]``
    per element (see ``protocol.message.split_batch``). ``properties`` are the batch's own
    (encoded): not stored, but its ``WAIT`` says whether a SYNC_FLUSH send waits for the
    flush, as a single message's does.

    The committed messages of a run of half messages (an exactly-once sink's, see
    ``broker/transactions/sink.py``) go as a batch too: ``prepared_offsets`` are then the elements'
    PREPARED_TRANSACTION_OFFSETs (each half's CommitLog offset; 0 without them), and
    ``trailer`` the op records that mark the halves resolved, appended right after the
    elements by the same call, under the same lock, so that nothing is appended between the
    committed messages and the record that says they are committed.
    """

    __slots__ = ("topic", "queue_id", "body", "suffix", "sysflag", "born_timestamp",
                 "born_host", "born_port", "reconsume_times", "properties",
                 "prepared_offsets", "trailer")

    def __init__(self, topic: str, body: bytes, queue_id: int = 0, *, suffix: bytes = b"",
                 properties: bytes = b"", sysflag: int = 0, born_timestamp: int = 0,
                 born_host: bytes = b"\x7f\x00\x00\x01", born_port: int = 0,
                 reconsume_times: int = 0, prepared_offsets: Sequence[int] | None = None,
                 trailer: Sequence[StoreMessage] = ()) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.body = body
        self.suffix = suffix
        self.sysflag = sysflag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.born_port = born_port
        self.reconsume_times = reconsume_times
        self.properties = properties
        self.prepared_offsets = prepared_offsets
        self.trailer = trailer


class PutStatus(enum.Enum):
    """Outcome of an append (RocketMQ's PutMessageStatus, for the cases that are not errors)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    #: SYNC_MASTER: no slave connected and caught up; stored on the master only.
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    #: SYNC_MASTER: no slave acknowledged it in time; stored on the master.
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"


class PutResult:
    """Where a message was stored, and whether it is known to be durable."""

    __slots__ = ("status", "commitlog_offset", "size", "queue_offset", "store_timestamp",
                 "_id_prefix")

    def __init__(self, status: PutStatus, commitlog_offset: int, size: int, queue_offset: int,
                 store_timestamp: int, id_prefix: str) -> None:
        self.status = status
        self.commitlog_offset = commitlog_offset
        self.size = size
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp
        self._id_prefix = id_prefix

    @property
    def msg_id(self) -> str:
        """The offset message id: store host, port and CommitLog offset in hex."""
        return f"{self._id_prefix}{self.commitlog_offset:016X}"

    def __repr__(self) -> str:
        return (f"PutResult({self.status.name}, commitlog_offset={self.commitlog_offset}, "
                f"size={self.size}, queue_offset={self.queue_offset}, msg_id={self.msg_id})")


class BatchResults(Sequence[PutResult]):
    """Where each element of a batch (or each message of an append) was stored: a sequence
    of :class:`PutResult` made on demand from the arrays the compiled encoder fills, so a
    batch of hundreds costs no object per message until one is asked for. ``status``
    applies to every element."""

    __slots__ = ("status", "store_timestamp", "offsets", "sizes", "first_queue_offset",
                 "counted", "queue_numbers", "tail", "_prefix", "_n")

    def __init__(self, n: int, store_timestamp: int, first_queue_offset: int, counted: bool,
                 id_prefix: str, *, each_queue: bool = False) -> None:
        self.status = PutStatus.PUT_OK
        self.store_timestamp = store_timestamp
        self.offsets = array("q", bytes(8 * n))
        self.sizes = array("i", bytes(4 * n))
        self.first_queue_offset = first_queue_offset
        self.counted = counted
        #: Messages of several queues (an append of single messages): each one's queue
        #: offset; None for a batch, whose elements take consecutive ones.
        self.queue_numbers = array("q", bytes(8 * n)) if each_queue else None
        #: The results of a batch's trailer (BatchMessage), after its elements'.
        self.tail: list[PutResult] = []
        self._prefix = id_prefix
        self._n = n

    def __len__(self) -> int:
        return self._n + len(self.tail)

    @overload
    def __getitem__(self, i: int) -> PutResult: ...
    @overload
    def __getitem__(self, i: slice) -> list[PutResult]: ...

    def __getitem__(self, i: int | slice) -> PutResult | list[PutResult]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if i >= self._n and i - self._n < len(self.tail):
            return self.tail[i - self._n]
        if not 0 <= i < self._n:
            raise IndexError("batch result index out of range")
        numbers = self.queue_numbers
        queue_offset = (numbers[i] if numbers is not None else
                        self.first_queue_offset + i if self.counted else 0)
        return PutResult(self.status, self.offsets[i], self.sizes[i], queue_offset,
                         self.store_timestamp, self._prefix)

    def __add__(self, other: Sequence[PutResult]) -> list[PutResult]:
        return [*self, *other]

    def __radd__(self, other: Sequence[PutResult]) -> list[PutResult]:
        return [*other, *self]

    @property
    def msg_ids(self) -> str:
        """The elements' offset message ids, comma-separated (a batch send's answer)."""
        return records.encoder.msg_ids(self._prefix.encode(), self.offsets, self._n)

    @property
    def total_size(self) -> int:
        return sum(self.sizes)


def batch_totals(results: Sequence[PutResult]) -> tuple[int, str]:
    """The bytes stored for a batch and its elements' offset ids, comma-separated (what a
    batch send answers), without making a result per element of :class:`BatchResults`."""
    if isinstance(results, BatchResults):
        return results.total_size, results.msg_ids
    return sum([r.size for r in results]), ",".join([r.msg_id for r in results])
