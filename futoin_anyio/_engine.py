"""The AsyncSteps engine: steps, levels, error unwinding, cancellation, loops and parallel.

Vocabulary:

* A **step object** is the ``asi`` a callback receives. It is also the *frame* of that step on its
  flow's stack: it holds the sub-steps queued during its execution (``_queue``) and, in ``_ext``,
  the rarely used parts (cancel handler, timer, parallel run, loop, coroutine scope, ``stack()``
  cleanups) so a trivial step costs one small object.
* A **flow** is one sequential thread of steps: a root, or one branch of a ``parallel()``. Its
  stack is a list of frames: ``stack[0]`` is the root (or the branch container), ``stack[-1]`` the
  innermost active step. Levels are this explicit stack, never Python recursion.
* A **driver** (:class:`~futoin_anyio.AsyncTool`) runs ready flows in bursts.

Error unwinding (``_Flow._unwind``) pops frames innermost first; at each one the cancel handler
runs, then the error handler, which may recover (``success()`` or ``add()``), replace the error
(``error()``) or pass it on (return). Cancellation (``_Flow._cancel``) pops frames the same way
but runs only cancel handlers.

Around this module: ``_frame`` (statuses, the rare frame parts), ``_types`` (callback types,
ISync), ``_loops`` (loop steps), ``_parallel`` (parallel steps) and ``_tool`` (the driver).
"""

from __future__ import annotations

import logging
import math
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from functools import partial
from importlib import import_module
from inspect import CORO_CREATED, getcoroutinestate, isawaitable, iscoroutine
from sys import getrefcount
from threading import get_ident
from typing import TYPE_CHECKING, Any, NoReturn

from anyio import CancelScope, get_cancelled_exc_class
from anyio.lowlevel import cancel_shielded_checkpoint as _cancel_shielded_checkpoint
from anyio.lowlevel import checkpoint_if_cancelled as _checkpoint_if_cancelled

from ._errors import Errors, FutoInError
from ._frame import (
    _CANCELLING,
    _CORO,
    _DONE,
    _EXEC,
    _FAILING,
    _HANDLER,
    _MODEL,
    _NO_ARGS,
    _ROOT,
    _STATUS_NAMES,
    _SUBSTEPS,
    _WAIT,
    _WAIT_ONLY,
    _end_ext,
    _Ext,
    _internal,
    _new,
    _own_ext,
    _run_cleanups,
)
from ._loops import _FOR_EACH, _LOOP, _REPEAT, _Loop
from ._state import State, fresh_state
from ._tool import _EMPTY, BURST, AsyncTool, _check_ms, current_tool, scope_class
from ._types import CancelHandler, ErrorHandler, ISync, StepFunc, _Item

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._parallel import ParallelSteps, _ParallelRun

__all__ = ("AsyncSteps", "flow_key", "go_on_with", "on_exit", "root_id")


def _step_reuse_proven() -> bool:
    """May ``_Flow.run`` reuse a completed step object that ``sys.getrefcount()`` says nobody
    holds? Only where that count is proven to see every holder.

    The test is ``getrefcount(step) == 2`` (the ``step`` variable and the call's argument). Up
    to CPython 3.13 with the GIL, every reference the user can keep — a list, a closure cell, a
    generator or traceback frame, a context variable — is a counted one
    (``tests/test_step_reuse.py`` checks each). CPython 3.14 borrows references on the
    evaluation stack, so counts come out lower and a step the user still holds once could pass
    as unheld; the free-threaded build (3.13t) splits and defers counts; other interpreters have
    no meaningful counts. There the engine always makes a new step object (a few per cent of a
    trivial step's cost), rather than risk handing a user's object to another step.
    """
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 14):
        return False
    if sys.version_info >= (3, 13):
        import sysconfig

        return not sysconfig.get_config_var("Py_GIL_DISABLED")
    return True


#: Evaluated once: the hot path tests a bool.
_REUSE_STEPS = _step_reuse_proven()

logger = logging.getLogger("futoin_anyio")

#: ``promise()`` calls whose driver never yielded, in a row; every ``_YIELD_EVERY``-th makes a
#: schedule point (see :meth:`AsyncSteps.promise`).
_YIELD_EVERY = 16
_unyielded = 0


