# The compiled build's declarations for _limiter.py: see _frame.pxd.
cimport cython

from futoin_anyio._hooks cimport check_section
from futoin_anyio._throttle cimport _Section as ThrottleSection


cdef class _Section(ThrottleSection):
    pass


@cython.final
cdef class Limiter:
    cdef object __weakref__
    cdef public object _mutex, _throttle


# Module globals read by this module's code on an entry's path, held in C variables (see
# _mutex.pxd).
cdef object _Entry
