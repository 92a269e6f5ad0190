"""The store's per-record inner loops (dispatch and index writes), in plain Python.

This is the reference of ``rocketq.store._crecords``: the build compiles this same file with
Cython and the C types of ``_crecords.pxd``, and the compiled loops run with the interpreter
lock released, so the dispatcher thread builds ConsumeQueue units and index entries on one
core while the event loop serves requests on the other. ``rocketq.store.records`` picks the
module; the dispatcher uses the compiled one only (the pure-Python dispatcher in
``dispatch.py`` is faster than this file run by the interpreter), and the twin tests hold the
two to the same bytes.

The scan covers the common record: a plain topic, ASCII tags and keys, a sound header. It
stops at anything else and says why (:data:`NEEDS_PYTHON`, :data:`NOT_A_RECORD`), and the
reference dispatcher takes that one record: delayed and timed topics, non-ASCII keys, a torn
tail, the blank filler that closes a file, a bad record during recovery.

Nothing here trusts a length read from the bytes, and nothing imports the rest of rocketq.
"""

from __future__ import annotations

from array import array

try:
    import cython
except ImportError:  # no Cython installed: the functions below run as plain Python
    import contextlib

    class _NoCython:
        compiled = False
        nogil = contextlib.nullcontext()

    cython = _NoCython()

# What :func:`scan` stopped at (its last result), as C constants and under public names.
_DONE = 0  # the stop position: everything before it was scanned
_FULL = 1  # an output (records, runs, index entries) is full: call again from ``pos``
_NEEDS_PYTHON = 2  # the record at ``pos`` is sound but needs the reference dispatcher
_NOT_A_RECORD = 3  # the bytes at ``pos`` are not a whole sound record (or a filler)
DONE, FULL, NEEDS_PYTHON, NOT_A_RECORD = _DONE, _FULL, _NEEDS_PYTHON, _NOT_A_RECORD

_MAGIC_V1 = -626843481  # 0xDAA320A7
_MAGIC_V2 = -626843477  # 0xDAA320AB
_HEADER_SIZE = 88
_OVERHEAD = 91
_UNIT = 20
#: Fields per run in the ``runs`` output: topic start, topic length, queue id, first queue
#: offset, unit count, one past the CommitLog end of its last record.
_RUN = 6
UNIT_SIZE, RUN_FIELDS = _UNIT, _RUN
#: Queues one scan groups units for; a stretch with more stops early (FULL) and goes on in
#: the next call.
_SLOTS = 64
#: The SYSFLAG bits of half and rollback records (no unit), and of IPv6 hosts (not stored).
_TRAN_MASK = 0xC
_PREPARED = 0x4
_ROLLBACK = 0xC
_V6_HOSTS = 0x30
_MASK32 = 0xFFFFFFFF
_MIN32 = 0x80000000
_WRAP32 = 0x100000000
_MAX_INT = 0x7FFFFFFF
_MAX_LL = 0x7FFFFFFFFFFFFFFF
_INDEX_HEADER = 40



def _crc_table():
    """CRC-32 (zlib's polynomial) of each byte value, for the byte-at-a-time loop."""
    out = []
    for n in range(256):
        c = n
        for _k in range(8):
            c = (0xEDB88320 ^ (c >> 1)) if c & 1 else c >> 1
        out.append(c)
    return array("I", out)


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


def _i64(b, at):
    return _i32(b, at) * _WRAP32 + _u32(b, at + 4)


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


def _same(b, at, other, n):
    """Whether ``b[at:at + n]`` holds the bytes of ``other`` (``n`` long)."""
    i = 0
    while i < n:
        if b[at + i] != other[i]:
            return False
        i += 1
    return True


def _same_at(b, at, other_at, n):
    """Whether ``b[at:at + n]`` and ``b[other_at:other_at + n]`` hold the same bytes."""
    i = 0
    while i < n:
        if b[at + i] != b[other_at + i]:
            return False
        i += 1
    return True


def _named(b, at, name, n):
    """Whether ``b[at:at + n]`` spells ``name`` (an ASCII C string of ``n`` bytes)."""
    i = 0
    while i < n:
        if b[at + i] != name[i]:
            return False
        i += 1
    return True


