"""The CommitLog: every message of every topic, appended to one log of mapped files.

Each record is RocketMQ's v1 message record byte for byte (see ``rocketq.protocol.message``),
so a pull response is a slice of this log. One writer at a time: appends hold a lock, assign
queue offsets and physical offsets, encode, and copy into the mapping. Everything else (the
ConsumeQueues, the IndexFile, waking long polls) is built from these bytes by the dispatcher.
"""

from __future__ import annotations

import struct
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
    BLANK_MAGIC,
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
from .config import MessageStoreConfig
from .errors import MessageIllegalError, MessageTooLargeError, PropertiesTooLargeError
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .messages import BatchMessage, BatchResults, PutResult, PutStatus, StoreMessage

__all__ = ["BatchMessage", "BatchResults", "CommitLog", "PutResult", "PutStatus",
           "StoreMessage"]

#: A file's tail needs room for at least the blank filler's size and magic.
END_FILE_MIN_BLANK_LENGTH = 8
_BLANK = SIZE_AND_MAGIC
#: Appends of fewer messages than this take the Python path even when the compiled encoder
#: is installed: its calls and result arrays cost more than they save on a few messages
#: (measured: about even at 2 to 4 messages, the compiled path ahead from 4).
_COMPILED_FROM = 4
#: Half and rollback records get no queue offset.
_UNCOUNTED = (SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK)


#: Where a record's PREPAREDTRANSACTIONOFFSET is, from its start.
_PREPARED_AT = 76
_pack_offset = struct.Struct(">q").pack_into


def _set_prepared(scratch: bytearray, prepared: Sequence[int], sizes: Sequence[int],
                  k: int, done: int) -> None:
    """Write the PREPAREDTRANSACTIONOFFSET of the records of elements ``k .. done`` that the
    compiled encoder put back to back at the start of ``scratch`` (it writes 0 there)."""
    at = 0
    for i in range(k, done):
        _pack_offset(scratch, at + _PREPARED_AT, prepared[i])
        at += sizes[i]


def _check_topic(topic: str) -> bytes:
    try:
        validate_topic(topic)
    except IllegalTopicError as exc:
        raise MessageIllegalError(str(exc)) from None
    return topic.encode()


#: What ``records.encoder.batch_check`` reports, as the errors a store raises.
_BATCH_ERRORS = {
    1: "truncated batch element at {at}",
    2: "bad body length in batch element at {at}",
    3: "bad properties length in batch element at {at}",
    4: "batch element size {value} does not add up at {at}",
}


