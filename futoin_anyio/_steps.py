"""AsyncSteps: the FTN12 API (§2.2) of a root and of every step object.

The methods check their caller (status, thread, arguments) and record what the step asked for;
the flow runner (``_flow``) does the rest. Around this module: ``_frame`` (statuses, the rare
frame parts), ``_types`` (callback types, ISync), ``_loops`` (loop steps), ``_parallel``
(parallel steps), ``_hooks`` (the calls of the sync primitives and the binary bridge) and
``_tool``/``_driver`` (the AsyncTool and the driver that runs flows).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from inspect import CORO_CREATED, getcoroutinestate, isawaitable, iscoroutine
from threading import get_ident
from typing import TYPE_CHECKING, Any, NoReturn

from anyio.lowlevel import cancel_shielded_checkpoint as _cancel_shielded_checkpoint
from anyio.lowlevel import checkpoint_if_cancelled as _checkpoint_if_cancelled

from . import _flow as _runner
from . import _instrument as _ins
from ._driver import BURST, _Driver, _execute
from ._errors import Errors, FutoInError
from ._flow import _Flow, _flow_deadline, _start_root
from ._frame import (
    _STATUS_NAMES,
    _WAIT_ONLY,
    COMPILED,
    CORO,
    DONE,
    EXEC,
    FAILING,
    HANDLER,
    MODEL,
    ROOT,
    SUBSTEPS,
    SWITCHES,
    WAIT,
    _end_ext,
    _Ext,
    _Frame,
    _internal,
    _own_ext,
    _wrong_thread,
)
from ._hooks import _binary
from ._loops import _FOR_EACH, _LOOP, _REPEAT, _Loop
from ._parallel import ParallelSteps
from ._state import _PREDEFINED, State
from ._tool import (
    AsyncTool,
    _check_ms,
    _first_runs,
    current_tool,
    private_tool,
)
from ._traced import hooked_flow
from ._types import (
    CancelHandler,
    ErrorHandler,
    ForEachFunc,
    ISync,
    LoopFunc,
    RepeatFunc,
    StepFunc,
    _Item,
)

if TYPE_CHECKING:  # the stand-in's typed decorators
    from . import _nocython as cython
else:
    try:
        import cython
    except ImportError:  # its decorators are no-ops in the pure build
        from . import _nocython as cython

if not cython.compiled:  # the pure build calls the methods that the compiled one calls in C
    PyDict_Update = dict.update
    PyDict_SetDefault = dict.setdefault


def _state_from(variables: Mapping[str, Any]) -> State:
    """``State(variables)`` without State's Python ``__init__`` (a root's initial state): the
    same keys in the same order. Compiled, each dict call is a C call."""
    state: State = State.__new__(State)
    PyDict_Update(state, variables)
    # _PREDEFINED written out: three C calls, where a loop over it costs a refused gateway
    # request 0.6 % more.
    PyDict_SetDefault(state, "error_info", None)
    PyDict_SetDefault(state, "last_exception", None)
    PyDict_SetDefault(state, "async_stack", ())
    return state


def _fresh_state() -> State:
    """A new State with only the pre-defined keys: the state of every root made without one."""
    state: State = State.__new__(State)
    PyDict_Update(state, _PREDEFINED)
    return state


if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ("AsyncSteps",)

logger = logging.getLogger("futoin_anyio")

_asyncio_check: Callable[[], Awaitable[None]] | None = None


def _asyncio_cancel_check() -> Callable[[], Awaitable[None]]:
    """AnyIO's asyncio ``checkpoint_if_cancelled``, looked up once (the public function looks
    the backend up on every call, through sniffio); AnyIO's public function where that fails."""
    global _asyncio_check
    try:
        from anyio._core._eventloop import get_async_backend

        _asyncio_check = get_async_backend("asyncio").checkpoint_if_cancelled
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - another AnyIO
        _asyncio_check = _checkpoint_if_cancelled
    return _asyncio_check


_trio_check: Callable[[], Awaitable[None]] | None = None