class AsyncSteps:
    """FutoIn AsyncSteps (FTN12 v1.14): a root to build and run, and the ``asi`` of every step.

    Build a root with :meth:`add` (and :meth:`parallel`, loops…), then run it with
    ``await asi.promise()`` in the current task, or ``asi.execute()`` in the current
    :class:`AsyncTool`. Each callback receives its own step object; it is usable while that step
    executes (or waits), and ``bool(asi)`` turns ``False`` when it goes out of service.

    Threads: a root that has not started may be built on any thread (one at a time). A step
    object in service is used on its event loop's thread: a call from another thread raises
    ``RuntimeError``, except :meth:`success` and :meth:`error` of a step waiting for an external
    event and :meth:`cancel` of a root, which any thread may call (the work is handed to the
    loop's thread).
    """

    # ``_binary`` caches the C binding of the binary bridge (a step with one is never reused).
    # No ``__weakref__``: a step object nothing references may be reused (see ``_Flow.run``).
    __slots__ = (
        "_binary",
        "_ext",
        "_flow",
        "_func",
        "_onerror",
        "_parent",
        "_queue",
        "_started",
        "_state",
        "_status",
        "_tool",
        "_unhandled",
    )

    # The State; a root's is made when it is first used (a queued root that nobody asked for
    # its state then holds one object less for the garbage collector to scan).
    _state: State | None
    _flow: _Flow | None
    _parent: AsyncSteps | None
    # A queued step is its callable, or a ``(func, onerror)`` tuple when it has a handler: most
    # steps have none, and a tuple per step is an allocation the garbage collector tracks.
    # Steps are added only before a frame's sub-steps start to run; then the list is reversed
    # once and consumed with pop() from its end: a FIFO much lighter than a deque.
    _queue: list[_Item] | None
    _onerror: ErrorHandler | None
    _ext: _Ext | None
    _func: object
    _status: int
    _tool: AsyncTool | None
    _unhandled: Callable[[str], object] | None  # execute()'s callback, until the root runs
    _started: bool  # roots only: promise() or execute() was called
    _binary: Any

    def __init__(self, state: Mapping[str, Any] | None = None,
                 tool: AsyncTool | None = None) -> None:
        if state is None:
            self._state = None
        elif isinstance(state, State):
            self._state = state
        elif isinstance(state, Mapping):
            self._state = State(state)
        else:
            raise TypeError(f"state must be a mapping, got {type(state).__name__}")
        if tool is not None and type(tool) is not AsyncTool:
            raise TypeError(f"tool must be an AsyncTool, got {type(tool).__name__}")
        self._tool = tool
        self._flow = None
        self._parent = None
        self._queue = None
        self._onerror = None
        self._ext = None
        self._func = None
        self._binary = None
        self._started = False
        self._status = _MODEL

    @property
    def state(self) -> State:
        """The :class:`State` shared by the root, all its steps and parallel branches.

        A plain ``dict``: while the root runs, use it on the loop's thread (or lock it yourself).
        """
        state = self._state
        if state is None:
            state = self._state = fresh_state()
        return state

    # -- common API (§2.2.1) --------------------------------------------------------------------

    def add(self, func: StepFunc, onerror: ErrorHandler | None = None) -> Self:
        """Add a step (a sub-step, when called inside a step); returns ``self`` for chaining.

        Loop thread (any thread while building a root that has not started)."""
        st = self._status
        if st is not _EXEC and st is not _MODEL and st is not _HANDLER and st is not _CORO:
            self._misuse("add()")
        if st is not _MODEL and get_ident() != self._flow.driver._thread:  # type: ignore[union-attr]
            _wrong_thread("add()")
        if not callable(func):
            _internal(f"add(): the step must be callable, got {type(func).__name__}")
        if onerror is not None and not callable(onerror):
            _internal(f"add(): onerror must be callable, got {type(onerror).__name__}")
        q = self._queue
        if q is None:
            q = self._queue = []
        q.append(func if onerror is None else (func, onerror))
        return self

    def parallel(self, onerror: ErrorHandler | None = None) -> ParallelSteps:
        """Add a parallel step; ``add()`` branches to the returned object.

        Each branch is a separate flow sharing this root's state. The next step runs when every
        branch has completed; the first branch error cancels the other branches and reaches
        ``onerror``. The parallel step succeeds with no arguments. Threads: as :meth:`add`.
        """
        from ._parallel import ParallelSteps

        par = ParallelSteps._create(self)
        self.add(par._run, onerror)
        return par

    def sync(self, obj: ISync, func: StepFunc, onerror: ErrorHandler | None = None) -> Self:
        """Add a step synchronised against ``obj`` (a Mutex, Throttle, Limiter or any ISync).

        Threads: as :meth:`add`."""
        sync = getattr(obj, "sync", None)
        if sync is None and _is_cdata(obj):  # a foreign FutoInSync * has no sync attribute
            sync = _binary().wrap_sync(obj).sync
        if not callable(sync):
            _internal(f"sync(): {type(obj).__name__} does not implement ISync (no sync() method)")
        if not callable(func):
            _internal(f"sync(): the step must be callable, got {type(func).__name__}")
        if onerror is not None and not callable(onerror):
            _internal(f"sync(): onerror must be callable, got {type(onerror).__name__}")
        sync(self, func, onerror)
        return self

    def success_step(self, *args: Any) -> Self:
        """Add a step that succeeds with ``args`` (result injection, §1.12). Threads: as
        :meth:`add`."""
        return self.add(_SuccessStep(args))

    def await_(self, aw: Awaitable[Any], onerror: ErrorHandler | None = None) -> Self:
        """Add a step that awaits ``aw`` (a coroutine, future or other awaitable, §1.13).

        Its result becomes the step's single success argument (none for ``None``); an exception
        is the step's error; cancelling the step cancels the await. Threads: as :meth:`add`.
        """
        if not isawaitable(aw):
            _internal(f"await_(): expected an awaitable, got {type(aw).__name__}")
        return self.add(_AwaitStep(aw), onerror)

    def copy_from(self, other: AsyncSteps) -> Self:
        """Copy the steps of a model root ``other`` and its state variables not present here.

        Threads: as :meth:`add`."""
        if not isinstance(other, AsyncSteps):
            raise TypeError(f"copy_from() needs an AsyncSteps, got {type(other).__name__}")
        if other._status is not _MODEL:
            _internal("copy_from(): the model must be a root that has not been executed")
        st = self._status
        if st is not _EXEC and st is not _MODEL and st is not _HANDLER and st is not _CORO:
            self._misuse("copy_from()")
        if st is not _MODEL and get_ident() != self._flow.driver._thread:  # type: ignore[union-attr]
            _wrong_thread("copy_from()")
        if other._queue:
            q = self._queue
            if q is None:
                q = self._queue = []
            q.extend(other._queue)
        state = self.state
        for key, value in other.state.items():
            if key not in state:
                state[key] = value
        return self

    def clone(self) -> AsyncSteps:
        """A copy of this model root: its steps and a shallow copy of its state. Any thread."""
        if self._status is not _MODEL:
            _internal("clone(): only a root that has not been executed can be cloned")
        copy = AsyncSteps(State(self.state), self._tool)
        if self._queue:
            copy._queue = list(self._queue)
        return copy

    __copy__ = clone

    def new_instance(self) -> AsyncSteps:
        """A new, empty root for standalone execution, sharing this one's AsyncTool. Any
        thread."""
        return AsyncSteps(tool=self._current_tool())

    def __bool__(self) -> bool:
        """``True`` while this step object may be used; ``False`` once out of service. Any
        thread (a snapshot)."""
        st = self._status
        return st is not _DONE and st is not _SUBSTEPS and st is not _FAILING

    @property
    def tool(self) -> AsyncTool | None:
        """The AsyncTool this step runs in (for a model root: the one given, if any). Any
        thread."""
        flow = self._flow
        if flow is not None:
            return flow.driver
        return self._tool

    # -- execution API (§2.2.2) -----------------------------------------------------------------

    def success(self, *args: Any) -> None:
        """Complete this step with ``args`` for the next step.

        Inside the step's own callback or error handler (loop thread); or later, for a step
        waiting for an external event, from any thread: from another one, the completion is
        handed to the loop's thread.
        """
        st = self._status
        if st is _EXEC or st is _HANDLER:
            if get_ident() != self._flow.driver._thread:  # type: ignore[union-attr]
                if st is _EXEC and self._ext is not None and self._ext.waiting:
                    # Handed to another thread before the step returned: done once it waits.
                    self._flow.driver._from_thread(self._external_success, args)  # type: ignore[union-attr]
                    return
                _wrong_thread("success() of a step that does not wait for an external event")
            if self._queue:
                _internal("success() after sub-steps were added in the same step")
            self._flow.args = args  # type: ignore[union-attr]
            self._status = _DONE
        elif st is _WAIT:
            driver = self._flow.driver  # type: ignore[union-attr]
            thread = driver._thread
            if thread is not None and get_ident() != thread:
                driver._from_thread(self._external_success, args)
            else:
                self._external_success(args)
        elif st is _CORO:
            _internal("success() inside an async step: return the result instead")
        else:
            self._misuse("success()")

    __call__ = success

    def _foreign_thread(self) -> bool:
        flow = self._flow
        if flow is None:
            return False
        thread = flow.driver._thread
        return thread is not None and get_ident() != thread

    def _external_success(self, args: tuple[Any, ...]) -> None:
        if self._status is not _WAIT:
            # Only reached from another thread (same-thread calls are checked before): the
            # caller is gone, so say it in the log rather than raise into the event loop.
            logger.warning("success() from another thread ignored: the step already ended")
            return
        flow = self._flow
        assert flow is not None
        self._status = _DONE
        flow.args = args
        flow.stack.pop()
        if self._ext is not _WAIT_ONLY:  # a step that only waited has nothing to end
            _end_ext(self)
        flow.driver._schedule(flow)

    def error(self, code: str, info: Any = None) -> None:
        """Fail this step with error ``code``; ``info`` goes to ``state.error_info``. Raises.

        Threads: as :meth:`success` (from another thread, it raises there too)."""
        if type(code) is not str:
            if not isinstance(code, str):
                raise TypeError(f"error(): the code must be a str, got {type(code).__name__}")
            code = str(code)
        st = self._status
        exc = FutoInError(code, info)
        if (st is _EXEC or st is _CORO) and self._ext is not None and self._ext.waiting \
                and self._foreign_thread():
            self._flow.driver._from_thread(self._external_error, exc)  # type: ignore[union-attr]
            raise exc
        if st is _EXEC or st is _HANDLER or st is _CORO:
            if self._foreign_thread():
                _wrong_thread("error() of a step that does not wait for an external event")
            state = self.state
            state.error_info = info
            state.last_exception = exc
            raise exc
        if st is _WAIT:
            if self._foreign_thread():
                self._flow.driver._from_thread(self._external_error, exc)  # type: ignore[union-attr]
            else:
                self._external_error(exc)
            raise exc
        self._misuse("error()")

    def _external_error(self, exc: FutoInError) -> None:
        if self._status is not _WAIT:
            logger.warning("error(%r) from another thread ignored: the step already ended",
                           exc.code)
            return
        flow = self._flow
        assert flow is not None
        state = self.state
        state.error_info = exc.info
        state.last_exception = exc
        if flow.driver._current is None:
            flow.throw(exc.code)
        else:
            # A step of this driver is running: unwind when it is done, never re-entrantly.
            self._status = _FAILING  # still the top frame, no longer completable from outside
            flow.driver._soon(flow.throw_at, self, exc.code)

    def set_timeout(self, timeout_ms: float) -> None:
        """Limit this step and all its sub-steps to ``timeout_ms``; then error ``Timeout``.

        Disables the implicit success; calling it again replaces the limit. Loop thread.
        """
        st = self._status
        if st is not _EXEC and st is not _CORO:
            self._misuse("set_timeout()")
        if self._foreign_thread():
            _wrong_thread("set_timeout()")
        delay = _check_ms("set_timeout()", timeout_ms)
        ext = _own_ext(self)
        old = ext.timer
        if old is not None:
            old.cancel()
        ext.waiting = True
        flow = self._flow
        assert flow is not None
        driver = flow.driver
        ext.timer, ext.deadline = driver._call_timeout(delay, self)
        scope = driver._inline_scope
        if scope is not None and driver._main is flow:
            # The flow's coroutine steps are awaited inline: their shared scope has the flow's
            # nearest deadline.
            deadline = _flow_deadline(flow)
            if deadline != scope.deadline:
                scope.deadline = deadline

    def set_cancel(self, oncancel: CancelHandler) -> None:
        """Set the handler called once if this step is cancelled or unwound while active.

        Loop thread."""
        st = self._status
        if st is not _EXEC and st is not _CORO:
            self._misuse("set_cancel()")
        if self._foreign_thread():
            _wrong_thread("set_cancel()")
        if not callable(oncancel):
            _internal(f"set_cancel(): the handler must be callable, got {type(oncancel).__name__}")
        ext = _own_ext(self)
        ext.waiting = True
        ext.oncancel = oncancel

    def wait_external(self) -> None:
        """Disable the implicit success: the step waits for an external ``success()``.

        Loop thread (call it before handing the step to another thread)."""
        st = self._status
        if st is not _EXEC and st is not _CORO:
            self._misuse("wait_external()")
        if self._foreign_thread():
            _wrong_thread("wait_external()")
        ext = self._ext
        if ext is None:
            self._ext = _WAIT_ONLY  # nothing else to keep: share one
        elif not ext.waiting:
            ext.waiting = True

    def stack(self, size_or_factory: int | Callable[[], Any],
              cleanup: Callable[[Any], object] | None = None) -> Any:
        """Allocate an object that lives as long as this step (§1.14).

        An ``int`` gives a zeroed ``bytearray`` of that size; a callable gives its result.
        ``cleanup(obj)``, if given, is called exactly once when the step ends. Loop thread.
        """
        st = self._status
        if st is not _EXEC and st is not _CORO and st is not _HANDLER:
            self._misuse("stack()")
        if self._foreign_thread():
            _wrong_thread("stack()")
        if isinstance(size_or_factory, int) and not isinstance(size_or_factory, bool):
            if size_or_factory < 0:
                raise ValueError(f"stack(): size must be >= 0, got {size_or_factory}")
            obj: Any = bytearray(size_or_factory)
        elif callable(size_or_factory):
            obj = size_or_factory()
        else:
            raise TypeError("stack() needs a size or a factory callable, got "
                            f"{type(size_or_factory).__name__}")
        if cleanup is not None and not callable(cleanup):
            raise TypeError(f"stack(): cleanup must be callable, got {type(cleanup).__name__}")
        ext = _own_ext(self)
        if ext.cleanups is None:
            ext.cleanups = []
        ext.cleanups.append((cleanup, obj))
        return obj

    # -- loops (§2.2.4) -----------------------------------------------------------------------

    def loop(self, func: StepFunc, label: str | None = None) -> Self:
        """Call ``func(asi)`` until ``break_loop()``. Threads: as :meth:`add`."""
        return self._add_loop(_LOOP, func, label, None)

    def repeat(self, count: int, func: StepFunc, label: str | None = None) -> Self:
        """Call ``func(asi, i)`` for ``i`` in ``range(count)``. Threads: as :meth:`add`."""
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"repeat(): count must be an int, got {type(count).__name__}")
        if count < 0:
            raise ValueError(f"repeat(): count must be >= 0, got {count}")
        return self._add_loop(_REPEAT, func, label, count)

    def for_each(self, collection: Mapping[Any, Any] | Iterable[Any], func: StepFunc,
                 label: str | None = None) -> Self:
        """Call ``func(asi, key, value)`` for each mapping item, or each index and list item.

        Threads: as :meth:`add`."""
        if isinstance(collection, (str, bytes)) or not isinstance(collection, (Mapping, Iterable)):
            raise TypeError("for_each(): expected a mapping or a list, got "
                            f"{type(collection).__name__}")
        return self._add_loop(_FOR_EACH, func, label, collection)

    def _add_loop(self, kind: int, func: StepFunc, label: str | None, data: Any) -> Self:
        if not callable(func):
            _internal(f"loop: the body must be callable, got {type(func).__name__}")
        if label is not None and not isinstance(label, str):
            raise TypeError(f"loop label must be a str, got {type(label).__name__}")
        return self.add(_Loop(kind, func, label, data))

    def break_loop(self, label: str | None = None) -> None:
        """Leave the innermost loop, or the one named ``label``. Raises. Loop thread."""
        self._loop_signal(Errors.LoopBreak, label)

    def continue_loop(self, label: str | None = None) -> None:
        """Go on with the next iteration of the innermost loop, or of ``label``. Raises.

        Loop thread."""
        self._loop_signal(Errors.LoopCont, label)

    def _loop_signal(self, code: str, label: str | None) -> None:
        st = self._status
        if st is not _EXEC and st is not _HANDLER and st is not _CORO:
            self._misuse("break_loop()" if code == Errors.LoopBreak else "continue_loop()")
        if self._foreign_thread():
            _wrong_thread("break_loop()" if code == Errors.LoopBreak else "continue_loop()")
        flow = self._flow
        assert flow is not None
        # Kept on the root flow: the signal may cross parallel branches on its way out.
        root_flow = flow.root._flow
        assert root_flow is not None
        root_flow.loop_label = label
        self.state.error_info = None
        raise FutoInError(code)

    # -- control API (§2.2.3) -----------------------------------------------------------------

    def execute(self, unhandled_error: Callable[[str], object] | None = None) -> None:
        """Start this root in the current AsyncTool and return at once.

        An unhandled error calls ``unhandled_error(code)`` if given, else it is logged on the
        ``futoin_anyio`` logger; it never breaks the tool. On the AsyncTool's loop thread (else
        ``RuntimeError``).
        """
        if self._status is not _MODEL or self._parent is not None:
            self._check_startable("execute()")
        tool = self._tool or current_tool()
        if tool is None or tool._thread != get_ident() or (tool._closing and tool._tg is None):
            self._no_tool(tool)
        if unhandled_error is not None and not callable(unhandled_error):
            raise TypeError("execute(): unhandled_error must be callable")
        # The flow is made when the root first runs: a root that runs to its end in one burst
        # then leaves no long-lived objects behind for the garbage collector to scan.
        self._status = _ROOT
        self._started = True
        self._tool = tool
        self._unhandled = unhandled_error
        roots = tool._roots  # a hot path: the containers are made here when first needed
        if roots is _EMPTY:
            roots = tool._roots = set()
        roots.add(self)
        ready = tool._ready
        if ready is _EMPTY:
            ready = tool._ready = deque()
        ready.append(self)
        if tool._sleep_scope is not None or tool._inline is not None:
            tool._wake()

    def _go(self, budget: int) -> int:
        """First run of a root started with ``execute()`` (called by its AsyncTool)."""
        if self._status is not _ROOT or self._flow is not None:
            return budget  # cancelled before it could start
        q = self._queue
        if q:
            q.reverse()
        tool = self._tool
        assert tool is not None
        flow = _Flow(tool, self, [self], None)
        self._flow = flow
        flow.on_unhandled = self._unhandled
        flow.executed = True
        tool._current = flow
        return flow.run(budget)

    @staticmethod
    def _no_tool(tool: AsyncTool | None) -> NoReturn:
        if tool is None or tool._thread is None:
            _internal("execute() needs a running AsyncTool: start the root inside "
                      "`async with AsyncTool():`, pass tool=, or use `await asi.promise()`")
        if tool._closing and tool._tg is None:
            _internal("execute(): the AsyncTool has already exited")
        raise RuntimeError("execute() must be called on the AsyncTool's event loop thread")

    async def promise(self) -> Any:
        """Run this root in the calling task and return its result.

        Returns the last ``success()`` arguments: ``None`` for none, the value for one, a tuple
        for several. An unhandled error raises :class:`FutoInError`; ``cancel()`` raises one with
        code ``Cancelled``. If the awaiting task is cancelled, the cancel handlers of every
        active step run, innermost first, and the cancellation propagates unchanged. The root
        then runs on the awaiting task's thread.

        It is always a cancel point: a task already cancelled does not start the root. It is a
        schedule point whenever the root waits; a root that completes at once makes one on
        every 16th such call in a row, so that a loop of instant roots cannot starve the event
        loop without a task switch per call.
        """
        self._check_startable("promise()")
        driver = AsyncTool._private()
        flow = self._start(driver)
        driver._main = flow
        driver._bind()
        # A cancel point before anything of the root runs: a cancelled task does not start it.
        trio = driver._library != "asyncio"
        if trio:
            await sys.modules["trio"].lowlevel.checkpoint_if_cancelled()
        else:
            await _checkpoint_if_cancelled()
        try:
            driver._current = flow
            try:
                flow.run(BURST)  # the common case: the root completes here, or waits
            finally:
                driver._current = None
            if not flow.finished:
                await driver._loop(flow)
                if driver._needs_task_group():
                    await driver._drive(flow)
        except BaseException:
            if driver._raw_tasks:  # their coroutines end first, as a task group's would
                await driver._join_raw_tasks(cancel=True)
            flow.abort()
            driver._cancel_all()
            raise
        if driver._raw_tasks:  # coroutines of roots executed into this driver: they end first
            await driver._join_raw_tasks(cancel=True)
        if driver._idle_after_promise():
            driver._exited = True  # nothing more can be scheduled on it
        else:
            driver._cancel_all()  # roots executed into this private driver end with it
        self._flow = None  # no root <-> flow cycle left behind
        if not driver._slept:
            # The driver never yielded (the root completed at once, or only its own coroutine
            # steps ran): a schedule point every _YIELD_EVERY such calls in a row, so a loop of
            # instant roots cannot starve the event loop, without a task switch per call.
            global _unyielded
            _unyielded += 1
            if _unyielded >= _YIELD_EVERY:
                _unyielded = 0
                if trio:
                    await sys.modules["trio"].lowlevel.cancel_shielded_checkpoint()
                else:
                    await _cancel_shielded_checkpoint()
        return flow.outcome()

    def cancel(self) -> None:
        """Cancel this root: cancel handlers run, innermost first; no error handler runs.

        Called from one of the root's own steps, it takes effect when that step returns. Any
        thread: from another one, the cancellation is handed to the loop's thread and happens
        there soon after (the call returns at once).
        """
        if self._parent is not None:
            _internal("cancel() can only be called on a root AsyncSteps, not on a step")
        flow = self._flow
        tool = flow.driver if flow is not None else self._tool
        if tool is not None and tool._thread is not None and get_ident() != tool._thread:
            if not tool._exited:
                tool._from_thread(self.cancel)
            return
        if flow is None:
            if self._status is _ROOT and self._tool is not None:  # executed, not started yet
                self._tool._roots.discard(self)
            self._status = _DONE  # nothing ran: nothing to cancel, and it will not run
            return
        if flow.finished:
            return
        driver = flow.driver
        current = driver._current
        if current is not None and current.root is self:
            # A step or handler of this root is running: never unwind under its feet.
            current.interrupt = True
            driver._soon(flow.cancel_root)
        else:
            flow.cancel_root()

    # -- binary interface hooks (§2.7) --------------------------------------------------------

    def binary(self) -> Any:
        """The ``FutoInAsyncSteps *`` of this step for C code (see :mod:`futoin_anyio.binary`).

        Loop thread (its functions too, but ``success``/``error`` of a waiting step)."""
        return _binary().binary_of(self)

    @staticmethod
    def wrap(ptr: Any) -> AsyncSteps:
        """An AsyncSteps interface over a ``FutoInAsyncSteps *`` (ours or a foreign one).

        Any thread; the interface follows the threads rules of the object it wraps."""
        return _binary().wrap(ptr)  # type: ignore[no-any-return]

    # -- internals ------------------------------------------------------------------------------

    def _check_startable(self, what: str) -> None:
        if self._parent is not None:
            _internal(f"{what} can only be called on a root AsyncSteps, not on a step")
        if self._status is not _MODEL:
            if not self._started:
                _internal(f"{what}: the root was cancelled before it started")
            _internal(f"{what}: this root was already started")

    def _start(self, driver: AsyncTool) -> _Flow:
        if self._queue:
            self._queue.reverse()
        flow = _Flow(driver, self, [self], None)
        self._flow = flow
        self._status = _ROOT
        self._started = True
        return flow

    def _current_tool(self) -> AsyncTool | None:
        root = self._flow.root if self._flow is not None else self
        if root._tool is not None:
            return root._tool
        tool = current_tool()
        if tool is not None:
            return tool
        return self._flow.driver if self._flow is not None else None

    def _misuse(self, what: str) -> NoReturn:
        st = self._status
        if st is _SUBSTEPS:
            _internal(f"{what}: this step's callback has returned and its sub-steps are running; "
                      "the step object is no longer executing")
        if st is _DONE:
            hint = ""
            if what == "success()" or what == "error()":
                hint = ("; note that a step completes by itself when its callback returns "
                        "without sub-steps, wait_external(), set_cancel() or set_timeout()")
            _internal(f"{what}: the step object is out of service "
                      f"(completed, failed or cancelled){hint}")
        if st is _ROOT:
            _internal(f"{what}: the root is executing; call it on the step's own asi")
        if st is _MODEL:
            _internal(f"{what} can only be called inside an executing step")
        _internal(f"{what} is not allowed while the step is {_STATUS_NAMES[st]}")

    def __repr__(self) -> str:
        kind = "root" if self._parent is None else "step"
        return f"<AsyncSteps {kind} {_STATUS_NAMES[self._status]}>"

    # Spec spellings (FTN12 names, as in the JS reference).
    successStep = success_step
    setTimeout = set_timeout
    setCancel = set_cancel
    waitExternal = wait_external
    copyFrom = copy_from
    newInstance = new_instance
    forEach = for_each
    loopForEach = for_each
    breakLoop = break_loop
    continueLoop = continue_loop


