# The compiled build's declarations for _alarm.py: see _frame.pxd. A set_timeout() over an
# inline coroutine step arms and disarms an alarm per inline run and per wait in a task group's
# exit: compiled, both are C calls.
cimport cython


@cython.final
cdef class Alarm:
    cdef public object _handle, _sleeper, due, when

    cpdef disarm(self)
    cpdef _fire(self)


@cython.final
cdef class _Sleeper:
    cdef public object deadline, heap, scope, token
    cdef public Py_ssize_t live, seq

    cpdef _top(self)


cpdef Alarm arm(str library, loop, when, due)

@cython.locals(sleeper=_Sleeper)
cpdef _Sleeper _sleeper(token)

@cython.locals(sleeper=_Sleeper)
cpdef _trio_arm(Alarm alarm, token)


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object Context, heapify, heappop, heappush, logger, math, sys
