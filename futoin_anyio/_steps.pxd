# The compiled build's declarations for _steps.py: see _frame.pxd.
from futoin_anyio._frame cimport _Ext, _Frame


# Its slots are _Frame's. Not final: users subclass it.
cdef class AsyncSteps(_Frame):
    pass