def _wrong_thread(what: str) -> NoReturn:
    raise RuntimeError(
        f"{what} must be called on the event loop's thread; from another thread only success() "
        "and error() of a step waiting for an external event and cancel() of a root are allowed")


def _is_cdata(obj: object) -> bool:
    """A raw cffi pointer (a foreign ``FutoInSync *``), without importing cffi."""
    return type(obj).__module__ == "_cffi_backend"


def _new_frame(parent: AsyncSteps, flow: _Flow, status: int) -> AsyncSteps:
    frame: AsyncSteps = _new(parent.__class__)
    frame._binary = None
    state = parent._state
    frame._state = state if state is not None else parent.state
    frame._flow = flow
    frame._parent = parent
    frame._queue = None
    frame._onerror = None
    frame._ext = None
    frame._func = None
    frame._status = status
    return frame


def _on_timeout(frame: AsyncSteps) -> None:
    ext = frame._ext
    if frame._status is _DONE or ext is None:
        return
    ext.timer = None
    flow = frame._flow
    assert flow is not None
    exc = FutoInError(Errors.Timeout)
    state = frame.state
    state.error_info = None
    state.last_exception = exc
    flow.throw(Errors.Timeout)


class _Flow:
    """One sequential thread of steps: a root, or a branch of a parallel step."""

    __slots__ = (
        "__weakref__",
        "args",
        "driver",
        "executed",
        "finished",
        "interrupt",
        "loop_label",
        "on_unhandled",
        "par",
        "queued",
        "result_code",
        "root",
        "stack",
    )

    def __init__(self, driver: AsyncTool, root: AsyncSteps, stack: list[AsyncSteps],
                 par: _ParallelRun | None) -> None:
        self.driver = driver
        self.root = root
        self.stack = stack
        self.par = par
        self.args: tuple[Any, ...] = _NO_ARGS
        self.queued = False
        self.finished = False
        self.interrupt = False
        self.loop_label: str | None = None
        self.result_code: str | None = None
        self.on_unhandled: Callable[[str], object] | None = None
        self.executed = False  # started by execute() (not promise())

    def _go(self, budget: int) -> int:
        """Run from the driver's ready queue."""
        self.queued = False
        self.driver._current = self
        return self.run(budget)

    def run(self, budget: int) -> int:
        """Run steps until the flow waits or ends, or ``budget`` steps are spent.

        This is the hot path: per step a queue pop (or the loop's next item), one frame object,
        one call and a few checks. A flow often runs only a step or two per call, so the set-up
        binds only what it must (module globals are as fast as locals on CPython 3.11+).
        """
        if self.finished or self.root._status is _CANCELLING:
            return budget
        stack = self.stack
        base = stack[0]
        state = base._state
        if state is None:  # a root nobody asked for its state: make it now
            state = base.state
        cls = base.__class__
        # A completed step object that nothing else references is reused for the next step:
        # nobody can observe it, and it saves an allocation and garbage-collector work per step.
        # Only where reference counts are proven to see every holder (_REUSE_STEPS), and only
        # for AsyncSteps itself: a subclass may allow weak references (which no count sees) or
        # add slots of its own (which the engine does not reset).
        reuse = _REUSE_STEPS and cls is AsyncSteps
        spare: AsyncSteps | None = None
        while budget > 0:
            frame = stack[-1]
            q = frame._queue
            if q:
                item = q.pop()
                if not q:  # a waiting flow keeps no empty lists for the GC to scan
                    frame._queue = None
                if type(item) is tuple:
                    func, onerror = item
                else:
                    func = item  # type: ignore[assignment]
                    onerror = None
            else:
                # The frame's queue is exhausted: the next loop iteration, or the frame completes.
                if frame is base:
                    self._finish(None)
                    return budget
                ext = frame._ext
                if ext is not None:
                    loop = ext.loop
                    if loop is not None:
                        try:
                            args = next(loop.it, None)
                        except Exception as exc:  # a collection changed, a generator raised
                            if not self._step_raised(exc):
                                return budget
                            if self.interrupt:
                                self._interrupted()
                                return budget
                            continue
                        if args is not None:
                            self.args = args
                            func, onerror = loop.item
                        else:
                            self.args = _NO_ARGS  # a loop that ends succeeds with no arguments
                            loop = None
                    if loop is None:
                        _end_ext(frame)
                else:
                    loop = None
                if loop is None:
                    frame._status = _DONE
                    stack.pop()
                    continue
            if spare is None:  # _new_frame(), inlined: this runs for every step
                step: AsyncSteps = _new(cls)
                step._state = state
                step._flow = self
                step._queue = None
                step._ext = None
                step._binary = None
            else:
                step = spare
                spare = None
            step._parent = frame
            step._onerror = onerror
            step._func = func
            step._status = _EXEC
            stack.append(step)
            budget -= 1
            try:
                # Calls with a fixed number of arguments run without building a tuple and,
                # for a Python function, without a nested interpreter loop.
                args = self.args
                if not args:
                    res = func(step)
                elif type(args) is not tuple:  # values from C: fit() to what func declares
                    res = func(step, *args.fit(func))  # type: ignore[attr-defined]
                elif len(args) == 1:
                    res = func(step, args[0])
                else:
                    res = func(step, *args)
            except BaseException as exc:
                if not self.interrupt:
                    if not self._step_raised(exc):
                        return budget
                    if not self.interrupt:
                        continue
                self._interrupted()
                return budget
            if self.interrupt:
                self._interrupted()
                return budget
            st = step._status
            if st is _EXEC:
                if res is not None and iscoroutine(res):
                    self._start_coroutine(step, res)
                    return budget
                q = step._queue
                if q:
                    q.reverse()
                    step._status = _SUBSTEPS
                    ext = step._ext
                    if ext is None or ext.loop is None:  # a loop set its iteration's args
                        self.args = _NO_ARGS  # sub-steps start with no arguments (as in JS)
                    continue
                ext = step._ext
                if ext is not None:
                    if ext.waiting:
                        step._status = _WAIT
                        return budget
                    _end_ext(step)
                self.args = _NO_ARGS
                step._status = _DONE
                stack.pop()
            elif st is _DONE:
                stack.pop()
                ext = step._ext
                if ext is not None:
                    _end_ext(step)
            else:
                continue
            # Two references: ``step`` and getrefcount's argument. Nobody kept the object.
            if reuse and ext is None and getrefcount(step) == 2 and step._queue is None \
                    and step._binary is None:
                spare = step
        self.driver._schedule(self)
        return 0

    # -- errors -------------------------------------------------------------------------------

    def _step_raised(self, exc: BaseException) -> bool | None:
        """The top step's callback raised: unwind. ``True`` if the flow goes on."""
        state = self.root.state
        if isinstance(exc, FutoInError):
            code = exc.code
            if state.last_exception is not exc:
                state.error_info = exc.info
                state.last_exception = exc
        elif isinstance(exc, BaseExceptionGroup) and _judgeable_group(exc):
            code = _judge_group(exc, state)
        elif isinstance(exc, Exception):
            code = Errors.Timeout if _is_timeout(exc) else Errors.InternalError
            state.error_info = f"{type(exc).__name__}: {exc}"
            state.last_exception = exc
        else:
            raise exc  # KeyboardInterrupt, SystemExit, the backend's cancellation: never ours
        return self._unwind(code)

    def throw(self, code: str) -> None:
        """Raise ``code`` at the innermost active step (a timeout, an external error)."""
        if self.finished or self.root._status is _CANCELLING:
            return
        top = self.stack[-1]
        if top._status is _FAILING:
            # An error is already unwinding through here (waiting for cancelled tasks to end):
            # it will pass every enclosing step, the timed one included.
            return
        ext = top._ext
        if top._status is _CORO and ext is not None and ext.scope is not None:
            # Let the coroutine's own cleanup finish first: unwinding goes on when its task ends.
            ext.pending = code
            ext.scope.cancel()
            return
        if self._unwind(code):
            self.driver._schedule(self)

    def throw_at(self, frame: AsyncSteps, code: str) -> None:
        """A deferred external error: applies only if ``frame`` is still the innermost step."""
        if (not self.finished and self.stack[-1] is frame and frame._status is _FAILING
                and self._unwind(code)):
            self.driver._schedule(self)

    def _unwind(self, code: str) -> bool | None:
        """Unwind from the innermost step outwards.

        ``True`` if a handler recovered, ``False`` if the flow failed, ``None`` if the unwinding
        waits at a parallel step for the coroutine tasks of its cancelled branches to end (it
        goes on by itself then, as a task group's exit waits for its children).
        """
        stack = self.stack
        state = self.root.state
        self.args = _NO_ARGS  # steps an error handler adds start with no arguments
        if code != Errors.LoopBreak and code != Errors.LoopCont:
            state.async_stack = [f._func for f in stack[1:]]
        while len(stack) > 1:
            top = stack[-1]
            ext = top._ext
            if ext is not None and ext.par is not None:
                par = ext.par
                ext.par = None
                if par.stop_branches(None, partial(self._resume_unwind, code)):
                    top._status = _FAILING
                    return None
            frame = stack.pop()
            frame._status = _DONE
            frame._queue = None
            if frame._ext is not None:
                code = self._cancel_frame(frame, code) or code
                if self._cancelled():  # the cancel handler cancelled the root
                    return False
            onerror = frame._onerror
            if onerror is None:
                continue
            parent = frame._parent
            assert parent is not None
            handler = _new_frame(parent, self, _HANDLER)
            handler._func = onerror
            stack.append(handler)
            try:
                onerror(handler, code)
                if self._cancelled():  # the handler cancelled the root: nothing else runs
                    return False
            except FutoInError as exc:
                if self._cancelled():
                    return False
                if state.last_exception is not exc:
                    state.error_info = exc.info
                    state.last_exception = exc
                code = exc.code
            except Exception as exc:
                if self._cancelled():
                    return False
                code = Errors.InternalError
                state.error_info = f"{type(exc).__name__}: {exc}"
                state.last_exception = exc
            else:
                if handler._status is _DONE:  # success(): go on after the failed step
                    stack.pop()
                    if handler._ext is not None:
                        _end_ext(handler)  # its stack() clean-ups
                    return True
                if handler._queue:  # add(): its steps run at the failed step's level
                    handler._queue.reverse()
                    handler._status = _SUBSTEPS
                    return True
            handler._status = _DONE
            handler._queue = None
            stack.pop()
            if handler._ext is not None:
                _end_ext(handler)
        self._finish(code)
        return False

    def _cancelled(self) -> bool:
        """The root was cancelled by a handler: at once, or when the running step returns."""
        if self.finished:
            return True
        current = self.driver._current
        return current is not None and current.interrupt and current.root is self.root

    def _resume_unwind(self, code: str) -> None:
        if self.finished or self.root._status is _CANCELLING:
            return
        if self._unwind(code):
            self.driver._schedule(self)

    def _cancel_frame(self, frame: AsyncSteps, code: str | None) -> str | None:
        """A frame leaves the stack abnormally: cancel its branches, its coroutine, its timer;
        call its cancel handler; run its cleanups. An exception in the cancel handler replaces
        ``code`` while unwinding, and is logged while cancelling (``code`` is ``None``)."""
        ext = frame._ext
        assert ext is not None
        par = ext.par
        if par is not None:
            ext.par = None
            par.cancel_branches()
        scope = ext.scope
        if scope is not None:
            ext.scope = None
            scope.cancel()
        coro = ext.coro
        if coro is not None:  # its task may never start (its group is cancelled): close it now
            ext.coro = None
            if scope is None:
                coro.close()
        timer = ext.timer
        if timer is not None:
            ext.timer = None
            timer.cancel()
        oncancel = ext.oncancel
        if oncancel is not None:
            ext.oncancel = None
            try:
                oncancel(frame)
            except Exception as exc:
                if code is None:
                    logger.exception("cancel handler %r raised", oncancel)
                else:
                    state = self.root.state
                    code = Errors.InternalError
                    state.error_info = f"{type(exc).__name__}: {exc}"
                    state.last_exception = exc
        if ext.cleanups or ext.on_exit is not None:
            _run_cleanups(ext)
        return code

    # -- cancellation -------------------------------------------------------------------------

    def _cancel(self) -> None:
        """Run the cancel handlers of every active step, innermost first; the flow ends.

        The branches of a parallel step are cancelled before the step itself, depth first, with
        an explicit list of flows rather than recursion: any depth of nesting is cancelled.
        """
        if self.finished:
            return
        self.finished = True
        todo = [self]
        while todo:
            flow = todo[-1]
            stack = flow.stack
            while len(stack) > 1:
                frame = stack[-1]
                ext = frame._ext
                if ext is not None and ext.par is not None:  # its branches first
                    par = ext.par
                    ext.par = None
                    if not par.over:
                        par.over = True
                        for branch in reversed(par.flows):
                            if not branch.finished:
                                branch.finished = True
                                todo.append(branch)
                        break
                stack.pop()
                frame._status = _DONE
                frame._queue = None
                if ext is not None:
                    self._cancel_frame(frame, None)
            else:
                todo.pop()
                stack[0]._status = _DONE
                stack[0]._queue = None  # steps that never ran go now (await_() closes its own)
                if flow.par is not None:
                    flow._drop_links()

    def _drop_links(self) -> None:
        """A finished branch lets go of its container and parallel run: no reference cycles
        are left for the garbage collector, the branch is freed as soon as it is unreferenced."""
        self.stack.clear()
        self.par = None

    def cancel_root(self, wait: bool = True) -> None:
        """``asi.cancel()`` on the root: cancel every flow of the root, end with ``Cancelled``.

        As when the task awaiting ``promise()`` is cancelled, the root's coroutine steps are
        cancelled first and, with ``wait``, the cancel handlers run once their tasks have ended
        (the root's flows stand still meanwhile).
        """
        if self.finished:
            return
        root = self.root
        if root._status is _CANCELLING:
            if wait:
                return
        elif wait:
            from ._parallel import _running_coroutines

            running: list[AsyncSteps] = []
            _running_coroutines(self, running)
            if running:
                root._status = _CANCELLING
                pending = [len(running)]

                def task_ended() -> None:
                    pending[0] -= 1
                    if not pending[0]:
                        self.cancel_root(wait=False)

                for step in running:
                    ext = step._ext
                    assert ext is not None
                    ext.on_end = task_ended
                    if ext.scope is not None:
                        ext.scope.cancel()
                return
        self._cancel()
        self.result_code = Errors.Cancelled
        self._root_done()

    def abort(self) -> None:
        """The task running the root was cancelled (or hit a BaseException): cancel handlers run."""
        if not self.finished:
            self._cancel()
            self.result_code = Errors.Cancelled

    def _interrupted(self) -> None:
        self.interrupt = False
        root_flow = self.root._flow
        assert root_flow is not None
        root_flow.cancel_root()

    # -- completion -----------------------------------------------------------------------------

    def _finish(self, code: str | None) -> None:
        self.finished = True
        self.stack[0]._status = _DONE
        self.stack[0]._queue = None  # steps that never ran (after an error) go now
        self.result_code = code
        par = self.par
        if par is None:
            label = self.loop_label
            if label is not None and (code == Errors.LoopBreak or code == Errors.LoopCont):
                what = "break_loop" if code == Errors.LoopBreak else "continue_loop"
                self.root.state.error_info = f"{what}({label!r}): no enclosing loop has that label"
            self._root_done()
        elif code is None:
            self._drop_links()
            par.branch_done()
        else:
            self._drop_links()
            par.branch_failed(self, code)

    def _root_done(self) -> None:
        driver = self.driver
        if driver._sleep_scope is not None:
            driver._wake()  # the driver is idle: let it see the root is over
        if self.executed:
            root = self.root
            driver._roots.discard(root)
            root._flow = None  # no root <-> flow cycle: both are freed as soon as unreferenced
            code = self.result_code
            if code is not None and code != Errors.Cancelled:
                handler = self.on_unhandled
                if handler is not None:
                    try:
                        handler(code)
                    except Exception:
                        logger.exception("unhandled_error callback %r raised", handler)
                else:
                    logger.error("AsyncSteps root failed with unhandled error %s (error_info=%r)",
                                 code, self.root.state.get("error_info"))

    def outcome(self) -> Any:
        code = self.result_code
        if code is None:
            args = self.args
            if not args:
                return None
            return args[0] if len(args) == 1 else args
        state = self.root.state
        last = state.get("last_exception")
        if code == Errors.Cancelled:
            raise FutoInError(Errors.Cancelled, "the root was cancelled")
        info = state.get("error_info")
        if isinstance(last, FutoInError) and last.code == code and last.info is info:
            raise last
        err = FutoInError(code, info)
        if isinstance(last, BaseException):
            raise err from last
        raise err

    # -- coroutine steps --------------------------------------------------------------------------

    def _start_coroutine(self, step: AsyncSteps, coro: Coroutine[Any, Any, Any]) -> None:
        step._status = _CORO
        ext = _own_ext(step)
        ext.coro = coro
        self.driver._start_coroutine(_run_coroutine, step, coro)


