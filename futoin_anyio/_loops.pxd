# The compiled build's declarations for _loops.py: see _frame.pxd.
cimport cython


@cython.final
cdef class _Loop:
    cdef public object data, func, kind, label


@cython.final
cdef class _LoopRun:
    cdef public object it, item, label
