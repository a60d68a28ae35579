# The compiled build's declarations for _flow.py: see _frame.pxd.
cimport cython

from futoin_anyio._frame cimport _end_ext, _Ext, _Frame, _own_ext, _Switches
from futoin_anyio._loops cimport _LoopRun


# Not final: _traced._HookedFlow and _TracedFlow (flows of roots started while instruments or
# the flow dump's times are on) are its subclasses, and override run() and _root_done().
cdef class _Flow:
    cdef object __weakref__
    cdef public object args, cancel_reason, driver, handed, loop_label, on_unhandled, par, result_code
    cdef public bint executed, finished, interrupt, queued
    cdef public _Frame root
    cdef public list stack

    cpdef int _go(self, int budget) except? -1

    @cython.locals(stack=list, base=_Frame, frame=_Frame, step=_Frame, spare=_Frame, ext=_Ext,
                   q=list, reuse=bint, loop=_LoopRun)
    cpdef int run(self, int budget) except? -1

    cpdef bint _unwound(self, exc) except -1
    cpdef object _step_raised(self, exc)
    @cython.locals(stack=list, top=_Frame, frame=_Frame, parent=_Frame, handler=_Frame, ext=_Ext)
    cpdef object _unwind(self, code, bint fresh=*)
    cpdef bint _cancelled(self) except -1
    @cython.locals(ext=_Ext)
    cpdef object _cancel_frame(self, _Frame frame, code)
    cpdef _interrupted(self)
    @cython.locals(stack=list, base=_Frame)
    cpdef _finish(self, code)
    cpdef _drop_links(self)
    cpdef _root_done(self)
    cpdef _start_coroutine(self, _Frame step, coro)
    cpdef object outcome(self)
    cpdef object failure(self)


@cython.locals(frame=_Frame)
cpdef _Frame _new_frame(_Frame parent, _Flow flow, int status)

@cython.locals(root=_Frame)
cpdef object _root_state(_Flow flow)

@cython.locals(i=Py_ssize_t, frame=_Frame)
cpdef list _stack_funcs(list stack)

@cython.locals(flow=_Flow, ext=_Ext)
cpdef bint _coroutine_done(_Frame step, result, error, bint inline) except? -1

cpdef bint _go_on(_Flow flow, can, bint inline) except? -1

@cython.locals(flow=_Flow, q=list)
cpdef int _start_root(_Frame root, int budget) except? -1

cpdef _Flow _outer_flow(_Flow flow)

@cython.locals(frame=_Frame, ext=_Ext, current=_Flow)
cpdef double _flow_deadline(_Flow flow) except? -1.0


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object COMPILED, CancelScope, Coroutine, CoroutineType, Errors
cdef object FAILED, FutoInError, GO_ON, PAUSED, State
cdef object TYPE_CHECKING
cdef object _NO_ARGS, _RUNNING, _ins, _loop_onerror, _new, _run_cleanups, _scope_classes, cancel_scope, cast
cdef object flow_reason, get_cancelled_exc_class, logger, logging, math, partial, sys
cdef object timeout_info

# What the engine tests on its paths (_frame.SWITCHES): a C field each, typed.
cdef _Switches SWITCHES

# The step statuses (_frame), C ints: compared and stored as such.
cdef int EXEC, HANDLER, SUBSTEPS, WAIT, CORO, ROOT, DONE, FAILING, CANCELLING