async def _await_step(step: AsyncSteps, scope: CancelScope) -> tuple[Any, BaseException | None]:
    """Await the coroutine of ``step`` in ``scope``: ``(result, error)``.

    The backend's cancellation, and a group of nothing but cancellations (from a nursery or task
    group inside the step), go out unchanged to the scope that owns them; so do
    ``KeyboardInterrupt`` and the like. Anything else is the step's error.
    """
    ext = step._ext
    assert ext is not None
    ext.scope = scope
    coro = ext.coro
    assert coro is not None
    try:
        return await coro, None
    except Exception as exc:
        return None, exc
    except BaseExceptionGroup as group:
        if not _judgeable_group(group):
            raise
        return None, group
    finally:
        ext.coro = None
        ext.scope = None


async def _run_coroutine(step: AsyncSteps, coro: Coroutine[Any, Any, Any]) -> None:
    """The task of a coroutine step of a concurrent flow: runs it in the step's own scope."""
    flow = step._flow
    ext = step._ext
    assert flow is not None and ext is not None
    driver = flow.driver
    error: BaseException | None = None
    result: Any = None
    driver._task_started()
    try:
        if step._status is not _CORO or flow.root._status is _CANCELLING:
            # Cancelled before its task could start (the root's cancel() may be waiting for it).
            _close_unstarted(step)
            coro.close()
            return
        with scope_class(driver._library)() as scope:
            try:
                result, error = await _await_step(step, scope)
            except BaseException as exc:
                if isinstance(exc, (get_cancelled_exc_class(), BaseExceptionGroup)):
                    raise  # cancellation: our scope absorbs its own, anything else goes out
                driver._report_fatal(exc)
                return
    finally:
        ext.coro = None
        driver._task_ended()
        on_end = ext.on_end
        if on_end is not None:  # a parallel step's unwinding waits for this task
            ext.on_end = None
            driver._soon(on_end)
    _coroutine_done(step, result, error, False)


