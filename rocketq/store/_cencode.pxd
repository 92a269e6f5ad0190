# C types for the compiled twin of _encode.py (Cython's "augmenting .pxd"): the build compiles
# a copy of _encode.py named _cencode.py with these declarations; the Python source is the same.
import cython

cdef extern from "zlib.h":
    unsigned long _zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf,
                                      unsigned int n) nogil

cdef long long _MAGIC_V1, _TRAN_MASK, _PREPARED, _ROLLBACK
cdef Py_ssize_t _HEADER_SIZE
cdef long long _MASK32, _MIN32, _WRAP32
cdef const unsigned int[::1] _CRC_TABLE

@cython.locals(w=cython.ulonglong, x=cython.ulonglong, y=cython.ulonglong, z=cython.ulonglong)
cdef unsigned long long _u32(const unsigned char[::1] b, Py_ssize_t at) noexcept nogil

@cython.locals(s=cython.longlong)
cdef long long _i32(const unsigned char[::1] b, Py_ssize_t at) noexcept nogil

cdef void _put32(unsigned char[::1] b, Py_ssize_t at, long long v) noexcept nogil

cdef void _put64(unsigned char[::1] b, Py_ssize_t at, long long v) noexcept nogil

@cython.locals(crc=cython.uint, i=cython.Py_ssize_t)
cdef unsigned int _crc32(const unsigned char[::1] b, Py_ssize_t at, Py_ssize_t n,
                         const unsigned int[::1] table) noexcept nogil

@cython.locals(i=cython.Py_ssize_t)
cdef void _copy(unsigned char[::1] dst, Py_ssize_t at, const unsigned char[::1] src,
                Py_ssize_t src_at, Py_ssize_t n) noexcept nogil

@cython.locals(end=cython.Py_ssize_t, pos=cython.Py_ssize_t, n=cython.Py_ssize_t,
               total=cython.longlong, body_len=cython.longlong, p=cython.Py_ssize_t,
               props_at=cython.Py_ssize_t, props_len=cython.Py_ssize_t,
               stored=cython.Py_ssize_t)
cpdef tuple batch_check(const unsigned char[::1] body, Py_ssize_t extra, Py_ssize_t fixed,
                        Py_ssize_t max_body, Py_ssize_t max_props, Py_ssize_t max_record)

@cython.locals(topic_len=cython.Py_ssize_t, extra=cython.Py_ssize_t, cap=cython.Py_ssize_t,
               flag=cython.longlong, body_len=cython.longlong, body_at=cython.Py_ssize_t,
               props_at=cython.Py_ssize_t, props_len=cython.Py_ssize_t, sep=cython.Py_ssize_t,
               stored=cython.Py_ssize_t, size=cython.Py_ssize_t, at=cython.Py_ssize_t)
cpdef tuple batch_encode(unsigned char[::1] dst, Py_ssize_t w, const unsigned char[::1] body,
                         Py_ssize_t pos, Py_ssize_t k, Py_ssize_t count,
                         const unsigned char[::1] topic, const unsigned char[::1] suffix,
                         Py_ssize_t free, long long phys, long long queue_id,
                         long long queue_offset, bint counted, long long sysflag,
                         long long born_ts, const unsigned char[::1] born_host,
                         long long born_port, long long store_ts,
                         const unsigned char[::1] store_host, long long store_port,
                         long long reconsume, long long[::1] offsets, int[::1] sizes)



@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, body_len=cython.Py_ssize_t,
               props_len=cython.Py_ssize_t, queue_id=cython.longlong, tran=cython.longlong)
cpdef tuple messages_check(list msgs, Py_ssize_t start, dict topic_parts, Py_ssize_t fixed,
                           Py_ssize_t max_body, Py_ssize_t max_props, Py_ssize_t max_record,
                           dict counts)

@cython.locals(n=cython.Py_ssize_t, size=cython.Py_ssize_t, sysflag=cython.longlong,
               tran=cython.longlong, queue_offset=cython.longlong, part=bytes)
cpdef tuple messages_encode(unsigned char[::1] dst, Py_ssize_t w, list msgs, Py_ssize_t k,
                            dict topic_parts, Py_ssize_t free, long long phys,
                            dict queue_offsets, long long store_ts,
                            bytes store_host, long long store_port,
                            long long[::1] offsets, int[::1] sizes,
                            long long[::1] queue_numbers)

@cython.locals(at=cython.Py_ssize_t)
cdef void _record(unsigned char[::1] dst, Py_ssize_t w, Py_ssize_t size, long long queue_id,
                  long long flag, long long queue_offset, long long phys, long long sysflag,
                  long long born_ts, const unsigned char* born_host, Py_ssize_t born_host_len,
                  long long born_port, long long store_ts, const unsigned char* store_host,
                  Py_ssize_t store_host_len, long long store_port, long long reconsume,
                  long long prepared, const unsigned char* body, Py_ssize_t body_len,
                  const unsigned char* topic, Py_ssize_t topic_len,
                  const unsigned char* props, Py_ssize_t props_len) noexcept nogil

@cython.locals(i=cython.Py_ssize_t)
cdef void _copy_from(unsigned char[::1] dst, Py_ssize_t at, const unsigned char* src,
                     Py_ssize_t n) noexcept nogil

@cython.locals(crc=cython.uint, i=cython.Py_ssize_t)
cdef unsigned int _crc32_of(const unsigned char* b, Py_ssize_t n,
                            const unsigned int[::1] table) noexcept nogil

@cython.locals(width=cython.Py_ssize_t)
cpdef str msg_ids(bytes prefix, const long long[::1] offsets, Py_ssize_t n)

@cython.locals(i=cython.Py_ssize_t, at=cython.Py_ssize_t, v=cython.longlong,
               j=cython.Py_ssize_t, d=cython.longlong)
cdef void _fill_ids(unsigned char[::1] out, const unsigned char* prefix, Py_ssize_t p,
                    const long long[::1] offsets, Py_ssize_t n) noexcept nogil
