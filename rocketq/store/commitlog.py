"""The CommitLog: every message of every topic, appended to one log of mapped files.

Each record is RocketMQ's v1 message record byte for byte (see ``rocketq.protocol.message``),
so a pull response is a slice of this log. One writer at a time: appends hold a lock, assign
queue offsets and physical offsets, encode, and copy into the mapping. Everything else (the
ConsumeQueues, the IndexFile, waking long polls) is built from these bytes by the dispatcher.

The CommitLog is three modules: this one (its state, reads, and appends in Python, the
reference), ``commitlog_room`` (the room an append needs before it writes) and
``commitlog_compiled`` (appends through the compiled encoder).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from ..protocol import (
    IllegalTopicError,
    MessageFormatError,
    SysFlag,
    validate_topic,
)
from ..protocol.message import (
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_SIZE,
    RECORD_FIXED_SIZE,
    SIZE_AND_MAGIC,
    create_offset_msg_id,
    host_to_bytes,
    record_parts,
    split_batch,
    topic_field,
)
from . import records
from .commitlog_compiled import CompiledAppends
from .commitlog_room import END_FILE_MIN_BLANK_LENGTH, UNCOUNTED_FLAGS, AppendRoom
from .config import MessageStoreConfig
from .errors import MessageIllegalError, MessageTooLargeError, PropertiesTooLargeError
from .mapped_file_queue import MappedFileQueue
from .messages import BatchMessage, BatchResults, PutResult, PutStatus, StoreMessage

__all__ = ["BatchMessage", "BatchResults", "CommitLog", "PutResult", "PutStatus",
           "StoreMessage"]

_BLANK = SIZE_AND_MAGIC
#: Appends of fewer messages than this take the Python path even when the compiled encoder
#: is installed: its calls and result arrays cost more than they save on a few messages
#: (measured: about even at 2 to 4 messages, the compiled path ahead from 4).
_COMPILED_FROM = 4


def _check_topic(topic: str) -> bytes:
    try:
        validate_topic(topic)
    except IllegalTopicError as exc:
        raise MessageIllegalError(str(exc)) from None
    return topic.encode()


class CommitLog(CompiledAppends, AppendRoom):
    """Append-only log of message records over a MappedFileQueue."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.files = MappedFileQueue(config.storePathCommitLog, config.mappedFileSizeCommitLog)
        self.lock = threading.Lock()
        #: Next queue offset of each (topic, queue id); rebuilt from ConsumeQueues at start.
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.store_host = host_to_bytes(config.brokerIP1)
        self.store_port = config.listenPort
        self._max_body = config.maxMessageSize
        self._max_record = config.mappedFileSizeCommitLog - END_FILE_MIN_BLANK_LENGTH
        self.msg_id_prefix = create_offset_msg_id(self.store_host, self.store_port, 0)[:16]
        self._topic_parts: dict[str, bytes] = {}
        #: Callbacks run after bytes land, with the new end offset (wakes the dispatcher).
        self.on_append: list = []
        #: ``make_room(topic, queue_id, first, end)``: make the ConsumeQueue files that will
        #: hold the units of queue offsets ``[first, end)`` and return the queue offset up to
        #: which files exist, or raise DiskFullError. Called under the lock, before anything
        #: is written, whenever an append would assign a queue offset past
        #: :attr:`queue_room`: a message is acknowledged only once the dispatcher is sure to
        #: find room for its unit. None: no such check (a CommitLog alone).
        self.make_room: Callable[[str, int, int, int], int] | None = None
        #: Per (topic, queue id), the queue offset up to which ConsumeQueue files exist (as
        #: ``make_room`` last said). Missing or low only costs a ``make_room`` call; cleared
        #: whenever ConsumeQueue files go (truncation, deleted topics).
        self.queue_room: dict[tuple[str, int], int] = {}
        #: The compiled encoder's output, reused under the lock (None: pure Python).
        self._scratch: bytearray | None = bytearray(1 << 20) if records.COMPILED else None

    # ------------------------------------------------------------------ reading helpers
    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    def view(self, offset: int, size: int) -> memoryview | None:
        """A zero-copy view of ``size`` bytes at ``offset``, or None if not in the log."""
        f = self.files.find(offset)
        if f is None:
            return None
        pos = offset - f.from_offset
        if pos + size > f.wrote_position:
            return None
        return f.slice(pos, pos + size)

    def record_size_at(self, offset: int) -> int:
        """TOTALSIZE of the record at ``offset`` (0 when there is none)."""
        f = self.files.find(offset)
        if f is None:
            return 0
        pos = offset - f.from_offset
        if pos + 8 > f.wrote_position or not f.hold():
            return 0
        try:
            size, magic = _BLANK.unpack_from(f.view, pos)
        finally:
            f.release()
        if magic not in (MAGIC_V1, MAGIC_V2) or size <= 0 or pos + size > f.wrote_position:
            return 0
        return size

    def record_at(self, offset: int) -> memoryview | None:
        """The whole record at ``offset`` as a view, or None."""
        size = self.record_size_at(offset)
        return self.view(offset, size) if size else None

    def read_chunk(self, offset: int, max_size: int) -> memoryview | None:
        """Up to ``max_size`` bytes of the log from ``offset``, within the one file holding it
        (what the HA stream sends at a time); None when nothing is written there yet."""
        f = self.files.find(offset)
        if f is None:
            return None
        pos = offset - f.from_offset
        n = min(max_size, f.wrote_position - pos)
        return f.slice(pos, pos + n) if n > 0 else None

    # ------------------------------------------------------------------ writing
    def append_replica(self, offset: int, data: bytes | memoryview) -> int:
        """Write bytes of a master's log (the HA stream) at ``offset``: where this log ends,
        or the start of a file when it is empty. Returns the new end. The bytes are copied as
        they are, so the two logs stay identical; ValueError if they cannot go there."""
        size = self.config.mappedFileSizeCommitLog
        with self.lock:
            if self.files.last is None:
                if offset % size:
                    raise ValueError(f"an empty CommitLog starts at a file start, not {offset}")
                f = self.files.last_for_write(offset)
            else:
                end = self.files.max_offset
                if offset != end:
                    raise ValueError(f"replica bytes for offset {offset}; the log ends at {end}")
                f = self.files.last_for_write()
            if f.wrote_position + len(data) > f.file_size:
                raise ValueError(f"replica bytes at {offset} run past the end of a file")
            f.append(data)
            end = f.from_offset + f.wrote_position
        for cb in self.on_append:
            cb(end)
        return end

    def append(self, messages: Sequence[StoreMessage]) -> Sequence[PutResult]:
        """Append records for ``messages`` in order and return where each landed.

        Raises MessageIllegalError subclasses before writing anything if any message is bad,
        and DiskFullError if a new file cannot be created (what was appended before stays).
        """
        if self._scratch is not None and len(messages) >= _COMPILED_FROM:
            return self._append_compiled(messages)
        return self._append_python(messages)

    def _append_python(self, messages: Sequence[StoreMessage]) -> list[PutResult]:
        sized = self._sized(messages)
        with self.lock:
            return self._append_locked(sized)

    def _sized(self, messages: Sequence[StoreMessage]) -> list[tuple[StoreMessage, bytes, int]]:
        """Per message its topic field and record size, once each is checked (raises
        MessageIllegalError subclasses for a bad one)."""
        max_body, max_record = self._max_body, self._max_record
        topic_parts = self._topic_parts
        #: Per message its topic field and record size, found once here.
        sized: list[tuple[StoreMessage, bytes, int]] = []
        for m in messages:
            body_len = len(m.body)
            props_len = len(m.properties)
            if body_len > max_body:
                raise MessageTooLargeError(
                    f"message body is {body_len} bytes; maxMessageSize is {max_body}")
            if props_len > MAX_PROPERTIES_SIZE:
                raise PropertiesTooLargeError(
                    f"message properties are {props_len} bytes; the limit is "
                    f"{MAX_PROPERTIES_SIZE}")
            if m.queue_id < 0:
                raise MessageIllegalError(f"queue id {m.queue_id} is negative")
            part = topic_parts.get(m.topic)
            if part is None:
                part = self._topic_part(m.topic)
            size = RECORD_FIXED_SIZE + body_len + len(part) + props_len
            if size > max_record:
                raise MessageTooLargeError("the record does not fit in a CommitLog file")
            sized.append((m, part, size))
        return sized

    def _topic_part(self, topic: str) -> bytes:
        part = topic_field(_check_topic(topic))
        if len(self._topic_parts) < 100_000:
            self._topic_parts[topic] = part
        return part

    def _append_locked(self, sized: list[tuple[StoreMessage, bytes, int]]) -> list[PutResult]:
        results: list[PutResult] = []
        add_result = results.append
        queue_offsets = self.queue_offsets
        tran_mask, uncounted = SysFlag.TRANSACTION_MASK, UNCOUNTED_FLAGS
        if self.make_room is not None:
            if len(sized) == 1:
                m = sized[0][0]
                key = (m.topic, m.queue_id)
                if (queue_offsets.get(key, 0) >= self.queue_room.get(key, 0)
                        and m.sysflag & tran_mask not in uncounted):
                    self._ensure_room(key, 1)
            else:
                counts: dict[tuple[str, int], int] = {}
                for m, _part, _size in sized:
                    if m.sysflag & tran_mask not in uncounted:
                        key = (m.topic, m.queue_id)
                        counts[key] = counts.get(key, 0) + 1
                for key, n in counts.items():
                    self._ensure_room(key, n)
        store_host, store_port = self.store_host, self.store_port
        ok = PutStatus.PUT_OK
        prefix = self.msg_id_prefix
        now = int(time.time() * 1000)
        need = sized[0][2] if len(sized) == 1 else sum(size for _m, _p, size in sized)
        f, base, free = self._tail(need)
        parts: list[bytes | memoryview] = []
        extend = parts.extend
        encode = record_parts
        blank_room = END_FILE_MIN_BLANK_LENGTH
        for m, topic_part, size in sized:
            if size + blank_room > free:
                f, base, free = self._seal(f, free, parts, need)
            if m.sysflag & tran_mask in uncounted:
                queue_offset = 0  # half and rollback records get no ConsumeQueue unit
            else:
                key = (m.topic, m.queue_id)
                queue_offset = queue_offsets.get(key, 0)
                queue_offsets[key] = queue_offset + 1
            extend(encode(size, m.queue_id, m.flag, queue_offset, base, m.sysflag,
                          m.born_timestamp, m.born_host, m.born_port, now, store_host,
                          store_port, m.reconsume_times, m.prepared_transaction_offset,
                          m.body, topic_part, m.properties))
            add_result(PutResult(ok, base, size, queue_offset, now, prefix))
            base += size
            free -= size
        if parts:
            f.append(b"".join(parts))
        for cb in self.on_append:
            cb(base)
        return results

    def append_batch(self, batch: BatchMessage) -> Sequence[PutResult]:
        """Append a batch's elements as consecutive records of its queue, then its trailer
        (see BatchMessage); like :meth:`append`, nothing is written if an element is bad
        (MessageIllegalError, with its position)."""
        trailer = self._sized(batch.trailer) if batch.trailer else []
        if self._scratch is not None:
            return self._append_batch_compiled(batch, trailer)
        try:
            elements = split_batch(batch.body)
        except MessageFormatError as exc:
            raise MessageIllegalError(f"bad batch: {exc}") from None
        if not elements:
            raise MessageIllegalError("empty batch")
        if batch.queue_id < 0:
            raise MessageIllegalError(f"queue id {batch.queue_id} is negative")
        topic_part = self._topic_parts.get(batch.topic) or self._topic_part(batch.topic)
        extra = len(batch.suffix)
        fixed = RECORD_FIXED_SIZE + len(topic_part) + extra
        max_body, max_record = self._max_body, self._max_record
        body = batch.body
        for _flag, _start, body_len, props_start, props_len in elements:
            if body_len > max_body:
                raise MessageTooLargeError(
                    f"message body is {body_len} bytes; maxMessageSize is {max_body}")
            # One more byte where the element's properties lack the final separator.
            stored = props_len + extra + (
                1 if extra and props_len and body[props_start + props_len - 1] != 2 else 0)
            if stored > MAX_PROPERTIES_SIZE:
                raise PropertiesTooLargeError(
                    f"message properties are {stored} bytes; the limit is "
                    f"{MAX_PROPERTIES_SIZE}")
            if fixed - extra + body_len + stored > max_record:
                raise MessageTooLargeError("the record does not fit in a CommitLog file")
        with self.lock:
            self._trailer_room(batch, len(elements), trailer)
            results = self._append_batch_locked(batch, elements, topic_part)
            if trailer:
                results.extend(self._append_locked(trailer))
            return results

    def _append_batch_locked(self, batch: BatchMessage,
                             elements: list[tuple[int, int, int, int, int]],
                             topic_part: bytes) -> list[PutResult]:
        results: list[PutResult] = []
        view = memoryview(batch.body)
        suffix = batch.suffix
        # Java 4.9.x clients end an element's properties without the separator: it is added
        # before the suffix (protocol.message.join_properties says why).
        separated = b"\x02" + suffix if suffix else suffix
        fixed = RECORD_FIXED_SIZE + len(topic_part)
        queue_id, sysflag = batch.queue_id, batch.sysflag
        born_ts, born_host, born_port = batch.born_timestamp, batch.born_host, batch.born_port
        reconsume = batch.reconsume_times
        prepared = batch.prepared_offsets
        store_host, store_port = self.store_host, self.store_port
        tran = sysflag & SysFlag.TRANSACTION_MASK
        counted = tran != SysFlag.TRANSACTION_PREPARED and tran != SysFlag.TRANSACTION_ROLLBACK
        key = (batch.topic, queue_id)
        if counted and self.make_room is not None:
            self._ensure_room(key, len(elements))
        queue_offset = self.queue_offsets.get(key, 0) if counted else 0
        ok = PutStatus.PUT_OK
        prefix = self.msg_id_prefix
        now = int(time.time() * 1000)
        # At most this many bytes of records (as the compiled path counts them).
        need = len(batch.body) + len(elements) * (fixed + len(separated))
        f, base, free = self._tail(need)
        parts: list = []
        extend = parts.extend
        for i, (flag, start, body_len, props_start, props_len) in enumerate(elements):
            props_end = props_start + props_len
            tail = separated if props_len and view[props_end - 1] != 2 else suffix
            stored = props_len + len(tail)
            size = fixed + body_len + stored
            if size + END_FILE_MIN_BLANK_LENGTH > free:
                if counted:  # the records sealed below hold these offsets, whatever follows
                    self.queue_offsets[key] = queue_offset
                f, base, free = self._seal(f, free, parts, need)
            extend(record_parts(size, queue_id, flag, queue_offset, base, sysflag, born_ts,
                                born_host, born_port, now, store_host, store_port, reconsume,
                                prepared[i] if prepared is not None else 0,
                                view[start:start + body_len], topic_part,
                                view[props_start:props_end], tail))
            results.append(PutResult(ok, base, size, queue_offset, now, prefix))
            if counted:
                queue_offset += 1
            base += size
            free -= size
        if counted:
            self.queue_offsets[key] = queue_offset
        if parts:
            f.append(b"".join(parts))
        for cb in self.on_append:
            cb(base)
        return results

