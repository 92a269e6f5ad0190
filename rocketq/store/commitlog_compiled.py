"""The CommitLog's appends through the compiled encoder (``records.encoder``, the
``_encode`` twin): one call checks a batch or a run of messages, one call per file (or per
filled buffer) encodes their records into a scratch buffer with the interpreter lock
released, and the buffer is copied into the file in one write.

``CompiledAppends`` is a part of ``commitlog.CommitLog``, which picks it for batches and
for runs of messages long enough to pay for its calls. The CommitLog's own Python methods
are the reference: both write the same records and raise the same errors
(``tests/store/test_records_twins.py`` holds them to it).
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import NoReturn

from ..protocol import SysFlag
from ..protocol.message import MAX_PROPERTIES_SIZE, RECORD_FIXED_SIZE
from . import records
from .commitlog_room import END_FILE_MIN_BLANK_LENGTH
from .errors import MessageIllegalError, MessageTooLargeError, PropertiesTooLargeError
from .mapped_file import MappedFile
from .messages import BatchMessage, BatchResults, PutResult, StoreMessage

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


#: What ``records.encoder.batch_check`` reports, as the errors a store raises.
_BATCH_ERRORS = {
    1: "truncated batch element at {at}",
    2: "bad body length in batch element at {at}",
    3: "bad properties length in batch element at {at}",
    4: "batch element size {value} does not add up at {at}",
}


class CompiledAppends:
    """Appends through the compiled encoder: a part of :class:`CommitLog`, over its state
    (see ``CommitLog.__init__``), its room (``AppendRoom``) and its Python append, which
    takes the trailer of a batch and the messages of too many topics to keep."""

    lock: threading.Lock
    queue_offsets: dict[tuple[str, int], int]
    make_room: Callable[[str, int, int, int], int] | None
    store_host: bytes
    store_port: int
    msg_id_prefix: str
    on_append: list
    _max_body: int
    _max_record: int
    _topic_parts: dict[str, bytes]
    _scratch: bytearray | None
    _topic_part: Callable[[str], bytes]
    _append_python: Callable[[Sequence[StoreMessage]], list[PutResult]]
    _append_locked: Callable[[list[tuple[StoreMessage, bytes, int]]], list[PutResult]]
    _ensure_room: Callable[[tuple[str, int], int], None]
    _trailer_room: Callable[[BatchMessage, int, list[tuple[StoreMessage, bytes, int]]], None]
    _tail: Callable[[int], tuple[MappedFile, int, int]]
    _seal: Callable[[MappedFile, int, list[bytes], int], tuple[MappedFile, int, int]]

    # ------------------------------------------------------------------ batches
    def _refuse_size(self, error: int, value: int) -> NoReturn:
        """Raise what the compiled check's size error ``error`` (5: the body, 6: the
        properties, else: the whole record) means."""
        if error == 5:
            raise MessageTooLargeError(
                f"message body is {value} bytes; maxMessageSize is {self._max_body}")
        if error == 6:
            raise PropertiesTooLargeError(
                f"message properties are {value} bytes; the limit is {MAX_PROPERTIES_SIZE}")
        raise MessageTooLargeError("the record does not fit in a CommitLog file")

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
        if error:
            self._refuse_size(error, value)
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

    # ------------------------------------------------------------------ messages
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
        if error in (5, 6, 7):
            self._refuse_size(error, value)
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
