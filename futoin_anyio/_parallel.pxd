# The compiled build's declarations for _parallel.py: see _frame.pxd.
cimport cython

from futoin_anyio._driver cimport _Driver
from futoin_anyio._flow cimport _Flow, _new_frame
from futoin_anyio._frame cimport _end_ext, _Frame, _Switches


@cython.final
cdef class ParallelSteps:
    cdef public list _branches
    cdef public _Frame _owner
    cdef public object _results


@cython.final
cdef class _ParallelRun:
    cdef public list flows
    cdef public _Frame frame
    cdef public bint over
    cdef public Py_ssize_t remaining
    cdef public object results


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object TYPE_CHECKING, _Ext, _NO_ARGS, _halt, _ins, _internal
cdef object _stop_coroutines, _unwinding, _wrong_thread, deque, get_ident, partial, threading

# What the engine tests on its paths (_frame.SWITCHES): a C field each, typed.
cdef _Switches SWITCHES

# The step statuses (_frame), C ints: compared and stored as such.
cdef int SUBSTEPS, DONE, FAILING
