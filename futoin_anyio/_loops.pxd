# The compiled build's declarations for _loops.py: see _frame.pxd.
cimport cython


@cython.final
cdef class _Loop:
    cdef public object data, func, kind, label


@cython.final
cdef class _LoopRun:
    cdef public object func, it, label
    cdef public bint builtin


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object Errors, Mapping, TYPE_CHECKING, _Ext, _NO_ARGS, _forever