def _close_unstarted(step: AsyncSteps) -> None:
    """Close the coroutine of ``step``, cancelled before it started: it never runs."""
    ext = step._ext
    if ext is not None and ext.coro is not None:
        coro = ext.coro
        ext.coro = None
        coro.close()


def _coroutine_done(step: AsyncSteps, result: Any, error: BaseException | None,
                    inline: bool) -> bool:
    """A coroutine step's coroutine ended with ``result`` or ``error``: complete the step.

    ``True`` if the flow can go on now (only ``inline``: the caller runs it); otherwise it is
    scheduled, or waits, or is over.
    """
    flow = step._flow
    ext = step._ext
    assert flow is not None and ext is not None
    if flow.root._status is _CANCELLING:
        return False  # the root's cancel() waited for this coroutine: its cancel handlers run next
    pending = ext.pending
    if pending is not None:  # a timeout or external error waited for this coroutine to end
        ext.pending = None
        if error is None:  # else the coroutine's own error wins, as in a task group
            if step._status is _CORO and flow.stack[-1] is step:
                step._status = _WAIT
                return _go_on(flow, flow._unwind(pending), inline)
            return False
    if step._status is not _CORO or flow.finished:
        return False  # cancelled (parallel sibling failed, root cancelled): handlers already ran
    if error is not None:
        step._status = _EXEC
        return _go_on(flow, flow._step_raised(error), inline)
    if step._queue:
        step._queue.reverse()
        flow.args = _NO_ARGS
        if result is not None:
            step._status = _EXEC
            return _go_on(flow, flow._step_raised(FutoInError(
                Errors.InternalError, "an async step returned a result and added sub-steps")),
                inline)
        step._status = _SUBSTEPS
    elif ext.waiting and result is None and ext.timer is None and ext.oncancel is None:
        step._status = _WAIT
        return False
    else:
        flow.args = _NO_ARGS if result is None else (result,)
        step._status = _DONE
        flow.stack.pop()
        _end_ext(step)
    return _go_on(flow, True, inline)


