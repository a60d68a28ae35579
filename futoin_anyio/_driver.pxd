# The compiled build's declarations for _driver.py: see _frame.pxd.
cimport cython

from futoin_anyio._alarm cimport Alarm, arm as arm_alarm
from futoin_anyio._flow cimport _coroutine_done, _Flow, _flow_deadline, _outer_flow, _start_root
from futoin_anyio._frame cimport _Ext, _Frame, _Switches


cdef class _Driver  # declared below: a Handle's tool


@cython.final
cdef class Handle:
    cdef public object _args, _func
    cdef public _Driver _tool


# Not final: AsyncTool (_tool.py) is its subclass.
cdef class _Driver:
    cdef object __weakref__
    cdef public object _caller_ctx, _clock, _ctx_token, _current, _fatal
    cdef public object _helper_ended
    cdef public Alarm _inline_alarm, _spare_alarm
    cdef public object _inline, _inline_ctx
    cdef public _Flow _inline_flow, _main
    cdef public _Frame _inline_next
    cdef public object _inline_scope, _instruments, _joins
    cdef public object _library, _own_ctx
    cdef public object _pending_coros, _raw_idle, _raw_tasks, _ready, _roots, _sleep_scope
    cdef public object _tasks_idle, _tg, _thread, _threadsafe, _timers
    cdef public bint _closing, _exited, _helper, _need_tg, _public, _slept
    cdef public Py_ssize_t _coro_tasks, _inflight, _pending, _seq

    cpdef _schedule(self, _Flow flow)
    cpdef _wake(self)
    # Called per promise() or per coroutine step: C calls from typed code, no method look-up.
    cpdef _init(self)
    cpdef _bind(self)
    cpdef _start_coroutine(self, _Frame step, coro)
    cpdef _start_pending_coros(self)
    cpdef tuple _call_timeout(self, delay_s, _Frame frame, timeout_ms)
    cpdef _push_timer(self, deadline, Handle handle, bint wake)
    cpdef object _next_deadline(self)
    cpdef _arm_inline(self, deadline)
    cpdef _drop_spare(self)
    cpdef object _task_context(self)
    @cython.locals(handle=Handle, step=_Frame, outer=_Flow, above=_Flow)
    cpdef bint _foreign_timers(self, _Flow flow) except -1
    cpdef bint _idle_after_promise(self) except -1
    cpdef _tasks_now_idle(self)
    cpdef _cancel_all(self)
    @cython.locals(flow=_Flow, typed=bint)
    cpdef _tick(self)
    cpdef object _live_timers(self)
    cpdef _fire_timers(self)
    cpdef bint _work_due(self) except -1
    cpdef Alarm _claim_alarm(self, deadline, due)
    cpdef Alarm _new_alarm(self, deadline, due)
    cpdef Alarm _take_spare(self, deadline, due)


@cython.locals(tool=_Driver, roots=set)
cpdef _execute(_Frame root, unhandled_error=*)

@cython.locals(handle=Handle)
cpdef Handle _new_handle(_Driver tool, func, args)

cpdef _run_callback(Handle handle)

cpdef object _checkpoint(library)


@cython.final
cdef class _RawTask:
    cdef public object cancelled, scope, task


# Module globals read by this module's code, held in C variables: from CPython 3.12 on,
# Cython caches no module-global look-up (each read would be a dict look-up). They are
# no attributes of the compiled module: nothing imports them from it (tests/test_pxd_sync.py).
cdef object Any, COMPILED, Callable, CancelScope, Coroutine, Errors
cdef object FutoInError, Lock, _ins, _TASK_CONTEXT, _asyncio_current_task
cdef object Awaitable, Context, Generator
cdef object TYPE_CHECKING, _Future, _LEFT, _PRUNE_SLACK, _asyncio_future_type, _close_unstarted
cdef object _has_running, _inline_cancelled, _judgeable_group, _on_timeout
cdef object _asyncio_sleep, _running_asyncio_loop, _sniffio, anyio, cancel_scope
cdef object copy_context, deque, get_cancelled_exc_class, get_ident
cdef object heapify, heappop, heappush, logger, logging, math, scope_class, sys
# The module's own state, rebound with ``global`` (C variables, read and written in C).
cdef object _trio_lowlevel, _trio_run
cdef bint _backend_loaded

# What the engine tests on its paths (_frame.SWITCHES): a C field each, typed.
cdef _Switches SWITCHES

# The step statuses (_frame), C ints: compared and stored as such.
cdef int MODEL, CORO, ROOT, CANCELLING
