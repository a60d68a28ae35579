# The compiled build's declarations for _frame.py (Cython 3, pure-Python mode): see
# docs/internals.rst, "The compiled build". Every slot of a class declared here is declared
# here, and nothing else (tests/test_pxd_sync.py).
cimport cython


cdef class _Ext:
    cdef public object cleanups, coro, deadline, exit_arg, loop, on_exit, oncancel, par
    cdef public object pending, scope, timer
    cdef public bint waiting


@cython.final
cdef class _Switches:
    cdef public bint active, hooked, reuse, times
    cdef public Py_ssize_t cancels


cdef class _Frame:
    cdef public object _binary, _flow, _func, _onerror, _state, _tool, _unhandled
    # C values: no reference to count, nothing for the garbage collector to visit.
    cdef public int _status
    cdef public bint _started
    cdef public _Ext _ext
    cdef public _Frame _parent
    cdef public list _queue


cpdef _Ext _own_ext(_Frame frame)

@cython.locals(ext=_Ext)
cpdef _end_ext(_Frame frame)

cpdef _run_cleanups(_Ext ext)


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object Errors, FutoInError, TYPE_CHECKING, TypeVar, logger, logging