def _go_on(flow: _Flow, can: bool | None, inline: bool) -> bool:
    if not can:
        return False
    if inline:
        return True
    flow.driver._schedule(flow)
    return False


def _inline_cancelled(driver: AsyncTool, step: AsyncSteps) -> None:
    """An inline coroutine step ended because its scope was cancelled: by ``asi.cancel()``
    (which waits for it), an external error or timeout (``pending``), or the shared scope's
    deadline (the flow's nearest timeout, now due)."""
    ext = step._ext
    flow = step._flow
    assert ext is not None and flow is not None
    on_end = ext.on_end
    if on_end is not None:
        ext.on_end = None
        on_end()
    if flow.root._status is _CANCELLING or flow.finished:
        return
    pending = ext.pending
    if pending is None:
        driver._fire_timers()  # the deadline: the timeout's own handler unwinds
        if step._status is not _CORO or flow.stack[-1] is not step or flow.finished:
            return
        pending = Errors.Timeout  # pragma: no cover - the timer and the deadline agree
    ext.pending = None
    if step._status is _CORO and flow.stack[-1] is step:
        step._status = _WAIT
        if flow._unwind(pending):
            driver._schedule(flow)


def _flow_deadline(flow: _Flow) -> float:
    """The nearest deadline of the timeouts active in ``flow``."""
    deadline = math.inf
    for frame in flow.stack:
        ext = frame._ext
        if ext is not None and ext.timer is not None and ext.deadline < deadline:
            deadline = ext.deadline
    return deadline


