# The compiled build's declarations for _steps.py: see _frame.pxd.
cimport cython
from cpython.dict cimport PyDict_SetDefault, PyDict_Update

from futoin_anyio._driver cimport _Driver
from futoin_anyio._flow cimport _Flow, _flow_deadline
from futoin_anyio._frame cimport _end_ext, _Ext, _Frame, _own_ext, _Switches
from futoin_anyio._state cimport State
from futoin_anyio._tool cimport private_tool


# Its slots are _Frame's. Not final: users subclass it.
# No cpdef method: a vtable pointer would make every step object larger (the helpers of the
# hot paths are functions below instead).
cdef class AsyncSteps(_Frame):
    pass


@cython.locals(flow=_Flow, driver=_Driver)
cpdef bint _foreign_thread(_Frame step) except -1

cpdef _Flow _start_flow(_Frame root, _Driver driver)

cpdef object _state_from(variables)

cpdef object _fresh_state()

@cython.locals(ext=_Ext, flow=_Flow, driver=_Driver)
cpdef _set_timeout(_Frame step, timeout_ms)


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object AsyncTool, BURST, COMPILED, CORO_CREATED, Errors
cdef object FutoInError, Iterable, Mapping, ParallelSteps
cdef object TYPE_CHECKING, _FOR_EACH, _LOOP, _Loop, _REPEAT, _STATUS_NAMES, _WAIT_ONLY
cdef object _YIELD_EVERY, _binary, _check_ms, _ins, _internal
cdef list _first_runs
cdef object _PREDEFINED, _runner, _wrong_thread, get_ident
cdef object getcoroutinestate, hooked_flow, isawaitable, iscoroutine, logger, logging
cdef object sys

# What the engine tests on its paths (_frame.SWITCHES): a C field each, typed.
cdef _Switches SWITCHES

# The module's own state, rebound with ``global`` (C variables, read and written in C).
cdef object _asyncio_check, _trio_check
cdef Py_ssize_t _unyielded

# The step statuses (_frame), C ints: compared and stored as such.
cdef int MODEL, EXEC, HANDLER, SUBSTEPS, WAIT, CORO, ROOT, DONE, FAILING