def _trio_cancel_check() -> Callable[[], Awaitable[None]]:
    """``trio.lowlevel.checkpoint_if_cancelled``, looked up once (trio is imported by then)."""
    global _trio_check
    _trio_check = sys.modules["trio"].lowlevel.checkpoint_if_cancelled
    return _trio_check


#: ``promise()`` calls whose driver never yielded, in a row; every ``_YIELD_EVERY``-th makes a
#: schedule point (see :meth:`AsyncSteps.promise`).
_YIELD_EVERY = 16
_unyielded = 0


class AsyncSteps(_Frame):
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

    # The slots are _Frame's (``_frame``): the flow runner makes step objects below this module.
    __slots__ = ()

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
    # A step's callback; a root has none, and keeps there the name it was given (or None).
    _func: object
    _status: int
    _tool: AsyncTool | None
    _unhandled: Callable[[str], object] | None  # execute()'s callback, until the root runs
    _started: bool  # roots only: promise() or execute() was called
    _binary: Any

    def __init__(self, state: Mapping[str, Any] | None = None,
                 tool: AsyncTool | None = None, name: str | None = None) -> None:
        # (``name`` is not keyword-only: CPython looks a missing keyword-only argument up in a
        # dict at every call, a measurable part of what an executed root costs.)
        if state is None:
            self._state = None
        elif isinstance(state, State):
            self._state = state
        elif type(state) is dict or isinstance(state, Mapping):  # dict: no ABC check
            self._state = _state_from(state)
        else:
            raise TypeError(f"state must be a mapping, got {type(state).__name__}")
        if tool is not None and type(tool) is not AsyncTool:
            raise TypeError(f"tool must be an AsyncTool, got {type(tool).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        self._tool = tool
        self._flow = None
        self._parent = None
        self._queue = None
        self._onerror = None
        self._ext = None
        self._func = name  # a root's name for people (the flow dump, instruments)
        self._binary = None
        self._started = False
        self._status = MODEL

    @property
    def state(self) -> State:
        """The :class:`State` shared by the root, all its steps and parallel branches.

        A plain ``dict``: while the root runs, use it on the loop's thread (or lock it yourself).
        """
        state = self._state
        if state is None:
            # A root's is made on first use; a step made before that finds it up its parents
            # (iteratively: levels may nest deeply).
            frame = self
            while frame._state is None and frame._parent is not None:
                frame = frame._parent
            state = frame._state
            if state is None:  # the root's first use
                state = frame._state = _fresh_state()
            self._state = state
        return state

    # -- common API (§2.2.1) --------------------------------------------------------------------

    @cython.locals(flow=_Flow, driver=_Driver)  # (see success())
    def add(self, func: StepFunc, onerror: ErrorHandler | None = None) -> Self:
        """Add a step (a sub-step, when called inside a step); returns ``self`` for chaining.

        Loop thread (any thread while building a root that has not started)."""
        st = self._status
        if st is not EXEC and st is not MODEL and st is not HANDLER and st is not CORO:
            self._misuse("add()")
        if st is not MODEL:
            flow = self._flow
            driver = flow.driver  # type: ignore[union-attr]
            if get_ident() != driver._thread:
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

    def parallel(self, onerror: ErrorHandler | None = None, *,
                 results: str | None = None) -> ParallelSteps:
        """Add a parallel step; ``add()`` branches to the returned object.

        Each branch is a separate flow sharing this root's state. The next step runs when every
        branch has completed; the first branch error cancels the other branches and reaches
        ``onerror``. The parallel step succeeds with no arguments; with ``results=key``, it
        succeeds with one: the list of each branch's result (its last ``success()`` arguments
        as ``promise()`` returns them: ``None``, the value, or a tuple), in the order the branches
        were added, also stored as ``state[key]``. Threads: as :meth:`add`.
        """
        if results is not None and not isinstance(results, str):
            raise TypeError(f"parallel(): results must be a str (a state key), got "
                            f"{type(results).__name__}")
        par = ParallelSteps._create(self, results)
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
        if other._status is not MODEL:
            _internal("copy_from(): the model must be a root that has not been executed")
        st = self._status
        if st is not EXEC and st is not MODEL and st is not HANDLER and st is not CORO:
            self._misuse("copy_from()")
        if st is not MODEL and get_ident() != self._flow.driver._thread:  # type: ignore[union-attr]
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
        if self._status is not MODEL:
            _internal("clone(): only a root that has not been executed can be cloned")
        copy = AsyncSteps(State(self.state), self._tool)
        copy._func = self._func  # its name
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
        return st is not DONE and st is not SUBSTEPS and st is not FAILING

    @property
    def tool(self) -> AsyncTool:
        """The AsyncTool this step runs in. Any thread.

        Inside a step it is always there: the root's AsyncTool, or the private one of
        ``promise()``. A root that has not run yet has only the ``tool=`` it was given (or that
        ``execute()`` chose); without one, reading it raises ``FutoInError`` (``InternalError``)
        rather than return ``None``, so typed code never has a ``None`` to assert away.
        """
        flow = self._flow
        if flow is not None:
            return flow.driver
        tool = self._tool
        if tool is None:
            _internal("tool: this root has not run and was given no tool= (a step's asi.tool "
                      "is always set)")
        return tool

    # -- execution API (§2.2.2) -----------------------------------------------------------------

    # Typed locals: the compiled build reads their fields in C (a step's ``_flow`` and a flow's
    # ``driver`` are untyped fields, their modules importing each other).
    @cython.locals(flow=_Flow, driver=_Driver)
    def success(self, *args: Any) -> None:
        """Complete this step with ``args`` for the next step.

        Inside the step's own callback or error handler (loop thread); or later, for a step
        waiting for an external event, from any thread: from another one, the completion is
        handed to the loop's thread.
        """
        st = self._status
        if st is EXEC or st is HANDLER:
            flow = self._flow
            driver = flow.driver  # type: ignore[union-attr]
            if get_ident() != driver._thread:
                if st is EXEC and self._ext is not None and self._ext.waiting:
                    # Handed to another thread before the step returned: done once it waits.
                    driver._from_thread(self._external_success, args)
                    return
                _wrong_thread("success() of a step that does not wait for an external event")
            if self._queue:
                _internal("success() after sub-steps were added in the same step")
            flow.args = args  # type: ignore[union-attr]
            self._status = DONE
        elif st is WAIT:
            driver = self._flow.driver  # type: ignore[union-attr]
            thread = driver._thread
            if thread is not None and get_ident() != thread:
                driver._from_thread(self._external_success, args)
            else:
                self._external_success(args)
        elif st is CORO:
            _internal("success() inside an async step: return the result instead")
        else:
            self._misuse("success()")

    def __call__(self, *args: Any) -> None:
        """``asi(...)`` is :meth:`success` (the JS reference's ``asi()``). A method of its own:
        an alias (``__call__ = success``) does not make the compiled build's type callable."""
        self.success(*args)

    @cython.locals(flow=_Flow, driver=_Driver)  # (see success())
    def _external_success(self, args: tuple[Any, ...]) -> None:
        if self._status is not WAIT:
            # Only reached from another thread (same-thread calls are checked before): the
            # caller is gone, so say it in the log rather than raise into the event loop.
            logger.warning("success() from another thread ignored: the step already ended")
            return
        flow = self._flow
        assert flow is not None
        self._status = DONE
        flow.args = args
        flow.stack.pop()
        if self._ext is not _WAIT_ONLY:  # a step that only waited has nothing to end
            _end_ext(self)
        driver = flow.driver
        driver._schedule(flow)

    def error(self, code: str, info: Any = None) -> NoReturn:
        """Fail this step with error ``code``; ``info`` goes to ``state.error_info``. Raises.

        Threads: as :meth:`success` (from another thread, it raises there too)."""
        if type(code) is not str:
            if not isinstance(code, str):
                raise TypeError(f"error(): the code must be a str, got {type(code).__name__}")
            code = str(code)
        st = self._status
        exc = FutoInError(code, info)
        if (st is EXEC or st is CORO) and self._ext is not None and self._ext.waiting \
                and _foreign_thread(self):
            self._flow.driver._from_thread(self._external_error, exc)  # type: ignore[union-attr]
            raise exc
        if st is EXEC or st is HANDLER or st is CORO:
            if _foreign_thread(self):
                _wrong_thread("error() of a step that does not wait for an external event")
            state = self.state
            state["error_info"] = info
            state["last_exception"] = exc
            raise exc
        if st is WAIT:
            if _foreign_thread(self):
                self._flow.driver._from_thread(self._external_error, exc)  # type: ignore[union-attr]
            else:
                self._external_error(exc)
            raise exc
        self._misuse("error()")

    def _external_error(self, exc: FutoInError) -> None:
        if self._status is not WAIT:
            logger.warning("error(%r) from another thread ignored: the step already ended",
                           exc.code)
            return
        flow = self._flow
        assert flow is not None
        state = self.state
        state["error_info"] = exc.info
        state["last_exception"] = exc
        if flow.driver._current is None:
            flow.throw(exc.code, f"error({exc.code!r}) of the waiting step")
        else:
            # A step of this driver is running: unwind when it is done, never re-entrantly.
            self._status = FAILING  # still the top frame, no longer completable from outside
            flow.driver._soon(flow.throw_at, self, exc.code)

    def set_timeout(self, timeout_ms: float) -> None:
        """Limit this step and all its sub-steps to ``timeout_ms``; then error ``Timeout``.

        Disables the implicit success; calling it again replaces the limit. Loop thread.
        """
        _set_timeout(self, timeout_ms)

    def set_cancel(self, oncancel: CancelHandler) -> None:
        """Set the handler called once if this step is cancelled or unwound while active.

        Loop thread."""
        st = self._status
        if st is not EXEC and st is not CORO:
            self._misuse("set_cancel()")
        if _foreign_thread(self):
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
        if st is not EXEC and st is not CORO:
            self._misuse("wait_external()")
        if _foreign_thread(self):
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
        if st is not EXEC and st is not CORO and st is not HANDLER:
            self._misuse("stack()")
        if _foreign_thread(self):
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

    def loop(self, func: LoopFunc, label: str | None = None) -> Self:
        """Call ``func(asi)`` until ``break_loop()``. Threads: as :meth:`add`."""
        return self._add_loop(_LOOP, func, label, None)

    def repeat(self, count: int, func: RepeatFunc, label: str | None = None) -> Self:
        """Call ``func(asi, i)`` for ``i`` in ``range(count)``. Threads: as :meth:`add`."""
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"repeat(): count must be an int, got {type(count).__name__}")
        if count < 0:
            raise ValueError(f"repeat(): count must be >= 0, got {count}")
        return self._add_loop(_REPEAT, func, label, count)

    def for_each(self, collection: Mapping[Any, Any] | Iterable[Any], func: ForEachFunc,
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

    def break_loop(self, label: str | None = None) -> NoReturn:
        """Leave the innermost loop, or the one named ``label``. Raises. Loop thread."""
        self._loop_signal(Errors.LoopBreak, label)

    def continue_loop(self, label: str | None = None) -> NoReturn:
        """Go on with the next iteration of the innermost loop, or of ``label``. Raises.

        Loop thread."""
        self._loop_signal(Errors.LoopCont, label)

    def _loop_signal(self, code: str, label: str | None) -> NoReturn:
        st = self._status
        if st is not EXEC and st is not HANDLER and st is not CORO:
            self._misuse("break_loop()" if code == Errors.LoopBreak else "continue_loop()")
        if _foreign_thread(self):
            _wrong_thread("break_loop()" if code == Errors.LoopBreak else "continue_loop()")
        flow = self._flow
        assert flow is not None
        # Kept on the flow (root or branch) that raised it; a failing branch hands it to its
        # parent flow as the signal crosses the parallel step on its way out.
        flow.loop_label = label
        self.state["error_info"] = None
        raise FutoInError(code)

    # -- control API (§2.2.3) -----------------------------------------------------------------

    # Start this root in the current AsyncTool (``_driver._execute``, which has its docstring):
    # a function of the driver's module, so that the compiled build reads the tool's fields in
    # C; a method all the same, with no frame in between.
    execute = _execute

    # First run of a root started with ``execute()``: the pure build's driver calls it as a
    # method (no frame in between); the compiled one calls ``_flow._start_root`` in C.
    _go = _start_root

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
        schedule point whenever the root waits for another task, a timer or I/O; a root that
        completes without that (at once, or with only its own callbacks between its steps)
        makes one on every 16th such call in a row, so that a loop of instant roots cannot
        starve the event loop without a task switch per call.
        """
        if self._status is not MODEL or self._parent is not None:
            self._check_startable("promise()")
        driver = private_tool()
        flow = _start_flow(self, driver)
        driver._main = flow
        driver._bind()
        # A cancel point before anything of the root runs: a cancelled task does not start it.
        trio = driver._library != "asyncio"
        if trio:
            await (_trio_check or _trio_cancel_check())()
        else:
            await (_asyncio_check or _asyncio_cancel_check())()
        try:
            driver._current = flow
            if COMPILED:  # for the flow dump: no frame of this promise() is on the stack
                _first_runs.append(driver)
            try:
                flow.run(BURST)  # the common case: the root completes here, or waits
            finally:
                driver._current = None
                if COMPILED:
                    # (No other first run can start meanwhile: a step cannot await.)
                    _first_runs.pop()
            if not flow.finished:
                # It waits. The flow dump finds it in its task's await chain (the compiled
                # build's promise() through the closure its coroutine holds): nothing to list.
                if driver._inline_next is not None and driver._fatal is None:
                    # The usual case (an async def step reached): no _loop() frame in between.
                    await driver._run_inline()
                if not flow.finished:
                    await driver._loop(flow)
                fatal = driver._fatal
                if fatal is not None:  # e.g. a KeyboardInterrupt out of a coroutine step
                    driver._fatal = None
                    raise fatal
                if driver._spare_alarm is not None:  # left by an inline run, unused
                    driver._drop_spare()
        except BaseException as exc:
            if driver._spare_alarm is not None:
                driver._drop_spare()
            if driver._raw_tasks:  # their coroutines end first, as a task group's would
                await driver._join_raw_tasks(cancel=True)
            flow.abort()
            driver._cancel_all()
            driver._main = None
            if SWITCHES.active:
                _ins.cancelled(flow, f"promise() is left by {type(exc).__name__}")
                _ins.ended(self, driver, Errors.Cancelled)
            raise
        if driver._raw_tasks:  # coroutines of roots executed into this driver: they end first
            await driver._join_raw_tasks(cancel=True)
        if driver._idle_after_promise():
            driver._exited = True  # nothing more can be scheduled on it
        else:
            driver._cancel_all()  # roots executed into this private driver end with it
        # No driver <-> flow cycle: a finished root is freed by reference counting alone.
        driver._main = None
        fatal = driver._fatal
        if fatal is not None:  # e.g. a KeyboardInterrupt out of one of those coroutines
            driver._fatal = None
            raise fatal
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
        if SWITCHES.active:
            _ins.ended(self, driver, flow.result_code)
        error = flow.failure()
        if error is not None:
            raise error
        return flow.outcome()

    def cancel(self, reason: str | None = None) -> None:
        """Cancel this root: cancel handlers run, innermost first; no error handler runs.

        Called from one of the root's own steps, it takes effect when that step returns. Any
        thread: from another one, the cancellation is handed to the loop's thread and happens
        there soon after (the call returns at once).

        ``reason`` (default ``"root.cancel()"``) is what the cancel scopes of the root's running
        coroutine steps are cancelled with (trio's ``Cancelled.reason``, AnyIO's), and the end of
        the ``Cancelled`` error's info.
        """
        if self._parent is not None:
            _internal("cancel() can only be called on a root AsyncSteps, not on a step")
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"cancel(): reason must be a str, got {type(reason).__name__}")
        flow = self._flow
        tool = flow.driver if flow is not None else self._tool
        if tool is not None and tool._thread is not None and get_ident() != tool._thread:
            if not tool._exited:
                tool._from_thread(self.cancel, reason)
            return
        if SWITCHES.active and flow is not None and not flow.finished:
            _ins.cancelled(flow, "root.cancel()" if reason is None else reason)
        if flow is None:
            if self._status is ROOT and self._tool is not None:  # executed, not started yet
                self._tool._roots.discard(self)
                if SWITCHES.active:
                    _ins.ended(self, self._tool, Errors.Cancelled)
            self._status = DONE  # nothing ran: nothing to cancel, and it will not run
            return
        if flow.finished:
            return
        driver = flow.driver
        current = driver._current
        if current is not None and current.root is self:
            # A step or handler of this root is running: never unwind under its feet.
            current.interrupt = True
            driver._soon(flow.cancel_root, True, reason)
        else:
            flow.cancel_root(True, reason)

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
        if self._status is not MODEL:
            if not self._started:
                _internal(f"{what}: the root was cancelled before it started")
            _internal(f"{what}: this root was already started")

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
        if st is SUBSTEPS:
            _internal(f"{what}: this step's callback has returned and its sub-steps are running; "
                      "the step object is no longer executing")
        if st is DONE:
            hint = ""
            if what == "success()" or what == "error()":
                hint = ("; note that a step completes by itself when its callback returns "
                        "without sub-steps, wait_external(), set_cancel() or set_timeout()")
            _internal(f"{what}: the step object is out of service "
                      f"(completed, failed or cancelled){hint}")
        if st is ROOT:
            _internal(f"{what}: the root is executing; call it on the step's own asi")
        if st is MODEL:
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



# The flow runner reuses completed step objects of this class only (see _flow._REUSABLE).
_runner._REUSABLE = AsyncSteps


def _is_cdata(obj: object) -> bool:
    """A raw cffi pointer (a foreign ``FutoInSync *``), without importing cffi."""
    return type(obj).__module__ == "_cffi_backend"


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


def _foreign_thread(step: AsyncSteps) -> bool:
    """Is the caller on another thread than the loop's of the flow of ``step``?"""
    flow = step._flow
    if flow is None:
        return False
    driver = flow.driver
    thread = driver._thread
    return thread is not None and get_ident() != thread


def _start_flow(root: AsyncSteps, driver: AsyncTool) -> _Flow:
    """The flow of a ``promise()`` root about to run in ``driver``."""
    if not SWITCHES.hooked:
        flow = _Flow(driver, root, root, None)
    else:  # what instruments and the flow dump need is kept only while asked for
        flow = hooked_flow(driver, root, False)
        if SWITCHES.active:  # in the caller's context, before anything of the root runs
            _ins.started(root, driver, True)
    if root._queue:
        root._queue.reverse()
    root._flow = flow
    root._status = ROOT
    root._started = True
    return flow


def _set_timeout(step: AsyncSteps, timeout_ms: float) -> None:
    """:meth:`AsyncSteps.set_timeout` (a function: the compiled build types its locals)."""
    st = step._status
    if st is not EXEC and st is not CORO:
        step._misuse("set_timeout()")
    if _foreign_thread(step):
        _wrong_thread("set_timeout()")
    delay = _check_ms("set_timeout()", timeout_ms)
    ext = _own_ext(step)
    old = ext.timer
    if old is not None:
        old.cancel()
    ext.waiting = True
    flow = step._flow
    assert flow is not None
    driver = flow.driver
    ext.timer, ext.deadline = driver._call_timeout(delay, step, timeout_ms)
    if driver._inline_scope is not None and driver._inline_flow is flow:
        # The flow's coroutine steps are awaited inline: its alarm is the flow's nearest
        # deadline (and its outer flows', if it is a branch).
        driver._arm_inline(_flow_deadline(flow))
