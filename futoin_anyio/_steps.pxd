# The compiled build's declarations for _steps.py: see _frame.pxd.
cimport cython

from futoin_anyio._flow cimport _Flow, _flow_deadline
from futoin_anyio._frame cimport _end_ext, _Ext, _Frame, _own_ext


# Its slots are _Frame's. Not final: users subclass it.
# Deallocated step objects keep their memory for the next ones (steps are not reused when
# compiled: see _flow._step_reuse_proven).
@cython.freelist(64)
cdef class AsyncSteps(_Frame):
    pass
