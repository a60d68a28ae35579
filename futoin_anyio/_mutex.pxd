# The compiled build's declarations for _mutex.py: see _frame.pxd.
cimport cython

from futoin_anyio._driver cimport _Driver
from futoin_anyio._flow cimport _Flow
from futoin_anyio._frame cimport _Switches
from futoin_anyio._hooks cimport check_section, flow_key, go_on_with, on_exit, refuse
from futoin_anyio._throttle cimport _Section as _RateSection


@cython.final
cdef class _Entry:
    cdef public object args, asi, func, item, key, onerror, since, state
    cdef public Mutex mutex


@cython.final
cdef class Mutex:
    cdef object __weakref__
    cdef public object _label, _name, _owners, _queue, _thread
    cdef public Py_ssize_t _held, _max

    cpdef bint _acquire_nowait(self, key, thread) except -1
    cpdef _release(self, key, what=*)
    cpdef _grant(self)


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object DONE, Event, HELD, NEW, QUEUED, TYPE_CHECKING, WaitQueue, _ins
cdef object cancel_shielded_checkpoint
cdef object check_count, check_name, check_queue, checkpoint_if_cancelled
cdef object dataclass, enter_thread, final, get_ident, lazy_binary, monotonic, state_name
cdef object task_key

# What the engine tests on its paths (_frame.SWITCHES): a C field each, typed.
cdef _Switches SWITCHES
