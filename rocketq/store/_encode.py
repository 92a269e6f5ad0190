"""The store's record encoders (SEND_BATCH bodies and single messages into CommitLog
records), in plain Python.

The reference of ``rocketq.store._cencode``, built like ``_records`` (see there): the same
file compiled by Cython with the C types of ``_cencode.pxd``. ``rocketq.store.records`` picks
the module; the CommitLog uses the compiled one only (its own Python loop is faster than this
file run by the interpreter), and the twin tests hold both, and the Python path, to the same
bytes. The few byte helpers at the top are this module's own, not imported: a compiled
module calls C functions of its own file only.

Nothing here trusts a length read from the bytes, and nothing imports the rest of rocketq.
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # no Cython installed: the functions below run as plain Python
    import contextlib

    class _NoCython:
        compiled = False
        nogil = contextlib.nullcontext()

    cython = _NoCython()

from rocketq.store._records import _crc_table

_MAGIC_V1 = -626843481  # 0xDAA320A7
_HEADER_SIZE = 88
#: The SYSFLAG bits of half and rollback records, which take no queue offset.
_TRAN_MASK = 0xC
_PREPARED = 0x4
_ROLLBACK = 0xC
_MASK32 = 0xFFFFFFFF
_MIN32 = 0x80000000
_WRAP32 = 0x100000000
_CRC_TABLE = _crc_table()


def _u32(b, at):
    w = b[at]
    x = b[at + 1]
    y = b[at + 2]
    z = b[at + 3]
    return (w << 24) | (x << 16) | (y << 8) | z


def _i32(b, at):
    s = _u32(b, at)
    if s >= _MIN32:
        s -= _WRAP32
    return s


def _put32(b, at, v):
    b[at] = (v >> 24) & 0xFF
    b[at + 1] = (v >> 16) & 0xFF
    b[at + 2] = (v >> 8) & 0xFF
    b[at + 3] = v & 0xFF


def _put64(b, at, v):
    _put32(b, at, v >> 32)
    _put32(b, at + 4, v & _MASK32)


def _crc32(b, at, n, table):
    """CRC-32 of ``b[at:at + n]`` (zlib's own, in the compiled twin)."""
    if cython.compiled:
        return _zlib_crc32(0, cython.address(b[at]), n) if n > 0 else 0  # noqa: F821 (.pxd)
    crc = _MASK32
    i = at
    while i < at + n:
        crc = table[(crc ^ b[i]) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc ^ _MASK32


def _copy(dst, at, src, src_at, n):
    """``dst[at:at + n] = src[src_at:src_at + n]`` (the compiled twin copies with memcpy's
    speed; the ranges are the caller's to check)."""
    i = 0
    while i < n:
        dst[at + i] = src[src_at + i]
        i += 1


# ------------------------------------------------------------------------------ batches


def batch_check(body, extra, fixed, max_body, max_props, max_record):
    """Check a batch body (``[TOTALSIZE i32][MAGIC i32][BODYCRC i32][FLAG i32][BODYLEN
    i32][body][PROPLEN u16][properties]`` per element) before anything of it is stored:
    first its structure, then each element's limits, as the store reports them.

    ``extra`` is the length of the suffix every element's properties get (plus one byte
    where they lack their final separator), ``fixed`` a record's size without body and
    properties. Returns ``(elements, error, position, value)``; ``error`` is 0 when the
    batch is sound, else 1 truncated element, 2 bad body length, 3 bad properties length,
    4 sizes that do not add up (``value``: the element's TOTALSIZE), 5 body over
    ``max_body`` (``value``: its length), 6 properties over ``max_props`` (``value``:
    their stored length), 7 a record over ``max_record``.
    """
    end = len(body)
    pos = 0
    n = 0
    while pos < end:
        if end - pos < 22:
            return n, 1, pos, 0
        total = _i32(body, pos)
        body_len = _i32(body, pos + 16)
        p = pos + 20
        if body_len < 0 or p + body_len + 2 > end:
            return n, 2, pos, 0
        props_at = p + body_len + 2
        props_len = (body[props_at - 2] << 8) | body[props_at - 1]
        if props_at + props_len > end:
            return n, 3, pos, 0
        if total != props_at + props_len - pos:
            return n, 4, pos, total
        n += 1
        pos = props_at + props_len
    pos = 0
    while pos < end:
        body_len = _i32(body, pos + 16)
        props_at = pos + 22 + body_len
        props_len = (body[props_at - 2] << 8) | body[props_at - 1]
        if body_len > max_body:
            return n, 5, pos, body_len
        stored = props_len + extra
        if extra and props_len and body[props_at + props_len - 1] != 2:
            stored += 1
        if stored > max_props:
            return n, 6, pos, stored
        if fixed + body_len + stored > max_record:
            return n, 7, pos, 0
        pos = props_at + props_len
    return n, 0, pos, 0


def batch_encode(dst, w, body, pos, k, count, topic, suffix, free, phys, queue_id,
                 queue_offset, counted, sysflag, born_ts, born_host, born_port, store_ts,
                 store_host, store_port, reconsume, offsets, sizes):
    """Encode the elements ``k .. count`` of a batch checked by :func:`batch_check`, the
    first at ``body[pos]``, as v1 CommitLog records into ``dst`` from ``w``, while each fits
    with the 8 bytes of a file's closing filler to spare in ``free``. ``topic`` is the
    record's TOPICLEN and TOPIC; ``suffix`` is added to each element's properties, after a
    separator where they lack one. Records start at CommitLog offset ``phys`` and, if
    ``counted``, take queue offsets from ``queue_offset``; element ``i`` lands at
    ``offsets[i]`` with size ``sizes[i]``. ``born_host`` and ``store_host`` are 4-byte IPv4
    addresses. Returns ``(w, pos, k, phys, queue_offset)`` after the last one written."""
    topic_len = len(topic)
    extra = len(suffix)
    cap = len(dst)
    if (w < 0 or pos < 0 or k < 0 or count > len(offsets) or count > len(sizes)
            or len(born_host) != 4 or len(store_host) != 4):
        raise ValueError("batch_encode: arguments out of range")
    with cython.nogil:
        while k < count and pos + 22 <= len(body):
            flag = _i32(body, pos + 12)
            body_len = _i32(body, pos + 16)
            body_at = pos + 20
            if body_len < 0 or body_at + body_len + 2 > len(body):
                break  # not what batch_check passed: leave it to the caller's checks
            props_at = body_at + body_len + 2
            props_len = (body[props_at - 2] << 8) | body[props_at - 1]
            if props_at + props_len > len(body):
                break
            sep = 1 if extra and props_len and body[props_at + props_len - 1] != 2 else 0
            stored = props_len + sep + extra
            if stored > 0xFFFF:
                break  # PROPLEN is 2 bytes (batch_check refuses what is over the limit)
            size = _HEADER_SIZE + body_len + topic_len + 2 + stored
            if size + 8 > free or w + size > cap:
                break
            _put32(dst, w, size)
            _put32(dst, w + 4, _MAGIC_V1)
            _put32(dst, w + 8, _crc32(body, body_at, body_len, _CRC_TABLE) & 0x7FFFFFFF)
            _put32(dst, w + 12, queue_id)
            _put32(dst, w + 16, flag)
            _put64(dst, w + 20, queue_offset)
            _put64(dst, w + 28, phys)
            _put32(dst, w + 36, sysflag)
            _put64(dst, w + 40, born_ts)
            _copy(dst, w + 48, born_host, 0, 4)
            _put32(dst, w + 52, born_port)
            _put64(dst, w + 56, store_ts)
            _copy(dst, w + 64, store_host, 0, 4)
            _put32(dst, w + 68, store_port)
            _put32(dst, w + 72, reconsume)
            _put64(dst, w + 76, 0)
            _put32(dst, w + 84, body_len)
            at = w + _HEADER_SIZE
            _copy(dst, at, body, body_at, body_len)
            at += body_len
            _copy(dst, at, topic, 0, topic_len)
            at += topic_len
            dst[at] = (stored >> 8) & 0xFF
            dst[at + 1] = stored & 0xFF
            at += 2
            _copy(dst, at, body, props_at, props_len)
            at += props_len
            if sep:
                dst[at] = 2
                at += 1
            _copy(dst, at, suffix, 0, extra)
            offsets[k] = phys
            sizes[k] = size
            k += 1
            w += size
            phys += size
            free -= size
            if counted:
                queue_offset += 1
            pos = props_at + props_len
    return w, pos, k, phys, queue_offset




# ------------------------------------------------------------------------------ messages


def messages_check(msgs, start, topic_parts, fixed, max_body, max_props, max_record,
                   counts):
    """Check messages ``start ..`` of ``msgs`` (StoreMessage-like objects) before any is
    stored, in the order the store reports problems: body over ``max_body``, properties over
    ``max_props``, a negative queue id, a topic not in ``topic_parts`` (its TOPICLEN and
    TOPIC, once the caller has validated it), a record over ``max_record`` (``fixed`` is a
    record's size without body, topic and properties). ``counts`` gets per (topic, queue
    id) the number of messages that take a queue offset. Returns ``(error, index, value)``:
    0 when all are sound, else 1 unknown topic, 5 body too large (``value``: its length), 6
    properties too large (``value``: theirs), 7 record too large, 8 negative queue id."""
    n = len(msgs)
    i = start
    while i < n:
        m = msgs[i]
        body = m.body
        props = m.properties
        # Bytes, not items: a buffer of wider items is counted as messages_encode copies it.
        body_len = len(body) if type(body) is bytes else memoryview(body).nbytes
        props_len = len(props) if type(props) is bytes else memoryview(props).nbytes
        if body_len > max_body:
            return 5, i, body_len
        if props_len > max_props:
            return 6, i, props_len
        queue_id = m.queue_id
        if queue_id < 0:
            return 8, i, queue_id
        topic = m.topic
        part = topic_parts.get(topic)
        if part is None:
            return 1, i, 0
        if fixed + body_len + len(part) + props_len > max_record:
            return 7, i, 0
        tran = m.sysflag & _TRAN_MASK
        if tran != _PREPARED and tran != _ROLLBACK:
            key = (topic, queue_id)
            counts[key] = counts.get(key, 0) + 1
        i += 1
    return 0, n, 0


def messages_encode(dst, w, msgs, k, topic_parts, free, phys, queue_offsets, store_ts,
                    store_host, store_port, offsets, sizes, queue_numbers):
    """Encode messages ``k ..`` of ``msgs`` checked by :func:`messages_check` as v1 records
    into ``dst`` from ``w`` while each fits, with the 8 bytes of a file's closing filler to
    spare, in ``free``; the first lands at CommitLog offset ``phys``. Messages that take a
    queue offset take the next of ``queue_offsets[(topic, queue id)]`` (half and rollback
    records take 0). Message ``i`` lands at ``offsets[i]`` with size ``sizes[i]`` and queue
    offset ``queue_numbers[i]``. Returns ``(w, k, phys)`` after the last one written."""
    n = len(msgs)
    if w < 0 or k < 0 or n > len(offsets) or n > len(sizes) or n > len(queue_numbers):
        raise ValueError("messages_encode: arguments out of range")
    while k < n:
        m = msgs[k]
        body = m.body
        props = m.properties
        # Plain bytes, so the compiled twin reads them through a pointer, and every length
        # below is in bytes.
        if type(body) is not bytes:
            body = bytes(body)
        if type(props) is not bytes:
            props = bytes(props)
        topic = m.topic
        part = topic_parts[topic]
        size = _HEADER_SIZE + 2 + len(body) + len(part) + len(props)
        if size + 8 > free or w + size > len(dst):
            break
        sysflag = m.sysflag
        tran = sysflag & _TRAN_MASK
        queue_id = m.queue_id
        if tran == _PREPARED or tran == _ROLLBACK:
            queue_offset = 0
        else:
            key = (topic, queue_id)
            queue_offset = queue_offsets.get(key, 0)
            queue_offsets[key] = queue_offset + 1
        born_host = m.born_host
        if type(born_host) is not bytes:
            born_host = bytes(born_host)
        _record(dst, w, size, queue_id, m.flag, queue_offset, phys, sysflag, m.born_timestamp,
                born_host, min(len(born_host), 4), m.born_port, store_ts, store_host,
                min(len(store_host), 4), store_port, m.reconsume_times,
                m.prepared_transaction_offset, body, len(body), part, len(part), props,
                len(props))
        offsets[k] = phys
        sizes[k] = size
        queue_numbers[k] = queue_offset
        k += 1
        w += size
        phys += size
        free -= size
    return w, k, phys


def _record(dst, w, size, queue_id, flag, queue_offset, phys, sysflag, born_ts, born_host,
            born_host_len, born_port, store_ts, store_host, store_host_len, store_port,
            reconsume, prepared, body, body_len, topic, topic_len, props, props_len):
    """One v1 record at ``dst[w:]``, ``size`` long (the caller's to check). Hosts are IPv4:
    their first 4 bytes (``*_host_len``, at most 4), zero-padded, as ``struct``'s ``4s``
    packs them."""
    _put32(dst, w, size)
    _put32(dst, w + 4, _MAGIC_V1)
    _put32(dst, w + 8, _crc32_of(body, body_len, _CRC_TABLE) & 0x7FFFFFFF)
    _put32(dst, w + 12, queue_id)
    _put32(dst, w + 16, flag)
    _put64(dst, w + 20, queue_offset)
    _put64(dst, w + 28, phys)
    _put32(dst, w + 36, sysflag)
    _put64(dst, w + 40, born_ts)
    _put32(dst, w + 48, 0)
    _copy_from(dst, w + 48, born_host, born_host_len)
    _put32(dst, w + 52, born_port)
    _put64(dst, w + 56, store_ts)
    _put32(dst, w + 64, 0)
    _copy_from(dst, w + 64, store_host, store_host_len)
    _put32(dst, w + 68, store_port)
    _put32(dst, w + 72, reconsume)
    _put64(dst, w + 76, prepared)
    _put32(dst, w + 84, body_len)
    at = w + _HEADER_SIZE
    _copy_from(dst, at, body, body_len)
    at += body_len
    _copy_from(dst, at, topic, topic_len)
    at += topic_len
    dst[at] = (props_len >> 8) & 0xFF
    dst[at + 1] = props_len & 0xFF
    _copy_from(dst, at + 2, props, props_len)


def _copy_from(dst, at, src, n):
    """``dst[at:at + n] = src[:n]``, ``src`` being bytes (a pointer into them, compiled)."""
    i = 0
    while i < n:
        dst[at + i] = src[i]
        i += 1


def _crc32_of(b, n, table):
    """:func:`_crc32` of ``b[:n]``, ``b`` being bytes."""
    if cython.compiled:
        return _zlib_crc32(0, b, n)  # noqa: F821 (declared in _crecords.pxd)
    crc = _MASK32
    i = 0
    while i < n:
        crc = table[(crc ^ b[i]) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc ^ _MASK32


# ------------------------------------------------------------------------------ answers


def msg_ids(prefix, offsets, n):
    """The offset message ids of the first ``n`` CommitLog offsets, comma-separated: each is
    ``prefix`` (the store host and port in hex, ASCII bytes) and the offset as 16 uppercase
    hex digits, as ``PutResult.msg_id`` formats one (a batch send's answer)."""
    if n < 0 or n > len(offsets):
        raise ValueError("msg_ids: n out of range")
    width = len(prefix) + 17  # the id and its comma
    out = bytearray(n * width - 1 if n else 0)
    _fill_ids(out, prefix, len(prefix), offsets, n)
    return out.decode("ascii")


def _fill_ids(out, prefix, p, offsets, n):
    i = 0
    while i < n:
        at = i * (p + 17)
        if i:
            out[at - 1] = 44  # ","
        _copy_from(out, at, prefix, p)
        v = offsets[i]
        j = 15
        while j >= 0:
            d = v & 15
            out[at + p + j] = 48 + d if d < 10 else 55 + d
            v >>= 4
            j -= 1
        i += 1