class CommitLog:
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

    def _ensure_room(self, key: tuple[str, int], count: int) -> None:
        """Raise DiskFullError unless ConsumeQueue files exist for ``count`` more units of
        queue ``key`` (``make_room`` creates them if it can). Under the lock."""
        first = self.queue_offsets.get(key, 0)
        end = first + count
        if end > self.queue_room.get(key, 0) and self.make_room is not None:
            self.queue_room[key] = self.make_room(key[0], key[1], first, end)

    def _trailer_room(self, batch: BatchMessage, n: int,
                      trailer: list[tuple[StoreMessage, bytes, int]]) -> None:
        """Before a batch of ``n`` elements is written: room for its trailer's units too
        (DiskFullError otherwise), so the trailer cannot fail once the batch is written."""
        if not trailer or self.make_room is None:
            return
        counts: dict[tuple[str, int], int] = {}
        for m, _part, _size in trailer:
            if m.sysflag & SysFlag.TRANSACTION_MASK not in _UNCOUNTED:
                key = (m.topic, m.queue_id)
                counts[key] = counts.get(key, 0) + 1
        mine = (batch.topic, batch.queue_id)
        for key, count in counts.items():
            self._ensure_room(key, count + (n if key == mine else 0))

    def _append_locked(self, sized: list[tuple[StoreMessage, bytes, int]]) -> list[PutResult]:
        results: list[PutResult] = []
        add_result = results.append
        queue_offsets = self.queue_offsets
        tran_mask, uncounted = SysFlag.TRANSACTION_MASK, _UNCOUNTED
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

    def _seal(self, f: MappedFile, free: int, parts: list[bytes], need: int
              ) -> tuple[MappedFile, int, int]:
        """Write ``parts`` and the blank filler that closes ``f``; return the next file, its
        first offset and its free space (see :meth:`_tail` for ``need``)."""
        parts.append(_BLANK.pack(free, BLANK_MAGIC))
        f.append(b"".join(parts))
        f.wrote_position = f.file_size
        parts.clear()
        return self._tail(need)

    def _tail(self, need: int) -> tuple[MappedFile, int, int]:
        """The file appends go to, the CommitLog offset of its end and its free space, with
        the blocks of its next ``need`` bytes and a blank filler reserved
        (``MappedFile.reserve``): an append that finds no room on the disk is refused here,
        before it assigns a queue offset, not half-way through writing."""
        f = self.files.last_for_write()
        end = f.wrote_position + need + END_FILE_MIN_BLANK_LENGTH
        if end > f.reserved_to:
            f.reserve(min(end, f.file_size))
        return f, f.from_offset + f.wrote_position, f.free_space

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

    # ------------------------------------------------------------------ compiled batches
    def _append_batch_compiled(self, batch: BatchMessage,
                               trailer: list[tuple[StoreMessage, bytes, int]]) -> BatchResults:
        """:meth:`append_batch` through the compiled encoder: one call checks the batch,
        one call per file writes its records (the interpreter lock released meanwhile)."""
        impl = records.encoder
        body, suffix = batch.body, batch.suffix
        # The topic field's length only moves the record size limit; it is looked up (and
        # the topic checked) after the batch's own errors, as the Python path reports them.
        topic_len = len(batch.topic.encode()) + 1
        n, error, at, value = impl.batch_check(
            body, len(suffix), RECORD_FIXED_SIZE + topic_len, self._max_body,
            MAX_PROPERTIES_SIZE, self._max_record)
        if error in _BATCH_ERRORS:
            raise MessageIllegalError(
                "bad batch: " + _BATCH_ERRORS[error].format(at=at, value=value))
        if not n:
            raise MessageIllegalError("empty batch")
        if batch.queue_id < 0:
            raise MessageIllegalError(f"queue id {batch.queue_id} is negative")
        topic_part = self._topic_parts.get(batch.topic) or self._topic_part(batch.topic)
        if error == 5:
            raise MessageTooLargeError(
                f"message body is {value} bytes; maxMessageSize is {self._max_body}")
        if error == 6:
            raise PropertiesTooLargeError(
                f"message properties are {value} bytes; the limit is {MAX_PROPERTIES_SIZE}")
        if error:
            raise MessageTooLargeError("the record does not fit in a CommitLog file")
        # At most this many bytes of records: the body and, per element, a record's fixed
        # part, the topic, the suffix and a separator.
        need = len(body) + n * (RECORD_FIXED_SIZE + len(topic_part) + len(suffix) + 1)
        with self.lock:
            self._trailer_room(batch, n, trailer)
            results = self._append_batch_encoded(batch, n, topic_part, need)
            if trailer:
                results.tail = self._append_locked(trailer)
            return results

    def _append_batch_encoded(self, batch: BatchMessage, n: int, topic_part: bytes,
                              need: int) -> BatchResults:
        tran = batch.sysflag & SysFlag.TRANSACTION_MASK
        counted = tran != SysFlag.TRANSACTION_PREPARED and tran != SysFlag.TRANSACTION_ROLLBACK
        key = (batch.topic, batch.queue_id)
        if counted and self.make_room is not None:
            self._ensure_room(key, n)
        queue_offset = self.queue_offsets.get(key, 0) if counted else 0
        now = int(time.time() * 1000)
        results = BatchResults(n, now, queue_offset, counted, self.msg_id_prefix)
        scratch = self._scratch
        assert scratch is not None
        if len(scratch) < need:
            scratch = self._scratch = bytearray(need)
        encode = records.encoder.batch_encode
        f, base, free = self._tail(need)
        pos = k = 0
        while True:
            w, pos, done, base, queue_offset = encode(
                scratch, 0, batch.body, pos, k, n, topic_part, batch.suffix, free, base,
                batch.queue_id, queue_offset, counted, batch.sysflag, batch.born_timestamp,
                batch.born_host, batch.born_port, now, self.store_host, self.store_port,
                batch.reconsume_times, results.offsets, results.sizes)
            if w:
                if batch.prepared_offsets is not None:
                    _set_prepared(scratch, batch.prepared_offsets, results.sizes, k, done)
                f.append(memoryview(scratch)[:w])
                free -= w
            if done >= n:
                break
            if done == k and w == 0 and f.wrote_position == 0:
                raise MessageTooLargeError("the record does not fit in a CommitLog file")
            if counted:  # the records written hold these offsets, whatever follows
                self.queue_offsets[key] = queue_offset
            f, base, free = self._seal(f, free, [], need)
            k = done
        if counted:
            self.queue_offsets[key] = queue_offset
        for cb in self.on_append:
            cb(base)
        return results

    # ------------------------------------------------------------------ compiled appends
    def _append_compiled(self, messages: Sequence[StoreMessage]) -> Sequence[PutResult]:
        """:meth:`append` through the compiled encoder: one call checks the messages, one
        call per file (or per filled buffer) writes their records."""
        impl = records.encoder
        msgs = messages if type(messages) is list else list(messages)
        parts = self._topic_parts
        counts: dict[tuple[str, int], int] = {}
        start = 0
        while True:
            error, at, value = impl.messages_check(
                msgs, start, parts, RECORD_FIXED_SIZE, self._max_body, MAX_PROPERTIES_SIZE,
                self._max_record, counts)
            if error != 1:
                break
            self._topic_part(msgs[at].topic)  # raises for an illegal topic
            if msgs[at].topic not in parts:  # too many topics to keep them all
                return self._append_python(msgs)
            start = at
        if error == 5:
            raise MessageTooLargeError(
                f"message body is {value} bytes; maxMessageSize is {self._max_body}")
        if error == 6:
            raise PropertiesTooLargeError(
                f"message properties are {value} bytes; the limit is {MAX_PROPERTIES_SIZE}")
        if error == 7:
            raise MessageTooLargeError("the record does not fit in a CommitLog file")
        if error == 8:
            raise MessageIllegalError(f"queue id {value} is negative")
        with self.lock:
            return self._append_encoded(msgs, counts)

    def _append_encoded(self, msgs: list[StoreMessage],
                        counts: dict[tuple[str, int], int]) -> BatchResults:
        if self.make_room is not None:
            for key, count in counts.items():
                self._ensure_room(key, count)
        n = len(msgs)
        now = int(time.time() * 1000)
        results = BatchResults(n, now, 0, True, self.msg_id_prefix, each_queue=True)
        encode = records.encoder.messages_encode
        scratch = self._scratch
        assert scratch is not None
        f, base, free = self._tail(len(scratch))
        k = 0
        while k < n:
            # One call writes at most a scratch buffer of records into the file.
            if f.wrote_position + len(scratch) + END_FILE_MIN_BLANK_LENGTH > f.reserved_to:
                f.reserve(min(f.file_size,
                              f.wrote_position + len(scratch) + END_FILE_MIN_BLANK_LENGTH))
            w, done, base = encode(scratch, 0, msgs, k, self._topic_parts, free, base,
                                   self.queue_offsets, now, self.store_host, self.store_port,
                                   results.offsets, results.sizes, results.queue_numbers)
            if w:
                f.append(memoryview(scratch)[:w])
                free -= w
            elif done == k:  # the next record fits neither the file nor the buffer
                m = msgs[k]
                size = (RECORD_FIXED_SIZE + len(m.body) + len(self._topic_parts[m.topic])
                        + len(m.properties))
                if size + END_FILE_MIN_BLANK_LENGTH > free:
                    f, base, free = self._seal(f, free, [], len(scratch))
                else:
                    scratch = self._scratch = bytearray(size)
            k = done
        for cb in self.on_append:
            cb(base)
        return results
