# C types for the compiled twin of _codec.py (Cython's "augmenting .pxd"): the build compiles
# a copy of _codec.py named _ccodec.py with these declarations; the Python source is the same.
import cython

cdef unsigned long long _MASK32, _MIN32, _WRAP32

@cython.locals(h=cython.ulonglong, c=cython.uchar, i=cython.Py_ssize_t, key=bytes, raw=bytes)
cpdef list index_hashes(list keys)

@cython.locals(end=cython.Py_ssize_t, pos=cython.Py_ssize_t, p=cython.Py_ssize_t,
               props_at=cython.Py_ssize_t, props_len=cython.Py_ssize_t,
               total=cython.Py_ssize_t, body_len=cython.Py_ssize_t)
cpdef list split_batch(body)

@cython.locals(end=cython.Py_ssize_t, pos=cython.Py_ssize_t, p=cython.Py_ssize_t,
               total=cython.Py_ssize_t, body_len=cython.Py_ssize_t, magic=cython.longlong,
               sysflag=cython.longlong, topic_len=cython.Py_ssize_t,
               topic_at=cython.Py_ssize_t, record_end=cython.Py_ssize_t)
cpdef list pulled(bytes data)

@cython.locals(end=cython.Py_ssize_t, pos=cython.Py_ssize_t, length=cython.longlong)
cpdef tuple frame_spans(bytes data, Py_ssize_t max_frame)