def _prop(b, at, end, name, name_len):
    """Where the value of property ``name`` starts in ``b[at:end]`` (RocketMQ's
    ``name\\x01value\\x02`` segments; the first segment of that name), or -1."""
    seg = at
    while seg < end:
        i = seg
        while i < end and b[i] != 1 and b[i] != 2:
            i += 1
        if i < end and b[i] == 1 and i - seg == name_len and _named(b, seg, name, name_len):
            return i + 1
        while i < end and b[i] != 2:
            i += 1
        seg = i + 1
    return -1


def _value_end(b, at, end):
    while at < end and b[at] != 2:
        at += 1
    return at


def _ascii(b, at, end):
    while at < end:
        if b[at] >= 0x80:
            return False
        at += 1
    return True


def _hash_more(h, b, at, end):
    """Java's ``31*h + c`` over ASCII bytes, modulo 2**32."""
    while at < end:
        h = (31 * h + b[at]) & _MASK32
        at += 1
    return h


def _key_hash(h):
    """RocketMQ's index hash from Java's unsigned hash: its absolute value, 0 for MIN_VALUE."""
    if h == _MIN32:
        return 0
    if h > _MIN32:
        return _WRAP32 - h
    return h


def scan(log, pos, stop, base, validate, index, index_from, schedule_topic, timer_topic,
         units, runs, hashes, offsets, times, tmp, work):
    """Dispatch the records of ``log[pos:stop]`` (one CommitLog file mapped at CommitLog
    offset ``base``) into flat outputs, with the interpreter lock released when compiled.

    - ``units`` gets the 20-byte ConsumeQueue units (``[offset i64][size i32][tag code
      i64]``) back to back, in record order;
    - ``runs`` gets :data:`RUN_FIELDS` numbers per run of units: the units of one topic and
      queue with consecutive queue offsets share a run, however records of other queues
      come between them (``units`` holds them grouped by queue, run after run);
    - ``hashes``, ``offsets`` and ``times`` get an index entry per UNIQ_KEY and KEYS word
      of records past CommitLog offset ``index_from`` when ``index`` is true.

    A record's tag code is Java's hash of its TAGS (0 without tags); half and rollback
    records get no unit but are indexed. With ``validate`` the body CRC is checked too.
    Returns ``(pos, records, runs, index entries, status)``: where the scan stopped, how
    many records it took, what it wrote, and why it stopped (:data:`DONE`, :data:`FULL`,
    :data:`NEEDS_PYTHON`, :data:`NOT_A_RECORD`). ``tmp`` (as long as ``units``) and
    ``work`` (:func:`work_size` numbers for that many units) are scratch space.
    """
    if pos < 0 or stop > len(log) or base < 0:
        raise ValueError(f"cannot scan {pos}..{stop} of {len(log)} bytes at {base}")
    unit_cap = len(units) // _UNIT
    run_cap = len(runs) // _RUN
    if len(tmp) < len(units) or len(work) < work_size(unit_cap) or run_cap < unit_cap:
        raise ValueError("scan: scratch space too small")
    # work: per unit its queue's slot, its queue offset and its record's end, then the
    # sorted copies of the last two, then per queue slot (at most _SLOTS of them) its topic
    # start, topic length, queue id, unit count and next free place.
    unit_slot = 0
    unit_qo = unit_cap
    unit_end = 2 * unit_cap
    sorted_qo = 3 * unit_cap
    sorted_end = 4 * unit_cap
    slot_at = 5 * unit_cap
    nslots = 0
    last_slot = -1
    key_cap = min(len(hashes), len(offsets), len(times))
    sched_len = len(schedule_topic)
    timer_len = len(timer_topic)
    count = 0
    nunits = 0
    nruns = 0
    nkeys = 0
    status = _DONE
    with cython.nogil:
        while pos < stop:
            if stop - pos < _HEADER_SIZE:
                status = _NOT_A_RECORD
                break
            total = _i32(log, pos)
            magic = _i32(log, pos + 4)
            sysflag = _i32(log, pos + 36)
            body_len = _i32(log, pos + 84)
            record_end = pos + total
            if ((magic != _MAGIC_V1 and magic != _MAGIC_V2) or sysflag & _V6_HOSTS
                    or total < _OVERHEAD or record_end > stop or body_len < 0
                    or _OVERHEAD + body_len > total):
                status = _NOT_A_RECORD
                break
            p = pos + _HEADER_SIZE + body_len
            if magic == _MAGIC_V1:
                topic_len = log[p]
                topic_at = p + 1
            else:
                topic_len = (log[p] << 8) | log[p + 1]
                topic_at = p + 2
            p = topic_at + topic_len
            if p + 2 > record_end:
                status = _NOT_A_RECORD
                break
            props_at = p + 2
            if props_at + ((log[p] << 8) | log[p + 1]) != record_end:
                status = _NOT_A_RECORD
                break
            if validate and (_crc32(log, pos + _HEADER_SIZE, body_len, _CRC_TABLE)
                             & 0x7FFFFFFF) != _i32(log, pos + 8):
                status = _NOT_A_RECORD
                break
            if (not _ascii(log, topic_at, topic_at + topic_len)
                    or (topic_len == sched_len and _same(log, topic_at, schedule_topic,
                                                         sched_len))
                    or (topic_len == timer_len and _same(log, topic_at, timer_topic,
                                                         timer_len))):
                status = _NEEDS_PYTHON
                break
            phys = base + pos
            tran = sysflag & _TRAN_MASK
            counted = tran != _PREPARED and tran != _ROLLBACK
            # The tag code (ASCII tags only: others are hashed over UTF-16 by the reference).
            code = 0
            if counted and props_at < record_end:
                v = _prop(log, props_at, record_end, b"TAGS", 4)
                if v >= 0:
                    v_end = _value_end(log, v, record_end)
                    if not _ascii(log, v, v_end):
                        status = _NEEDS_PYTHON
                        break
                    code = _hash_more(0, log, v, v_end)
                    if code >= _MIN32:
                        code -= _WRAP32
            # Index keys: UNIQ_KEY, then each word of KEYS, as topic#key.
            uniq = -1
            uniq_end = 0
            keys = -1
            keys_end = 0
            wanted = 0
            if index and props_at < record_end and phys > index_from:
                uniq = _prop(log, props_at, record_end, b"UNIQ_KEY", 8)
                if uniq >= 0:
                    uniq_end = _value_end(log, uniq, record_end)
                    if uniq_end > uniq:
                        wanted += 1
                keys = _prop(log, props_at, record_end, b"KEYS", 4)
                if keys >= 0:
                    keys_end = _value_end(log, keys, record_end)
                    i = keys
                    while i < keys_end:
                        if log[i] != 32 and (i == keys or log[i - 1] == 32):
                            wanted += 1
                        i += 1
                if ((uniq >= 0 and not _ascii(log, uniq, uniq_end))
                        or (keys >= 0 and not _ascii(log, keys, keys_end))
                        or wanted > key_cap):
                    status = _NEEDS_PYTHON
                    break
            slot = -1
            if counted:
                queue_id = _i32(log, pos + 12)
                queue_offset = _i64(log, pos + 20)
                if (last_slot >= 0 and work[slot_at + last_slot * 5 + 2] == queue_id
                        and work[slot_at + last_slot * 5 + 1] == topic_len
                        and _same_at(log, topic_at, work[slot_at + last_slot * 5], topic_len)):
                    slot = last_slot
                else:
                    j = 0
                    while j < nslots:
                        r = slot_at + j * 5
                        if (work[r + 2] == queue_id and work[r + 1] == topic_len
                                and _same_at(log, topic_at, work[r], topic_len)):
                            slot = j
                            break
                        j += 1
            if (count >= unit_cap or nkeys + wanted > key_cap
                    or (counted and slot < 0 and nslots >= _SLOTS)):
                status = _FULL
                break
            if counted:
                if slot < 0:
                    slot = nslots
                    r = slot_at + slot * 5
                    work[r] = topic_at
                    work[r + 1] = topic_len
                    work[r + 2] = queue_id
                    work[r + 3] = 0
                    nslots += 1
                last_slot = slot
                work[slot_at + slot * 5 + 3] += 1
                work[unit_slot + nunits] = slot
                work[unit_qo + nunits] = queue_offset
                work[unit_end + nunits] = phys + total
                u = nunits * _UNIT
                _put64(tmp, u, phys)
                _put32(tmp, u + 8, total)
                _put64(tmp, u + 12, code)
                nunits += 1
            if wanted:
                store_ts = _i64(log, pos + 56)
                prefix = (31 * _hash_more(0, log, topic_at, topic_at + topic_len) + 35
                          ) & _MASK32  # topic#
                if uniq >= 0 and uniq_end > uniq:
                    hashes[nkeys] = _key_hash(_hash_more(prefix, log, uniq, uniq_end))
                    offsets[nkeys] = phys
                    times[nkeys] = store_ts
                    nkeys += 1
                if keys >= 0:
                    i = keys
                    while i < keys_end:
                        if log[i] == 32:
                            i += 1
                            continue
                        j = i
                        while j < keys_end and log[j] != 32:
                            j += 1
                        hashes[nkeys] = _key_hash(_hash_more(prefix, log, i, j))
                        offsets[nkeys] = phys
                        times[nkeys] = store_ts
                        nkeys += 1
                        i = j
            count += 1
            pos = record_end
        # Group the units by queue (a counting sort that keeps their order within a queue),
        # then cut each queue's units into runs of consecutive queue offsets.
        j = 0
        r = 0
        while j < nslots:
            work[slot_at + j * 5 + 4] = r
            r += work[slot_at + j * 5 + 3]
            j += 1
        i = 0
        while i < nunits:
            j = slot_at + work[unit_slot + i] * 5 + 4
            r = work[j]
            work[j] = r + 1
            _copy(units, r * _UNIT, tmp, i * _UNIT, _UNIT)
            work[sorted_qo + r] = work[unit_qo + i]
            work[sorted_end + r] = work[unit_end + i]
            i += 1
        i = 0
        j = 0
        while j < nslots:
            n = work[slot_at + j * 5 + 3]
            r = i + n  # one past this queue's units
            while i < r:
                q = nruns * _RUN
                runs[q] = work[slot_at + j * 5]
                runs[q + 1] = work[slot_at + j * 5 + 1]
                runs[q + 2] = work[slot_at + j * 5 + 2]
                runs[q + 3] = work[sorted_qo + i]
                runs[q + 4] = 1
                runs[q + 5] = work[sorted_end + i]
                i += 1
                while i < r and work[sorted_qo + i] == work[sorted_qo + i - 1] + 1:
                    runs[q + 4] += 1
                    runs[q + 5] = work[sorted_end + i]
                    i += 1
                nruns += 1
            j += 1
    return pos, count, nruns, nkeys, status


