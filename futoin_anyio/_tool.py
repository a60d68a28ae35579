"""AsyncTool: the event-loop interface of FTN12 §2.6, and the driver that runs flows.

One :class:`AsyncTool` is one *driver*: a single coroutine that runs many flows (roots and
parallel branches) as plain function calls, keeps their timers in one heap, and yields to the
event loop about every :data:`BURST` steps. ``await asi.promise()`` runs a private driver in the
calling task; ``async with AsyncTool()`` runs a shared one in its own task for ``execute()``.
Coroutine steps are the only thing that get real tasks, in the driver's task group, which is
opened the first time one is needed.
"""

from __future__ import annotations

import logging
import math
import sys
from collections import deque
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from heapq import heappop, heappush
from threading import Lock, get_ident
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast, final

import anyio
from anyio import CancelScope, create_task_group, get_cancelled_exc_class, sleep_forever
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint, current_token

from ._errors import Errors, FutoInError
from ._frame import _internal

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from ._engine import AsyncSteps, _Flow

__all__ = ("AsyncTool", "AsyncToolStatistics", "Handle")

logger = logging.getLogger("futoin_anyio")

#: Steps (and immediate callbacks) a driver runs before it yields to the event loop.
BURST = 100

_CoroRunner = Callable[..., Coroutine[Any, Any, None]]

_new_handle = object.__new__

#: Guards the hand-over of ``immediate()`` calls from other threads (rare: one lock for all).
_foreign = Lock()

_current_tool: ContextVar[AsyncTool | None] = ContextVar("futoin_anyio_tool", default=None)


@final
class Handle:
    """A callback scheduled by :meth:`AsyncTool.immediate` or :meth:`AsyncTool.deferred`."""

    __slots__ = ("_args", "_func", "_tool")

    _tool: AsyncTool | None
    _func: Callable[..., object]
    _args: tuple[Any, ...]

    @classmethod
    def _create(cls, tool: AsyncTool, func: Callable[..., object], args: tuple[Any, ...]) -> Handle:
        handle = cls.__new__(cls)
        handle._func = func
        handle._args = args
        handle._tool = tool
        return handle

    def cancel(self) -> None:
        """Cancel the callback; a no-op if it already ran or was cancelled. Any thread."""
        tool = self._tool
        if tool is not None:
            self._tool = None
            thread = tool._thread
            if thread is None or get_ident() == thread:
                tool._pending -= 1
            elif not tool._exited:  # the count is the loop thread's alone
                tool._from_thread(tool._uncount, raw=True)

    def is_valid(self) -> bool:
        """``True`` while the callback is still scheduled. Any thread (a snapshot)."""
        return self._tool is not None

    def __bool__(self) -> bool:
        return self._tool is not None

    def __repr__(self) -> str:
        state = "scheduled" if self._tool is not None else "done"
        return f"<Handle {getattr(self._func, '__qualname__', self._func)!r} {state}>"


@final
@dataclass(frozen=True)
class AsyncToolStatistics:
    """A snapshot of an :class:`AsyncTool`'s load."""

    #: Roots started with ``execute()`` that have not finished yet.
    roots: int
    #: Flows ready to run now.
    ready: int
    #: Callbacks and timeouts scheduled and not yet run or cancelled.
    scheduled: int
    #: Coroutine steps running as tasks.
    tasks: int