# -- what comes out of user code -------------------------------------------------------------------


def _is_timeout(exc: BaseException) -> bool:
    """A deadline of the user's own: ``TimeoutError`` (``anyio.fail_after``, ``asyncio.timeout``)
    or ``trio.TooSlowError``."""
    if isinstance(exc, TimeoutError):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(exc, trio.TooSlowError)


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    todo: list[BaseException] = [group]
    while todo:
        exc = todo.pop()
        if isinstance(exc, BaseExceptionGroup):
            todo.extend(reversed(exc.exceptions))
        else:
            out.append(exc)
    return out


def _judgeable_group(group: BaseExceptionGroup[Any]) -> bool:
    """Does the group hold an error of the step's? Not when its leaves are all the backend's
    cancellation (the step was cancelled), nor when one is a ``KeyboardInterrupt`` or the
    like (never ours)."""
    cancelled = get_cancelled_exc_class()
    errors = False
    for leaf in _leaves(group):
        if isinstance(leaf, Exception):
            errors = True
        elif not isinstance(leaf, cancelled):
            return False
    return errors


def _judge_group(group: BaseExceptionGroup[Any], state: State) -> str:
    """The error code of a group from a nursery or task group inside a step, judged by its leaves
    (cancellations aside): the first ``FutoInError`` decides the code and ``error_info``; with no
    FutoInError, a lone timeout is ``Timeout`` and anything else ``InternalError``. A lone
    FutoInError is ``state.last_exception`` itself; otherwise the group is."""
    errors = [e for e in _leaves(group) if isinstance(e, Exception)]
    for exc in errors:
        if isinstance(exc, FutoInError):
            state.error_info = exc.info
            state.last_exception = exc if len(errors) == 1 else group
            return exc.code
    state.error_info = "; ".join(f"{type(e).__name__}: {e}" for e in errors)
    state.last_exception = group
    if len(errors) == 1 and _is_timeout(errors[0]):
        return Errors.Timeout
    return Errors.InternalError


