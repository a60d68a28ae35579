# The compiled build's declarations for _parallel.py: see _frame.pxd.
cimport cython

from futoin_anyio._flow cimport _Flow, _new_frame
from futoin_anyio._frame cimport _end_ext, _Frame


@cython.final
cdef class _ParallelRun:
    cdef public list flows
    cdef public _Frame frame
    cdef public bint over
    cdef public Py_ssize_t remaining
    cdef public object results
