# C types for the compiled twin of _records.py (Cython's "augmenting .pxd"): the build compiles
# a copy of _records.py named _crecords.py with these declarations; the Python source is the
# same. The helpers take no Python objects, so the loops that call them run without the GIL.
import cython

cdef extern from "zlib.h":
    unsigned long _zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf,
                                      unsigned int n) nogil

cdef long long _MAGIC_V1, _MAGIC_V2, _TRAN_MASK, _PREPARED, _ROLLBACK, _V6_HOSTS, _MAX_INT, _MAX_LL
cdef Py_ssize_t _HEADER_SIZE, _OVERHEAD, _UNIT, _RUN, _INDEX_HEADER, _SLOTS
cdef int _DONE, _FULL, _NEEDS_PYTHON, _NOT_A_RECORD
cdef long long _MASK32, _MIN32, _WRAP32
cdef const unsigned int[::1] _CRC_TABLE

@cython.locals(w=cython.ulonglong, x=cython.ulonglong, y=cython.ulonglong, z=cython.ulonglong)
cdef unsigned long long _u32(const unsigned char[::1] b, Py_ssize_t at) noexcept nogil

@cython.locals(s=cython.longlong)
cdef long long _i32(const unsigned char[::1] b, Py_ssize_t at) noexcept nogil

cdef long long _i64(const unsigned char[::1] b, Py_ssize_t at) noexcept nogil

cdef void _put32(unsigned char[::1] b, Py_ssize_t at, long long v) noexcept nogil

cdef void _put64(unsigned char[::1] b, Py_ssize_t at, long long v) noexcept nogil

@cython.locals(crc=cython.uint, i=cython.Py_ssize_t)
cdef unsigned int _crc32(const unsigned char[::1] b, Py_ssize_t at, Py_ssize_t n,
                                const unsigned int[::1] table) noexcept nogil

@cython.locals(i=cython.Py_ssize_t)
cdef bint _same(const unsigned char[::1] b, Py_ssize_t at,
                       const unsigned char[::1] other, Py_ssize_t n) noexcept nogil

@cython.locals(i=cython.Py_ssize_t)
cdef bint _same_at(const unsigned char[::1] b, Py_ssize_t at, Py_ssize_t other_at,
                          Py_ssize_t n) noexcept nogil

@cython.locals(i=cython.Py_ssize_t)
cdef bint _named(const unsigned char[::1] b, Py_ssize_t at, const char* name,
                        Py_ssize_t n) noexcept nogil

@cython.locals(seg=cython.Py_ssize_t, i=cython.Py_ssize_t)
cdef Py_ssize_t _prop(const unsigned char[::1] b, Py_ssize_t at, Py_ssize_t end,
                             const char* name, Py_ssize_t name_len) noexcept nogil

cdef Py_ssize_t _value_end(const unsigned char[::1] b, Py_ssize_t at,
                                  Py_ssize_t end) noexcept nogil

cdef bint _ascii(const unsigned char[::1] b, Py_ssize_t at, Py_ssize_t end) noexcept nogil

cdef unsigned long long _hash_more(unsigned long long h, const unsigned char[::1] b,
                                          Py_ssize_t at, Py_ssize_t end) noexcept nogil

cdef long long _key_hash(unsigned long long h) noexcept nogil

@cython.locals(unit_cap=cython.Py_ssize_t,
               run_cap=cython.Py_ssize_t, key_cap=cython.Py_ssize_t,
               sched_len=cython.Py_ssize_t, timer_len=cython.Py_ssize_t,
               count=cython.Py_ssize_t, nunits=cython.Py_ssize_t, nruns=cython.Py_ssize_t, nkeys=cython.Py_ssize_t,
               status=cython.int, unit_slot=cython.Py_ssize_t, unit_qo=cython.Py_ssize_t,
               unit_end=cython.Py_ssize_t, sorted_qo=cython.Py_ssize_t,
               sorted_end=cython.Py_ssize_t, slot_at=cython.Py_ssize_t,
               nslots=cython.Py_ssize_t, last_slot=cython.Py_ssize_t, slot=cython.Py_ssize_t,
               n=cython.Py_ssize_t, q=cython.Py_ssize_t, total=cython.longlong, magic=cython.longlong,
               sysflag=cython.longlong, body_len=cython.longlong,
               record_end=cython.Py_ssize_t, p=cython.Py_ssize_t, topic_len=cython.Py_ssize_t,
               topic_at=cython.Py_ssize_t, props_at=cython.Py_ssize_t, phys=cython.longlong,
               tran=cython.longlong, counted=cython.bint, code=cython.longlong,
               v=cython.Py_ssize_t, v_end=cython.Py_ssize_t, uniq=cython.Py_ssize_t,
               uniq_end=cython.Py_ssize_t, keys=cython.Py_ssize_t, keys_end=cython.Py_ssize_t,
               wanted=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.Py_ssize_t,
               queue_id=cython.longlong, queue_offset=cython.longlong, r=cython.Py_ssize_t,
               u=cython.Py_ssize_t, store_ts=cython.longlong, prefix=cython.ulonglong)
cpdef tuple scan(const unsigned char[::1] log, Py_ssize_t pos, Py_ssize_t stop, long long base,
                 bint validate, bint index, long long index_from,
                 const unsigned char[::1] schedule_topic, const unsigned char[::1] timer_topic,
                 unsigned char[::1] units, long long[::1] runs, long long[::1] hashes,
                 long long[::1] offsets, long long[::1] times, unsigned char[::1] tmp,
                 long long[::1] work)

cpdef Py_ssize_t work_size(Py_ssize_t units)

@cython.locals(written=cython.Py_ssize_t, new_slots=cython.Py_ssize_t,
               entries_at=cython.Py_ssize_t, h=cython.longlong, slot_at=cython.Py_ssize_t,
               prev=cython.longlong, diff=cython.longlong, at=cython.Py_ssize_t,
               t=cython.longlong)
cpdef tuple index_put(unsigned char[::1] view, long long slot_num, long long index_num,
                      long long count, long long begin_ts, const long long[::1] hashes,
                      const long long[::1] offsets, const long long[::1] times,
                      Py_ssize_t start, Py_ssize_t n)

@cython.locals(i=cython.Py_ssize_t)
cdef void _copy(unsigned char[::1] dst, Py_ssize_t at, const unsigned char[::1] src,
                Py_ssize_t src_at, Py_ssize_t n) noexcept nogil
