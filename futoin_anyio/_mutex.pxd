# The compiled build's declarations for _mutex.py: see _frame.pxd.
cimport cython


@cython.final
cdef class _Entry:
    cdef public object args, asi, func, item, key, mutex, onerror, since, state
