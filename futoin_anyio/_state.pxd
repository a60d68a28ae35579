# The compiled build's declarations for _state.py: see _frame.pxd. State is an extension type
# whose attribute read is C: a variable is one dict look-up, with no attribute hook called.
cimport cython
from cpython.object cimport PyObject_GenericGetAttr


cdef class State(dict):
    pass


# Module globals read by this module's code, held in C variables (see _frame.pxd).
cdef object _RESERVED
