# The compiled build's declarations for _driver.py: see _frame.pxd.
cimport cython

from futoin_anyio._flow cimport _coroutine_done, _Flow, _flow_deadline


# Not final: AsyncTool (_tool.py) is its subclass.
cdef class _Driver:
    cdef public object _clock, _ctx_token, _current, _fatal, _helper_ended, _inline, _inline_alarm
    cdef public object _inline_next, _inline_scope, _instruments, _joins, _library, _main
    cdef public object _pending_coros, _raw_idle, _raw_tasks, _ready, _roots, _sleep_scope
    cdef public object _tasks_idle, _tg, _thread, _threadsafe, _timers
    cdef public bint _closing, _exited, _helper, _need_tg, _public, _slept
    cdef public Py_ssize_t _coro_tasks, _inflight, _pending, _seq

    cpdef _schedule(self, flow)
    cpdef _wake(self)
    cpdef _tick(self)
    cpdef _fire_timers(self)


@cython.final
cdef class _RawTask:
    cdef public object cancelled, scope, task
