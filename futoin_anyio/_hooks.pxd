# The compiled build's declarations for _hooks.py: see _frame.pxd. The sync primitives call
# these on every sync() and entry: compiled, their calls from compiled code are C calls.
cimport cython

from futoin_anyio._driver cimport _Driver
from futoin_anyio._flow cimport _Flow
from futoin_anyio._frame cimport _Ext, _Frame, _own_ext


cpdef check_section(what, func, onerror)

cpdef object flow_key(_Frame asi)

@cython.locals(ext=_Ext)
cpdef on_exit(_Frame asi, hook, arg)

@cython.locals(flow=_Flow)
cpdef refuse(_Frame asi, error)

@cython.locals(flow=_Flow, driver=_Driver)
cpdef bint go_on_with(_Frame asi, item, args) except -1


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object Errors, FutoInError, import_module

# The step statuses (_frame), C ints: compared and stored as such.
cdef int SUBSTEPS, WAIT