# -- small step callables --------------------------------------------------------------------------


class _SuccessStep:
    __slots__ = ("args",)

    def __init__(self, args: tuple[Any, ...]) -> None:
        self.args = args

    def __call__(self, asi: AsyncSteps, *_: Any) -> None:
        asi.success(*self.args)


class _AwaitStep:
    __slots__ = ("aw",)

    def __init__(self, aw: Awaitable[Any]) -> None:
        self.aw = aw

    def __call__(self, asi: AsyncSteps, *_: Any) -> Coroutine[Any, Any, Any]:
        aw = self.aw
        if iscoroutine(aw):  # run as the step itself: closing the step closes it
            return aw
        return self._wait()

    async def _wait(self) -> Any:
        return await self.aw

    def __del__(self) -> None:
        # The step never ran (an earlier step failed, a sibling branch failed, the root was
        # cancelled) or its task never started: close the user's coroutine, which will never
        # run, so that it does not warn "never awaited".
        aw = self.aw
        if iscoroutine(aw) and getcoroutinestate(aw) == CORO_CREATED:
            aw.close()


# -- helpers for the sync primitives and the binary bridge -----------------------------------------


def root_id(asi: AsyncSteps) -> int:
    """A number identifying the root of ``asi`` (the same for all its steps)."""
    flow = asi._flow
    return id(flow.root if flow is not None else asi)


def flow_key(asi: AsyncSteps) -> object:
    """The identity of the sequential flow ``asi`` belongs to: a root, or one parallel branch."""
    flow = asi._flow
    return flow if flow is not None else asi


def on_exit(asi: AsyncSteps, hook: Callable[[Any], object], arg: Any) -> None:
    """Call ``hook(arg)`` once when the step ``asi`` leaves its flow's stack, however it ends:
    success, error or cancellation (one hook per step; it must not raise)."""
    ext = _own_ext(asi)
    ext.on_exit = hook
    ext.exit_arg = arg


def go_on_with(asi: AsyncSteps, item: _Item, args: tuple[Any, ...]) -> bool:
    """Let a step parked in ``wait_external()`` go on with ``item`` as its one sub-step, called
    with ``args``: the step stays on the stack until that sub-step ends (a primitive's entry
    that waited for its turn). Same thread only. ``False`` (and nothing done) if the step no
    longer waits: an error or a cancellation is about to unwind it."""
    if asi._status is not _WAIT:
        return False
    flow = asi._flow
    assert flow is not None and not asi._queue
    asi._queue = [item]
    asi._status = _SUBSTEPS
    flow.args = args
    flow.driver._schedule(flow)
    return True


# -- the binary interface (futoin_anyio.binary, §2.7) plugs in here --------------------------------

_binary_adapter: Any = None


def register_binary(adapter: Any) -> None:
    """Install the binary interface: ``binary_of(asi)``, ``wrap(ptr)``, ``wrap_sync(ptr)``.

    ``futoin_anyio.binary`` registers itself when imported; the engine knows nothing else of C.
    """
    global _binary_adapter
    _binary_adapter = adapter


def _binary() -> Any:
    if _binary_adapter is None:
        import_module("futoin_anyio.binary")  # registers itself (or says what is missing)
    return _binary_adapter