@final
class AsyncTool:
    """The AsyncTool event-loop interface (FTN12 §2.6) bound to the running AnyIO event loop.

    Use ``async with AsyncTool() as tool:`` to start roots with ``asi.execute()``; the block exits
    when every root it started, and every callback scheduled on it, is done. If the block is left
    by an exception or a cancellation, the roots still running are cancelled (their cancel
    handlers run) first.

    Threads: :meth:`immediate`, :meth:`cancel`, :meth:`is_valid`, :meth:`is_same_thread` and
    :meth:`statistics` may be called from any thread; :meth:`deferred` (like ``execute()``) only
    on the event loop's thread, else ``RuntimeError``. Once the block has exited, scheduling
    raises ``FutoInError`` (``InternalError``) as ``execute()`` does.
    """

    __slots__ = (
        "_closing",
        "_coro_tasks",
        "_ctx_token",
        "_current",
        "_exited",
        "_fatal",
        "_inflight",
        "_need_tg",
        "_pending",
        "_pending_coros",
        "_public",
        "_ready",
        "_roots",
        "_seq",
        "_sleep_scope",
        "_tasks_idle",
        "_tg",
        "_thread",
        "_threadsafe",
        "_timers",
    )

    def __init__(self) -> None:
        self._public = True
        self._init()

    @classmethod
    def _private(cls) -> AsyncTool:
        """A driver for one ``promise()`` call, run inline in the awaiting task."""
        self = cls.__new__(cls)
        self._public = False
        self._init()
        return self

    def _init(self) -> None:
        # Flows that can go on and immediate callbacks, in one FIFO (as the reference's single
        # immediate queue orders them).
        self._ready: deque[_Flow | AsyncSteps | Handle] = deque()
        self._timers: list[tuple[float, int, Handle]] = []
        self._seq = 0
        self._pending = 0  # scheduled handles not yet run or cancelled
        self._sleep_scope: CancelScope | None = None
        self._thread: int | None = None
        self._threadsafe: Callable[[Callable[[], object]], object] | None = None
        self._tg: TaskGroup | None = None
        self._need_tg = False
        self._pending_coros: list[tuple[_CoroRunner, tuple[Any, ...]]] = []
        self._coro_tasks = 0
        self._tasks_idle: anyio.Event | None = None
        self._roots: set[AsyncSteps] = set()  # started with execute() and not finished
        self._current: _Flow | None = None
        self._closing = False
        self._exited = False  # the block (or promise()) is over: nothing can be scheduled
        self._inflight = 0  # immediate() calls of other threads not yet adopted (under _foreign)
        self._fatal: BaseException | None = None
        self._ctx_token: Any = None

    # -- the FTN12 §2.6 interface -------------------------------------------------------------

    def immediate(self, func: Callable[[], object]) -> Handle:
        """Schedule ``func()`` to run soon on the loop's thread; callable from any thread."""
        if not callable(func):
            raise TypeError(f"immediate() needs a callable, got {type(func).__name__}")
        if self._exited:
            _internal("immediate(): the AsyncTool has already exited")
        handle = _new_handle(Handle)  # Handle._create(), inlined: immediate() is a hot path
        handle._func = func
        handle._args = ()
        handle._tool = self
        thread = self._thread
        if thread is None or get_ident() == thread:
            self._pending += 1
            self._ready.append(handle)
            if self._sleep_scope is not None:
                self._wake()
        else:
            with _foreign:  # the block does not exit while a call is on its way
                if self._exited:
                    _internal("immediate(): the AsyncTool has already exited")
                self._inflight += 1
            try:
                self._from_thread(self._adopt_immediate, handle, raw=True)
            except BaseException:
                with _foreign:
                    self._inflight -= 1
                raise
        return handle

    def deferred(self, delay_ms: float, func: Callable[[], object]) -> Handle:
        """Schedule ``func()`` after ``delay_ms`` milliseconds of the event loop's clock.

        On the event loop's thread only (else ``RuntimeError``): from another thread, use
        ``immediate()`` to reach it."""
        if not callable(func):
            raise TypeError(f"deferred() needs a callable, got {type(func).__name__}")
        delay = _check_ms("deferred() delay", delay_ms)
        self._require_running("deferred()")
        if get_ident() != self._thread:
            raise RuntimeError("deferred() must be called on the event loop's thread")
        return self._call_later(delay, func)

    def cancel(self, handle: Handle) -> None:
        """Cancel a scheduled callback; a no-op if it already ran. Any thread."""
        handle.cancel()

    def is_valid(self, handle: Handle) -> bool:
        """``True`` while ``handle`` is still scheduled. Any thread (a snapshot)."""
        return handle._tool is not None

    def is_same_thread(self) -> bool:
        """``True`` when called on the thread of the event loop this tool is bound to. Any
        thread."""
        return self._thread is not None and get_ident() == self._thread

    def statistics(self) -> AsyncToolStatistics:
        """Return the tool's current load. Any thread (a snapshot, exact on the loop's)."""
        return AsyncToolStatistics(
            roots=len(self._roots),
            ready=len(self._ready),
            scheduled=self._pending,
            tasks=self._coro_tasks + len(self._pending_coros),
        )

    # -- async context manager ----------------------------------------------------------------

    async def __aenter__(self) -> AsyncTool:
        if not self._public:
            raise RuntimeError("this AsyncTool belongs to a promise() and cannot be entered")
        if self._thread is not None or self._closing:
            raise RuntimeError("an AsyncTool can be entered only once")
        self._bind()
        self._ctx_token = _current_tool.set(self)
        self._need_tg = True
        self._tg = create_task_group()
        await self._tg.__aenter__()
        await self._tg.start(self._serve)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        _current_tool.reset(self._ctx_token)
        self._closing = True
        self._wake()  # on an exception, the task group cancels the driver: see _serve()
        tg = self._tg
        assert tg is not None
        error: BaseException | None = None
        try:
            return await tg.__aexit__(exc_type, exc, tb)
        except BaseException as err:
            self._cancel_all()
            error = _unwrap_group(err, exc)
        finally:
            self._tg = None
            self._exited = True
            fatal = self._fatal
            if fatal is not None:
                self._fatal = None
                error = fatal
            if error is not None:
                raise error  # outside the except clause: no group in its context

    # -- driver ---------------------------------------------------------------------------------

    def _bind(self) -> None:
        self._thread = get_ident()
        native = current_token().native_token
        # trio's token has run_sync_soon(), asyncio's loop call_soon_threadsafe(): both are
        # non-blocking and safe to call from any thread.
        run_soon = getattr(native, "run_sync_soon", None) or cast(Any, native).call_soon_threadsafe
        self._threadsafe = run_soon

    def _require_running(self, what: str) -> None:
        if self._exited:
            _internal(f"{what}: the AsyncTool has already exited")
        if self._thread is None:
            raise FutoInError(Errors.InternalError, f"{what}: the AsyncTool is not running")

    def _from_thread(self, func: Callable[..., object], *args: Any, raw: bool = False) -> None:
        """Run ``func(*args)`` in the driver, called from another thread. It runs as a callback
        of the driver's own task: the user code it leads to (handlers...) runs inside a task,
        where AnyIO works (an asyncio loop callback has no current task). ``raw``: in the loop
        callback itself (the hand-over's own bookkeeping, no user code)."""
        threadsafe = self._threadsafe
        assert threadsafe is not None
        try:
            if raw:
                threadsafe(lambda: func(*args))
            else:
                threadsafe(lambda: self._soon(func, *args))
        except RuntimeError as err:  # the loop is closed or closing
            raise FutoInError(
                Errors.InternalError, f"the event loop is no longer running: {err}"
            ) from err

    def _adopt_immediate(self, handle: Handle) -> None:
        with _foreign:
            self._inflight -= 1
        if self._exited:
            handle._tool = None  # handed over as the tool exited: it will never run
            return
        # Counted even if already cancelled: the cancel() decremented it, or will (in order).
        self._pending += 1
        if handle._tool is self:
            self._ready.append(handle)
        self._wake()

    def _uncount(self) -> None:
        """A handle was cancelled on another thread (see :meth:`Handle.cancel`)."""
        if not self._exited:
            self._pending -= 1
            self._wake()

    def _soon(self, func: Callable[..., object], *args: Any) -> None:
        """Run ``func(*args)`` in the driver soon (engine-internal; loop thread only)."""
        if self._exited:
            return  # e.g. a coroutine task that ends after its driver dropped everything
        handle = Handle._create(self, func, args)
        self._pending += 1
        self._ready.append(handle)
        self._wake()

    def _call_later(self, delay_s: float, func: Callable[..., object], *args: Any) -> Handle:
        handle = Handle._create(self, func, args)
        self._pending += 1
        self._seq += 1
        deadline = anyio.current_time() + delay_s
        timers = self._timers
        if not timers or deadline < timers[0][0]:
            self._wake()
        heappush(timers, (deadline, self._seq, handle))
        return handle

    def _schedule(self, flow: _Flow) -> None:
        """Put a flow that can go on into the run queue."""
        if not flow.queued:
            flow.queued = True
            self._ready.append(flow)
            scope = self._sleep_scope
            if scope is not None:
                self._sleep_scope = None
                scope.cancel()

    def _wake(self) -> None:
        scope = self._sleep_scope
        if scope is not None:
            self._sleep_scope = None
            scope.cancel()

    def _start_coroutine(
        self, runner: Callable[..., Coroutine[Any, Any, None]], *args: Any
    ) -> None:
        tg = self._tg
        if tg is None:
            self._pending_coros.append((runner, args))
            self._need_tg = True
            self._wake()
        else:
            tg.start_soon(runner, *args)

    def _tick(self) -> None:
        """Run ready flows and callbacks, in FIFO order, for one burst of :data:`BURST` steps.

        A callback that a flow schedules (or a flow that a callback wakes) runs in the same
        burst, without a round-trip through the event loop.
        """
        budget = BURST
        ready = self._ready
        while ready and budget > 0:
            item = ready.popleft()
            if type(item) is Handle:
                budget -= 1
                if item._tool is None:
                    continue
                item._tool = None
                self._pending -= 1
                _run_callback(item)
            else:  # a flow, or a root started with execute() that has not run yet
                try:
                    budget = item._go(budget)
                finally:
                    self._current = None
        if self._timers:
            self._fire_timers()

    def _fire_timers(self) -> None:
        timers = self._timers
        now = anyio.current_time()
        while timers and timers[0][0] <= now:
            handle = heappop(timers)[2]
            if handle._tool is None:
                continue
            handle._tool = None
            self._pending -= 1
            _run_callback(handle)

    def _next_deadline(self) -> float:
        timers = self._timers
        while timers and timers[0][2]._tool is None:
            heappop(timers)
        return timers[0][0] if timers else math.inf

    async def _idle(self) -> None:
        """Sleep until woken (a flow or callback became ready) or the nearest timer is due."""
        with CancelScope(deadline=self._next_deadline()) as scope:
            self._sleep_scope = scope
            await sleep_forever()
        self._sleep_scope = None
        if self._timers:
            self._fire_timers()

    async def _loop(self, done: Callable[[], bool]) -> None:
        """Run until ``done()``; return early if a coroutine step needs the task group."""
        while not done():
            if self._fatal is not None or (self._need_tg and self._tg is None):
                return
            if self._ready:
                self._tick()
                await checkpoint()
            else:
                await self._idle()

    async def _drive(self, done: Callable[[], bool]) -> None:
        """Run flows in the calling task until ``done()``; the driver of ``promise()``."""
        self._bind()
        await self._loop(done)
        if self._fatal is None and (self._need_tg or self._pending_coros):
            error: BaseException | None = None
            try:
                async with create_task_group() as tg:
                    self._tg = tg
                    self._start_pending_coros()
                    await self._loop(done)
                    if self._fatal is not None:
                        tg.cancel_scope.cancel()
                    # Coroutines of cancelled steps end here: the group waits for them.
            except BaseExceptionGroup as group:
                error = _unwrap_group(group)
            finally:
                self._tg = None
            if error is not None:
                raise error
        fatal = self._fatal
        if fatal is not None:
            self._fatal = None
            raise fatal

    def _start_pending_coros(self) -> None:
        pending = self._pending_coros
        self._pending_coros = []
        for runner, args in pending:
            self._start_coroutine(runner, *args)

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The long-lived driver of a public AsyncTool."""
        self._tg_ready()
        task_status.started()
        try:
            while True:
                await self._loop(self._served)
                if self._fatal is not None or self._exit_now():
                    break
        except get_cancelled_exc_class():
            # The block is left by an exception or a cancellation. As under promise(): the
            # coroutine steps (innermost) end first, then every root's cancel handlers run.
            with CancelScope(shield=True):
                await self._tasks_ended()
            self._cancel_all()
            raise
        except BaseException as exc:  # KeyboardInterrupt... from a step: out of __aexit__
            self._report_fatal(exc)
        if self._fatal is not None:  # re-raised by __aexit__, after the block is cancelled
            self._cancel_all()
            assert self._tg is not None
            self._tg.cancel_scope.cancel()

    def _task_started(self) -> None:
        self._coro_tasks += 1

    def _task_ended(self) -> None:
        self._coro_tasks -= 1
        idle = self._tasks_idle
        if not self._coro_tasks and idle is not None:
            self._tasks_idle = None
            idle.set()

    async def _tasks_ended(self) -> None:
        while self._coro_tasks:
            idle = self._tasks_idle = anyio.Event()
            await idle.wait()

    def _tg_ready(self) -> None:
        self._need_tg = False
        self._start_pending_coros()

    def _served(self) -> bool:
        return (self._closing and not self._roots and not self._pending and not self._ready
                and not self._inflight)

    def _exit_now(self) -> bool:
        """Served: no ``immediate()`` from another thread may slip in after this."""
        with _foreign:
            if self._inflight:
                return False
            self._exited = True
            return True

    def _cancel_all(self) -> None:
        """Cancel every root this tool runs (their cancel handlers run), drop its callbacks."""
        for root in list(self._roots):
            flow = root._flow
            if flow is None:
                root.cancel()  # not started yet
            else:
                flow.cancel_root(wait=False)  # this driver is going away: nothing to wait with
        for item in self._ready:
            if type(item) is Handle:
                item._tool = None
        self._ready.clear()
        for entry in self._timers:
            entry[2]._tool = None
        self._timers.clear()
        self._pending = 0
        with _foreign:
            self._exited = True  # this driver runs nothing more (its block or promise() ends)

    def _report_fatal(self, exc: BaseException) -> None:
        """A BaseException (KeyboardInterrupt…) escaped a coroutine step: the driver stops and
        re-raises it, bare, once its task group is closed."""
        if self._fatal is None:
            self._fatal = exc
        self._wake()


def _run_callback(handle: Handle) -> None:
    args = handle._args
    try:
        if args:
            handle._func(*args)
        else:
            handle._func()  # no tuple to unpack: the common immediate(func)
    except Exception:
        logger.exception("AsyncTool callback %r raised", handle._func)


def _check_ms(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of milliseconds, got {type(value).__name__}")
    if value < 0 or value != value:
        raise ValueError(f"{what} must be >= 0 milliseconds, got {value!r}")
    return float(value) / 1000.0


def _unwrap_group(err: BaseException, body_exc: BaseException | None = None) -> BaseException:
    """Never let an ExceptionGroup built by our own task group reach the user.

    Our tasks raise nothing but cancellation, so such a group holds at most one real error: the
    one raised in the ``async with`` body (``body_exc``, kept whole even if it is a group of the
    user's own), or a step's KeyboardInterrupt.
    """
    cancelled = get_cancelled_exc_class()
    while isinstance(err, BaseExceptionGroup) and err is not body_exc:
        inner = [e for e in err.exceptions if not isinstance(e, cancelled)]
        if len(inner) > 1:
            break  # not a wrapper of ours: leave it to the user
        err = inner[0] if inner else err.exceptions[0]
    return err


def current_tool() -> AsyncTool | None:
    """The AsyncTool of the innermost ``async with AsyncTool()`` block, if any."""
    return _current_tool.get()
