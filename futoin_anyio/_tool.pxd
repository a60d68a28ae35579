# The compiled build's declarations for _tool.py: see _frame.pxd.
cimport cython

from futoin_anyio._driver cimport _Driver, Handle


# Final, and an extension type like _Driver: a cpdef method of the driver called from C then
# needs no look-up for a Python override (a Python subclass would make every such call one).
@cython.final
cdef class AsyncTool(_Driver):
    @cython.locals(handle=Handle)
    cpdef Handle immediate(self, func)


@cython.locals(tool=AsyncTool)
cpdef AsyncTool private_tool()


# Module globals read by this module's code, held in C variables (see _frame.pxd).
cdef object _EMPTY, deque
