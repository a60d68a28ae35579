# The compiled build's declarations for _throttle.py: see _frame.pxd.
cimport cython

from futoin_anyio._frame cimport _Switches
from futoin_anyio._hooks cimport check_section


@cython.final
cdef class _Waiter:
    cdef public object args, asi, event, period_end, since, state, throttle


# Not final: the Limiter's section (_limiter.py) is its subclass. A Mutex entry calls the two
# methods of the Limiter's in C (_mutex.pxd cimports it).
cdef class _Section:
    cdef public object func, onerror
    cdef public Throttle throttle

    cpdef object _admit(self, asi)
    cpdef _go_on(self, asi, bint entered, tuple args)


@cython.final
cdef class Throttle:
    cdef object __weakref__
    cdef public object _label, _name, _period, _period_end, _period_ms, _queue, _thread
    cdef public object _timer, _timer_host
    cdef public Py_ssize_t _count, _max


# Module globals read by this module's code on an entry's path, held in C variables (see
# _mutex.pxd).
cdef object _EPS, enter_thread, refuse

# What the engine tests on its paths (_frame.SWITCHES): a C field, typed.
cdef _Switches SWITCHES