def work_size(units):
    """The numbers :func:`scan` needs in ``work`` for ``units`` units."""
    return 5 * units + 5 * _SLOTS


def index_put(view, slot_num, index_num, count, begin_ts, hashes, offsets, times, start, n):
    """Write index entries ``start .. start + n`` into an index file's bytes (``view``: its
    40-byte header, ``slot_num`` slots, ``index_num`` entries) that holds ``count`` entries,
    as ``IndexFile.put`` writes them one by one. Returns ``(entries written, slots that were
    empty)``; it stops when the file is full."""
    if (slot_num <= 0 or count < 1 or start < 0 or n < 0 or start + n > len(hashes)
            or start + n > len(offsets) or start + n > len(times)
            or len(view) < _INDEX_HEADER + slot_num * 4 + index_num * 20):
        raise ValueError("index entries or file out of range")
    written = 0
    new_slots = 0
    entries_at = _INDEX_HEADER + slot_num * 4
    with cython.nogil:
        while written < n and count < index_num:
            h = hashes[start + written]
            slot_at = _INDEX_HEADER + (h % slot_num) * 4
            prev = _i32(view, slot_at)
            if prev <= 0 or prev > count:
                prev = 0
                new_slots += 1
            t = times[start + written]
            # Compared before subtracting: a hostile timestamp must not overflow.
            if t <= begin_ts:
                diff = 0
            elif begin_ts < 0 and t > begin_ts + _MAX_LL:
                diff = _MAX_INT
            else:
                diff = (t - begin_ts) // 1000
                if diff > _MAX_INT:
                    diff = _MAX_INT
            at = entries_at + count * 20
            _put32(view, at, h)
            _put64(view, at + 4, offsets[start + written])
            _put32(view, at + 12, diff)
            _put32(view, at + 16, prev)
            _put32(view, slot_at, count)
            count += 1
            written += 1
    return written, new_slots


def _copy(dst, at, src, src_at, n):
    """``dst[at:at + n] = src[src_at:src_at + n]`` (the compiled twin copies with memcpy's
    speed; the ranges are the caller's to check)."""
    i = 0
    while i < n:
        dst[at + i] = src[src_at + i]
        i += 1
