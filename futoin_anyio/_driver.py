"""The driver under :class:`~futoin_anyio.AsyncTool`: run queue, timers, tasks, thread hand-off.

One driver is a single coroutine that runs many flows (roots and parallel branches) as plain
function calls, keeps their timers in one heap, and yields to the event loop about every
:data:`BURST` steps. ``await asi.promise()`` runs a private one in the calling task (``_loop``);
``async with AsyncTool()`` runs a shared one in its own task (``_serve``).

Coroutine steps of a ``promise()`` root's own flow are awaited by the driver itself, in the
calling task (*inline*, ``_run_inline``), inside one cancel scope shared by consecutive coroutine
steps: its deadline is the nearest ``set_timeout()`` of the flow. So is the first coroutine step
of the root's parallel branches to start while nothing is awaited inline (in a copy of the
caller's context, as a task would run it). Whatever else needs the driver meanwhile (a callback,
a timer, another flow) is served by a coroutine task that ends, or by a helper task started only
then. The other coroutine steps of concurrent flows (parallel branches, roots of a public
AsyncTool) run as tasks of their own: under ``promise()`` tasks of no group, which it joins
(``_spawn``); under an AsyncTool in the tool's task group.

:class:`_Driver` holds the state (all the slots) and this machinery; ``AsyncTool`` (``_tool``)
adds the public methods on top.
"""

from __future__ import annotations

import logging
import math
import sys
from asyncio import Future as _asyncio_future_type
from asyncio import _get_running_loop as _running_asyncio_loop
from asyncio import current_task as _asyncio_current_task
from asyncio import sleep as _asyncio_sleep
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextvars import Context, ContextVar, copy_context
from heapq import heapify, heappop, heappush
from threading import Lock, get_ident
from typing import TYPE_CHECKING, Any

import anyio
from anyio import CancelScope, get_cancelled_exc_class
from anyio.abc import TaskGroup

from . import _instrument as _ins
from ._alarm import Alarm
from ._alarm import arm as arm_alarm
from ._errors import Errors, FutoInError
from ._final import refuse_subclasses
from ._flow import (
    _close_unstarted,
    _coroutine_done,
    _Flow,
    _flow_deadline,
    _has_running,
    _inline_cancelled,
    _judgeable_group,
    _on_timeout,
    _outer_flow,
    _start_root,
    scope_class,
)
from ._frame import CANCELLING, COMPILED, CORO, MODEL, ROOT, SWITCHES, _Ext, _Frame
from ._reasons import cancel_scope

_sniffio: Any
try:
    import sniffio as _sniffio
except ImportError:  # pragma: no cover - trio depends on it; AnyIO alone does not
    _sniffio = None

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from . import _nocython as cython  # the stand-in's typed decorators
    from ._steps import AsyncSteps
    from ._tool import AsyncTool
else:
    try:
        import cython
    except ImportError:  # its decorators are no-ops in the pure build
        from . import _nocython as cython

__all__ = ("BURST", "Handle")

logger = logging.getLogger("futoin_anyio")

#: Steps (and immediate callbacks) a driver runs before it yields to the event loop.
BURST = 100

_CoroRunner = Callable[..., Coroutine[Any, Any, None]]
#: Why the tasks of no group of a ``promise()`` are cancelled when it is left by an exception.
_LEFT = "promise() is left by an exception"

#: The value of a driver's container that was never needed: empty, falsy, iterable, and never
#: written to (the writers make the real container first).
_EMPTY: Any = ()

#: AnyIO's backend module has been imported (see :meth:`_Driver._bind`).
_backend_loaded = False

#: Guards the hand-over of ``immediate()`` calls from other threads (rare: one lock for all).
_foreign = Lock()

#: The timer heap may hold this many entries of cancelled timers beyond twice the scheduled
#: count before it is rebuilt without them (see :meth:`_Driver._push_timer`).
_PRUNE_SLACK = 64

#: An asyncio task tells its context (``Task.get_context()``, Python 3.12): a parallel branch's
#: coroutine step may then be awaited inline (see :meth:`_Driver._start_coroutine`); trio's
#: tasks always do.
_TASK_CONTEXT = sys.version_info >= (3, 12)


#: The AsyncTool of the innermost ``async with AsyncTool()`` block (set by ``_tool``).
_current_tool: ContextVar[AsyncTool | None] = ContextVar("futoin_anyio_tool", default=None)


def _execute(root: AsyncSteps, unhandled_error: Callable[[str], object] | None = None) -> None:
    """Start this root in the current AsyncTool and return at once.

    An unhandled error calls ``unhandled_error(code)`` if given, else it is logged on the
    ``futoin_anyio`` logger; it never breaks the tool. On the AsyncTool's loop thread (else
    ``RuntimeError``).
    """
    if root._status is not MODEL or root._parent is not None:
        root._check_startable("execute()")
    tool = root._tool or _current_tool.get()
    if tool is None:
        root._no_tool(None)
        return  # (never: _no_tool() raises; a typed tool is not read as None)
    if tool._thread != get_ident() or (tool._closing and tool._tg is None):
        root._no_tool(tool)
    if unhandled_error is not None and not callable(unhandled_error):
        raise TypeError("execute(): unhandled_error must be callable")
    # The flow is made when the root first runs: a root that runs to its end in one burst
    # then leaves no long-lived objects behind for the garbage collector to scan.
    root._status = ROOT
    root._started = True
    root._tool = tool
    root._unhandled = unhandled_error
    # A hot path: the containers are made here when first needed. ``roots`` is a set, read
    # once it is one (the compiled build adds to it in C).
    if tool._roots is _EMPTY:
        tool._roots = set()
    roots = tool._roots
    roots.add(root)
    ready = tool._ready
    if ready is _EMPTY:
        ready = tool._ready = deque()
    ready.append(root)
    if SWITCHES.active:
        _ins.started(root, tool, False)
    if tool._sleep_scope is not None or tool._inline is not None:
        tool._wake()


def _gone() -> None:
    """The callback of a handle that ran or was cancelled: what it held is let go at once."""


@cython.freelist(128)
@cython.cclass
class Handle:
    """A callback scheduled by :meth:`AsyncTool.immediate` or :meth:`AsyncTool.deferred`."""

    __slots__ = ("_args", "_func", "_tool")

    _tool: _Driver | None
    _func: Callable[..., object]
    _args: tuple[Any, ...]

    def cancel(self) -> None:
        """Cancel the callback; a no-op if it already ran or was cancelled. Any thread.

        The callback and its arguments are let go at once (on the loop's thread; from another
        thread, as soon as the loop's thread takes the cancel in)."""
        tool = self._tool
        if tool is not None:
            self._tool = None
            thread = tool._thread
            if thread is None or get_ident() == thread:
                tool._pending -= 1
                self._func = _gone
                self._args = ()
                if len(tool._timers) > 2 * tool._pending + _PRUNE_SLACK:
                    tool._prune_timers()
            elif not tool._exited:  # the count and what the handle holds: the loop thread's
                tool._from_thread(tool._uncount, self, raw=True)

    def is_valid(self) -> bool:
        """``True`` while the callback is still scheduled. Any thread (a snapshot)."""
        return self._tool is not None

    def __bool__(self) -> bool:
        return self._tool is not None

    def __repr__(self) -> str:
        func = self._func
        if func is _gone:
            return "<Handle done>"
        state = "scheduled" if self._tool is not None else "done"
        return f"<Handle {getattr(func, '__qualname__', func)!r} {state}>"


def _new_handle(tool: _Driver, func: Callable[..., object], args: tuple[Any, ...]) -> Handle:
    """The handle of a callback ``func(*args)`` scheduled on ``tool`` (a Handle has no
    ``__init__``: no user makes one)."""
    handle = Handle.__new__(Handle)
    handle._func = func
    handle._args = args
    handle._tool = tool
    return handle


# Final in both builds: declared so in ``_driver.pxd``, refused here in the pure one (``_final``).
refuse_subclasses(Handle)


@cython.freelist(128)
@cython.cclass
class _Driver:
    """The driver's state and machinery; :class:`~futoin_anyio.AsyncTool` is the one subclass."""

    _instruments: list[Any] | None
    _inline_alarm: Alarm | None

    __slots__ = (
        # A weak reference lists a block's tool (and a waiting promise()'s driver, compiled
        # build) in _tool._live.
        "__weakref__",
        "_caller_ctx",
        "_clock",
        "_closing",
        "_coro_tasks",
        "_ctx_token",
        "_current",
        "_exited",
        "_fatal",
        "_helper",
        "_helper_ended",
        "_inflight",
        "_inline",
        # The alarm of the flow's nearest set_timeout() while it is awaited inline (_alarm):
        # set by each inline run, read only during one.
        "_inline_alarm",
        # The context the next inline step runs in: a copy of the caller's for a branch's step
        # (as its task would have), None for the root's own flow (the caller's context itself).
        "_inline_ctx",
        # The flow whose coroutine steps the inline run awaits (its alarm is that flow's).
        "_inline_flow",
        "_inline_next",
        "_inline_scope",
        # An AsyncTool's own instruments (_instrument.add_instrument(..., tool=)): never
        # initialised, read with getattr only when an instrument is registered somewhere.
        "_instruments",
        "_joins",
        "_library",
        "_main",
        "_need_tg",
        # The context of the task that awaits promise(), once read (_task_context).
        "_own_ctx",
        "_pending",
        "_pending_coros",
        "_public",
        "_raw_idle",
        "_raw_tasks",
        "_ready",
        "_roots",
        "_seq",
        "_sleep_scope",
        "_slept",
        # The alarm an inline run left armed for its flow's timeout, for the wait that follows
        # (_take_spare): the same deadline is not armed twice in a row.
        "_spare_alarm",
        "_tasks_idle",
        "_tg",
        "_thread",
        "_threadsafe",
        "_timers",
    )

    def _init(self) -> None:
        # Flows that can go on and immediate callbacks, in one FIFO (as the reference's single
        # immediate queue orders them).
        # These four containers are made when first needed (see _EMPTY): most promise() drivers
        # never need them, and a blocked root should hold little more than a blocked task.
        self._ready: deque[_Flow | AsyncSteps | Handle] = _EMPTY
        self._timers: list[tuple[float, int, Handle]] = _EMPTY
        self._seq = 0
        self._pending = 0  # scheduled handles not yet run or cancelled
        # What the driver sleeps on, while it sleeps: the task it parked (trio), the future it
        # awaits (asyncio), or a cancel scope with the nearest timer as its deadline.
        self._sleep_scope: Any = None
        self._own_ctx: Context | None = None
        self._thread: int | None = None
        # The running asyncio loop, or trio's token: both offer a non-blocking hand-off to the
        # loop's thread from any thread. Kept as is (no bound method per driver).
        self._threadsafe: Any = None
        self._tg: TaskGroup | None = None
        self._need_tg = False
        self._pending_coros: list[tuple[AsyncSteps, Any]] = _EMPTY
        self._coro_tasks = 0
        self._tasks_idle: anyio.Event | None = None
        self._roots: set[AsyncSteps] = _EMPTY  # started with execute() and not finished
        self._current: _Flow | None = None
        self._closing = False
        self._exited = False  # the block (or promise()) is over: nothing can be scheduled
        self._inflight = 0  # immediate() calls of other threads not yet adopted (under _foreign)
        self._fatal: BaseException | None = None
        self._ctx_token: Any = None
        # Inline coroutine steps (promise() only): the flow they belong to, the step whose
        # coroutine is being awaited, the next one to await, the scope they share, and whether a
        # helper task serves the driver's other work meanwhile.
        self._main: _Flow | None = None
        self._inline: AsyncSteps | None = None
        self._inline_next: AsyncSteps | None = None
        self._inline_ctx: Context | None = None
        self._inline_flow: _Flow | None = None
        self._inline_scope: CancelScope | None = None
        self._helper = False
        self._helper_ended: anyio.Event | None = None
        # Tasks started outside any task group (a promise()'s coroutine tasks and helper, see
        # _spawn): their cancel scopes, each with its task (asyncio keeps only weak references
        # to tasks).
        self._raw_tasks: set[_RawTask] = _EMPTY
        self._raw_idle: anyio.Event | None = None
        self._slept = False  # the driver yielded to the event loop (promise(): see there)
        # While other tasks serve the driver's work (it awaits a branch inline, see
        # _run_inline): its task's own context, in which they run it.
        self._caller_ctx: Any = None
        self._spare_alarm: Alarm | None = None
        # What waits for coroutines to end (an unwinding paused at a parallel step, a halted
        # branch, a root's cancel()): (flows, then), in the order they began to wait.
        self._joins: list[tuple[list[_Flow], Callable[[], object]]] = _EMPTY
        self._library = "asyncio"  # the AnyIO backend's name, known once bound
        # The event loop's clock (anyio.current_time() without AnyIO's backend lookup), once
        # bound: asyncio's loop.time, trio.current_time.
        self._clock: Callable[[], float] = anyio.current_time

    # -- driver ---------------------------------------------------------------------------------

    def _bind(self) -> None:
        """Bind to the running event loop and its thread (called on that thread)."""
        self._thread = get_ident()
        # asyncio's loop.call_soon_threadsafe(), trio's token.run_sync_soon(): non-blocking and
        # safe from any thread. Found directly, as AnyIO's current_token() costs ~10 us, and a
        # promise() driver binds every time.
        global _backend_loaded
        if not _backend_loaded:
            # AnyIO imports its backend module on first use (tens of milliseconds): do it now,
            # before any deadline is read from the clock, not inside the first set_timeout().
            anyio.current_time()
            _backend_loaded = True
        loop = _running_asyncio_loop()
        if loop is not None:
            self._threadsafe = loop
            self._library = "asyncio"
            self._clock = loop.time
        else:
            global _trio_lowlevel, _trio_run
            run = _trio_run
            if run is None:  # the first driver bound to trio
                _trio_lowlevel = sys.modules["trio"].lowlevel
            lowlevel = _trio_lowlevel
            token = self._threadsafe = lowlevel.current_trio_token()
            self._library = "trio"
            if run is None or run[0] is not token:
                # The run's clock itself (trio.current_time() goes through three more calls),
                # found once per run: a token is its run's for good.
                run = _trio_run = (token, lowlevel.current_clock().current_time)
            self._clock = run[1]

    def _from_thread(self, func: Callable[..., object], *args: Any, raw: bool = False) -> None:
        """Run ``func(*args)`` in the driver, called from another thread. It runs as a callback
        of the driver's own task: the user code it leads to (handlers...) runs inside a task,
        where AnyIO works (an asyncio loop callback has no current task). ``raw``: in the loop
        callback itself (the hand-over's own bookkeeping, no user code)."""
        target = self._threadsafe
        assert target is not None
        call = (lambda: func(*args)) if raw else (lambda: self._soon(func, *args))
        try:
            if self._library == "asyncio":
                target.call_soon_threadsafe(call)
            else:
                target.run_sync_soon(call)
        except RuntimeError as err:  # the loop is closed or closing
            raise FutoInError(
                Errors.InternalError, f"the event loop is no longer running: {err}"
            ) from err

    def _adopt_immediate(self, handle: Handle) -> None:
        with _foreign:
            self._inflight -= 1
        if self._exited:
            handle._tool = None  # handed over as the tool exited: it will never run
            handle._func = _gone
            handle._args = ()
            return
        # Counted even if already cancelled: the cancel() decremented it (on this thread), or
        # its _uncount() will (handed over after this call, so run after it).
        self._pending += 1
        if handle._tool is self:
            self._ready_queue().append(handle)
        self._wake()

    def _uncount(self, handle: Handle) -> None:
        """``handle`` was cancelled on another thread (see :meth:`Handle.cancel`).

        The loop thread lets a handle's callback go whenever it runs or cancels it, and counts
        it then: a callback still held means that nothing here counted this handle's end yet
        (the cancel won the race with the run), so the count stays exact."""
        if handle._func is _gone:
            return
        handle._func = _gone
        handle._args = ()
        if not self._exited:
            self._pending -= 1
            if len(self._timers) > 2 * self._pending + _PRUNE_SLACK:
                self._prune_timers()
            self._wake()

    def _soon(self, func: Callable[..., object], *args: Any) -> None:
        """Run ``func(*args)`` in the driver soon (engine-internal; loop thread only)."""
        if self._exited:
            return  # e.g. a coroutine task that ends after its driver dropped everything
        handle = _new_handle(self, func, args)
        self._pending += 1
        self._ready_queue().append(handle)
        self._wake()

    def _call_later(self, delay_s: float, func: Callable[..., object], *args: Any) -> Handle:
        handle = _new_handle(self, func, args)
        self._push_timer(self._clock() + delay_s, handle, True)
        return handle

    def _call_timeout(self, delay_s: float, frame: AsyncSteps,
                      timeout_ms: float) -> tuple[Handle, float]:
        """The timer of ``set_timeout()`` on ``frame``: its handle and its deadline.

        While the driver awaits a coroutine of ``frame``'s flow inline, the shared scope's
        deadline covers it (the caller updates it): no helper task is started for it.
        """
        handle = _new_handle(self, _on_timeout, (frame, timeout_ms))
        deadline = self._clock() + delay_s
        inline = self._inline
        self._push_timer(deadline, handle, inline is None or inline._flow is not frame._flow)
        return handle, deadline

    def _push_timer(self, deadline: float, handle: Handle, wake: bool) -> None:
        self._pending += 1
        self._seq += 1
        timers = self._timers
        if timers is _EMPTY:
            timers = self._timers = []
        elif len(timers) > 2 * self._pending + _PRUNE_SLACK:
            self._prune_timers()
        if wake and (not timers or deadline < timers[0][0] or self._inline is not None):
            self._wake()
        heappush(timers, (deadline, self._seq, handle))

    def _ready_queue(self) -> deque[_Flow | AsyncSteps | Handle]:
        ready = self._ready
        if ready is _EMPTY:
            ready = self._ready = deque()
        return ready

    def _schedule(self, flow: _Flow) -> None:
        """Put a flow that can go on into the run queue."""
        if not flow.queued:
            flow.queued = True
            ready = self._ready
            if ready is _EMPTY:
                ready = self._ready = deque()
            ready.append(flow)
            if self._sleep_scope is not None or self._inline is not None:
                self._wake()

    def _wake(self) -> None:
        """Let the driver see new work: wake it if it sleeps; if it awaits a coroutine step
        inline, start the helper task that serves everything else meanwhile."""
        sleeper = self._sleep_scope
        if sleeper is not None:
            self._sleep_scope = None
            kind = type(sleeper)
            if kind is _Future:
                if not sleeper.done():
                    sleeper.set_result(None)
            elif kind is _trio_lowlevel.Task:
                _trio_lowlevel.reschedule(sleeper)
            else:
                sleeper.cancel()
        elif self._inline is not None and not self._helper:
            self._start_helper()

    def _start_coroutine(self, step: AsyncSteps, coro: Any) -> None:
        """Run the coroutine of ``step``: inline when it belongs to this ``promise()``'s root
        and nothing is awaited inline yet, else as a task named after the step function.

        A step of the root's own flow runs in the caller's context; a step of one of its
        parallel branches in a copy of it, taken now, as its task would (then the caller's
        task is one of the branches' tasks: the first to start spares a task). Not on asyncio
        before Python 3.12 (its tasks do not tell their context, in which the branches' other
        steps must run meanwhile: see :meth:`_serve_inline`).

        Under ``promise()`` the others run as tasks of no group (:meth:`_spawn`), which
        ``promise()`` joins: its caller's task cannot open a task group while it awaits a step
        inline, nor is one needed (a nursery costs a cancel scope of its own, and on asyncio
        AnyIO's task group more). Under an AsyncTool they run in the tool's task group.
        """
        main = self._main
        if main is not None:
            if self._inline is None and self._inline_next is None:
                flow = step._flow
                if flow is main:
                    self._inline_next = step
                    return
                if flow is not None and flow.root is main.root \
                        and (_TASK_CONTEXT or self._library != "asyncio"):
                    self._inline_next = step
                    self._inline_ctx = copy_context()
                    return
            # trio names a task after the object it is given, as module.qualname.
            self._spawn(_run_coroutine, (step, coro),
                        step._func if self._library == "trio" else _task_name(step))
            return
        tg = self._tg
        if tg is not None:
            tg.start_soon(_run_coroutine, step, coro, name=_task_name(step))
        else:
            if self._pending_coros is _EMPTY:
                self._pending_coros = []
            self._pending_coros.append((step, coro))
            self._need_tg = True
            self._wake()

    def _tick(self) -> None:
        """Run ready flows and callbacks, in FIFO order, for one burst of :data:`BURST` steps.

        A callback that a flow schedules (or a flow that a callback wakes) runs in the same
        burst, without a round-trip through the event loop.
        """
        budget = BURST
        ready = self._ready
        typed = COMPILED  # (a local: the pure build's check per item is the cheapest one)
        while ready and budget > 0:
            item = ready.popleft()
            # (Handle is final in both builds, but no typing.final: an extension type cannot
            # take it, so mypy does not narrow ``item`` in the other branch; hence the ignores.)
            if type(item) is Handle:
                budget -= 1
                if item._tool is None:
                    continue
                item._tool = None
                self._pending -= 1
                _run_callback(item)
            else:
                try:
                    if not typed:  # a flow, or a root's first run (_flow._start_root)
                        budget = item._go(budget)  # type: ignore[union-attr]
                    # The compiled build calls them in C, by type: no method look-up.
                    elif type(item) is _Flow:
                        flow = item
                        budget = flow._go(budget)
                    elif isinstance(item, _Frame):  # a root started with execute(), first run
                        budget = _start_root(item, budget)
                    else:  # a flow of a subclass: instruments or the flow dump are on
                        budget = item._go(budget)  # type: ignore[union-attr]
                finally:
                    self._current = None
        if self._timers:
            self._fire_timers()

    def _live_timers(self) -> list[tuple[float, int, Handle]]:
        """The timer heap, the entries of ended timers dropped from its top: when nothing else
        is left (the usual case once a timed step has ended), no clock needs to be read."""
        timers = self._timers
        while timers and timers[0][2]._tool is None:
            heappop(timers)
        return timers

    def _fire_timers(self) -> None:
        timers = self._live_timers()
        if not timers:
            return
        now = self._clock()
        while timers and timers[0][0] <= now:
            handle = heappop(timers)[2]
            if handle._tool is None:
                continue
            handle._tool = None
            self._pending -= 1
            _run_callback(handle)

    def _next_deadline(self) -> float:
        if len(self._timers) > 2 * self._pending + _PRUNE_SLACK:
            self._prune_timers()
        timers = self._live_timers()
        return timers[0][0] if timers else math.inf

    def _prune_timers(self) -> None:
        """Rebuild the timer heap without the entries of cancelled timers.

        A cancelled timer's entry stays in the heap (finding it would cost O(n)), holding only
        its emptied handle, until its deadline comes up or until this runs: when a cancel, a
        push or the driver going idle finds the heap longer than twice the scheduled count plus
        :data:`_PRUNE_SLACK`. Live timers are at most the scheduled count, so then cancelled
        entries outnumber live ones, and each entry a rebuild drops was pushed once: amortised
        O(1) per timer, and the heap never holds many more entries than live handles. The
        scheduled count is exact on the loop's thread (cancels from other threads reach it
        through :meth:`_uncount`), so no second count has to be kept right across threads. In
        place: a caller (``_fire_timers``) may hold the list.
        """
        timers = self._timers
        timers[:] = [entry for entry in timers if entry[2]._tool is not None]
        heapify(timers)

    async def _idle(self, fire: bool = True) -> None:
        """Sleep until woken (a flow or callback became ready) or the nearest timer is due;
        then fire the due timers (unless not to ``fire``: the helper fires them in a context).

        The task parks itself as in :meth:`_loop`, with a timer of the event loop's for the
        deadline: on asyncio a ``call_at()`` that completes the future, on trio an alarm (see
        :mod:`._alarm`) that wakes the task (no cancel scope around the wait: a trio scope with
        a deadline, entered and left, costs several times an alarm armed and disarmed); on
        either, the alarm an inline run just left for the same deadline (``_take_spare``)."""
        deadline = self._next_deadline()
        # The alarm the inline run just left for this deadline, if any, wakes the task instead.
        alarm = None if self._spare_alarm is None else self._take_spare(deadline, self._wake)
        if self._library == "asyncio":
            loop = self._threadsafe
            future = self._sleep_scope = loop.create_future()
            timer = None if deadline == math.inf or alarm is not None \
                else loop.call_at(deadline, _set_result, future)
            try:
                await future
            finally:
                if timer is not None:
                    timer.cancel()
                elif alarm is not None:
                    alarm.disarm()
                if self._sleep_scope is future:
                    self._sleep_scope = None
        else:
            # A late alarm (the task was woken otherwise, and not yet disarmed) finds nobody
            # parked: _wake() then does nothing (no inline run here, or this is the helper).
            if alarm is None:
                alarm = self._new_alarm(deadline, self._wake)
            self._sleep_scope = _trio_lowlevel.current_task()
            try:
                await _trio_lowlevel.wait_task_rescheduled(self._abort_park)
            finally:
                self._sleep_scope = None
                if alarm is not None:
                    alarm.disarm()
        if fire and self._timers:
            self._fire_timers()

    async def _loop(self, main: _Flow | None) -> None:
        """Run until ``main`` (a ``promise()``'s flow) has finished, or for a public tool until
        it is served; return early if a coroutine step needs the tool's task group, or on a
        fatal error.

        One coroutine frame, and a sleep that parks the task itself when no timer is due: a root
        blocked in ``promise()`` should hold little more than a blocked task.
        """
        while not (main.finished if main is not None else self._served()):
            if self._fatal is not None or (self._need_tg and self._tg is None):
                return
            if self._inline_next is not None:
                await self._run_inline()
            elif self._ready:
                self._tick()
                # A schedule point only if work is left over (a burst was used up): otherwise
                # the next turn parks the task, which is one.
                if self._ready and self._inline_next is None:
                    self._slept = True
                    await _checkpoint(self._library)
            elif self._timers and self._next_deadline() != math.inf:
                self._slept = True
                await self._idle()
            elif self._library == "asyncio":
                self._slept = True
                if self._spare_alarm is not None:
                    self._drop_spare()  # no timer left: nothing for it to wake
                future = self._sleep_scope = self._threadsafe.create_future()
                try:
                    await future
                finally:
                    if self._sleep_scope is future:
                        self._sleep_scope = None
            else:
                self._slept = True
                if self._spare_alarm is not None:
                    self._drop_spare()
                lowlevel = sys.modules["trio"].lowlevel
                self._sleep_scope = lowlevel.current_task()
                await lowlevel.wait_task_rescheduled(self._abort_park)

    def _abort_park(self, _: object) -> Any:
        """The parked driver's task is cancelled (trio)."""
        self._sleep_scope = None
        return sys.modules["trio"].lowlevel.Abort.SUCCEEDED

    async def _run_inline(self) -> None:
        """Await the coroutine steps of this ``promise()``'s flow (or of one of its parallel
        branches) in the calling task.

        Consecutive coroutine steps (and the plain steps between them) share one cancel scope:
        its deadline is the nearest ``set_timeout()`` of the flow and of the flows it is a
        branch of; a timeout, ``asi.cancel()`` or an external error cancels it. The backend's
        cancellation from outside goes through unchanged.
        """
        step = self._inline_next
        assert step is not None
        # Bound through the typed field: the compiled build then knows the flow's type.
        self._inline_flow = step._flow
        flow = self._inline_flow
        assert flow is not None
        interrupted: AsyncSteps | None = None
        # The scope has no deadline: an alarm fires the flow's timeout instead, whose handler
        # cancels the scope with its reason (see _alarm). Without a deadline argument the
        # constructor also skips its deadline handling (about 40 % of its cost).
        self._inline_alarm = None
        deadline = _flow_deadline(flow)
        if deadline != math.inf:
            self._arm_inline(deadline)
        elif self._spare_alarm is not None:
            self._drop_spare()
        branch = self._inline_ctx is not None
        if branch:
            # Other branches' tasks serve the driver's work while this one is awaited: in the
            # caller's context, where the flows' plain steps run (see _serve_inline).
            self._caller_ctx = self._task_context()
        try:
            with scope_class(self._library)() as scope:
                self._inline_scope = scope
                # Nothing can cancel the scope but the engine (it has no deadline): unless the
                # engine has cancelled some scope since, it is not cancelled.
                cancels = SWITCHES.cancels
                while True:
                    self._inline_next = None
                    context = self._inline_ctx
                    self._inline_ctx = None
                    if step._status is not CORO or flow.finished \
                            or flow.root._status is CANCELLING:
                        # Cancelled before its coroutine could start: it never runs.
                        _close_unstarted(step)
                        if step._status is CORO:
                            interrupted = step  # the root's cancel() waits for it: go on now
                        break
                    # Work scheduled before this await (by the plain steps run since the last
                    # one, too) has nobody else to run it while the caller awaits: a helper.
                    if not self._helper and (
                            self._ready or (self._timers and self._foreign_timers(flow))):
                        self._start_helper()
                    # _await_step(), inlined: one coroutine frame less per blocked root.
                    self._inline = step
                    ext = step._ext
                    assert ext is not None and ext.coro is not None
                    ext.scope = scope
                    error: BaseException | None = None
                    try:
                        if context is None:
                            result = await ext.coro
                        else:  # a branch's step: in its own copy of the caller's context
                            result = await _InContext(ext.coro, context)
                    except Exception as exc:
                        result = None
                        error = exc
                    except BaseException as exc:
                        # The backend's cancellation, a group of nothing but cancellations,
                        # KeyboardInterrupt...: out, to the scope that owns them.
                        if isinstance(exc, BaseExceptionGroup) and _judgeable_group(exc):
                            result = None
                            error = exc
                        else:
                            if scope.cancel_called:
                                interrupted = step
                            raise  # our scope absorbs its own cancellation
                    finally:
                        ext.coro = None
                        ext.scope = None
                        self._inline = None
                    self._current = flow
                    try:
                        if SWITCHES.cancels != cancels and scope.cancel_called:
                            # The step was cancelled, yet its coroutine returned or failed. An
                            # error wins, as in a task group, unless the root is being cancelled.
                            ext = step._ext
                            assert ext is not None
                            if error is None or flow.root._status is CANCELLING:
                                interrupted = step
                            else:
                                ext.pending = None
                                if _coroutine_done(step, result, error, inline=True):
                                    self._schedule(flow)
                            break
                        if not _coroutine_done(step, result, error, inline=True):
                            break
                        flow.run(BURST)  # on with the flow, in the same scope
                    finally:
                        self._current = None
                    following = self._inline_next
                    if following is None:
                        break
                    step = following
                    self._inline_flow = step._flow
                    flow = self._inline_flow
                    assert flow is not None
                    deadline = _flow_deadline(flow)
                    alarm = self._inline_alarm
                    if deadline != (math.inf if alarm is None else alarm.when):
                        self._arm_inline(deadline)
        finally:
            alarm = self._inline_alarm
            if alarm is not None:
                # Left armed for the wait that most often follows (the caller waits for the
                # other branches until the same timeout, in _idle());
                # that wait takes it over, anything else drops it (_take_spare, _drop_spare).
                self._inline_alarm = None
                if self._spare_alarm is not None:
                    self._drop_spare()
                alarm.due = self._spare_due
                self._spare_alarm = alarm
            self._inline_scope = self._inline_flow = None
            self._inline_next = self._inline_ctx = None
            if self._helper:
                await self._join_helper()
            if branch:
                self._caller_ctx = None
        if interrupted is None or self._fatal is None:
            # What waits for the coroutine that ended (a root's cancel(), a halted branch's
            # cancel handlers, the unwinding of its parallel step) goes on, as after a task's.
            if self._joins:
                self._check_joins()
            if interrupted is not None:
                _inline_cancelled(self, interrupted)

    def _arm_inline(self, deadline: float) -> None:
        """The inline run's alarm goes off at ``deadline`` (the flow's nearest timeout) from now
        on; none for ``math.inf``. During an inline run only (it sets ``_inline_alarm``)."""
        alarm: Alarm | None = self._inline_alarm
        if alarm is not None:
            if alarm.when == deadline:
                return
            alarm.disarm()
        self._inline_alarm = self._claim_alarm(deadline, self._inline_due)

    def _claim_alarm(self, deadline: float, due: Callable[[], object]) -> Alarm | None:
        """An alarm calling ``due()`` at ``deadline`` (none for ``math.inf``): the one an inline
        run left, if it goes off then (``_take_spare``), else a new one."""
        if self._spare_alarm is not None:
            alarm = self._take_spare(deadline, due)
            if alarm is not None:
                return alarm
        return self._new_alarm(deadline, due)

    def _new_alarm(self, deadline: float, due: Callable[[], object]) -> Alarm | None:
        if deadline == math.inf:
            return None
        return arm_alarm(self._library, self._threadsafe, deadline, due)

    def _take_spare(self, deadline: float, due: Callable[[], object]) -> Alarm | None:
        """The alarm an inline run left (``_spare_alarm``), now calling ``due()``, if it goes
        off at ``deadline``; else ``None`` (it is disarmed). There must be one."""
        alarm = self._spare_alarm
        assert alarm is not None
        self._spare_alarm = None
        if alarm.when == deadline:
            alarm.due = due
            return alarm
        alarm.disarm()
        return None

    def _drop_spare(self) -> None:
        """Disarm the alarm an inline run left: nothing waits for it."""
        alarm = self._spare_alarm
        if alarm is not None:
            self._spare_alarm = None
            alarm.disarm()

    def _spare_due(self) -> None:
        """The alarm an inline run left went off before a wait took it over: it is forgotten
        (a spare is live while it is ``_spare_alarm``). As when the run disarmed its alarm, the
        driver's next wait finds the timer due."""
        self._spare_alarm = None

    def _task_context(self) -> Context:
        """The own context (not a copy) of the task that awaits this ``promise()``, the running
        one: trio's, or asyncio's (Python 3.12). Read once per driver (a driver serves one
        ``promise()`` call, in one task)."""
        context = self._own_ctx
        if context is None:
            if self._library == "asyncio":
                task: Any = _asyncio_current_task(self._threadsafe)
                context = self._own_ctx = task.get_context()
            else:
                context = self._own_ctx = _trio_lowlevel.current_task().context
        return context

    def _inline_due(self) -> None:
        """The alarm of the inline run: fire the due ``set_timeout()`` of the awaited step's
        flow or of a flow it is a branch of (its handler cancels the inline scope, with its
        reason) or, woken early, wait on."""
        self._inline_alarm = None
        flow = self._inline_flow
        if self._inline_scope is None or flow is None or flow.finished:
            return
        now = self._clock()
        due: AsyncSteps | None = None
        while flow is not None:
            for frame in flow.stack:
                ext = frame._ext
                if ext is not None and ext.timer is not None and (
                        due is None
                        or ext.deadline < due._ext.deadline):  # type: ignore[union-attr]
                    due = frame
            flow = _outer_flow(flow)
        if due is None:
            return
        ext = due._ext
        assert ext is not None and ext.timer is not None
        if ext.deadline > now:  # asyncio may call a little early (its clock's resolution)
            self._arm_inline(ext.deadline)
            return
        handle = ext.timer
        if handle._tool is not None:  # as _fire_timers() runs it; its heap entry is skipped
            handle._tool = None
            self._pending -= 1
            _run_callback(handle)

    def _join(self, flows: list[_Flow], then: Callable[[], object]) -> None:
        """Call ``then()`` once no coroutine runs under ``flows`` any more (see
        :meth:`_check_joins`)."""
        joins = self._joins
        if joins is _EMPTY:
            joins = self._joins = []
        joins.append((flows, then))

    def _check_joins(self) -> None:
        """A coroutine ended: call, in the order they began to wait, the ``then()`` of every
        wait whose coroutines have all ended (an inner wait before the outer ones it is under).
        """
        joins = self._joins
        i = 0
        while i < len(joins):
            flows, then = joins[i]
            if _has_running(flows):
                i += 1
                continue
            del joins[i]
            then()
            i = 0  # then() may have ended (closed) coroutines an earlier wait counts

    def _foreign_timers(self, flow: _Flow) -> bool:
        """Does the heap hold a live timer other than a ``set_timeout()`` of ``flow`` or of a
        flow it is a branch of (those the inline run's alarm fires)?"""
        for entry in self._timers:
            handle = entry[2]
            if handle._tool is None:
                continue
            if handle._func is not _on_timeout:
                return True
            step = handle._args[0]
            owner = step._flow
            # Is the timeout's flow ``flow`` or one it is a branch of? (Most often the heap holds
            # one live entry and the chain is one or two flows long: no list is built.)
            outer = flow
            while outer is not owner:
                above = _outer_flow(outer)
                if above is None:
                    return True
                outer = above
        return False

    def _start_helper(self) -> None:
        self._helper = True
        self._spawn(self._help, (), "futoin_anyio driver helper")

    async def _help(self) -> None:
        """Serve the driver's callbacks, timers and other flows while it awaits inline: in the
        caller's context while a branch is awaited (see :meth:`_serve_inline`)."""
        try:
            while self._inline_scope is not None:
                if self._work_due():
                    context = self._caller_ctx
                    if context is None:
                        self._tick()
                    else:
                        context.run(self._tick)
                    await _checkpoint(self._library)
                else:
                    await self._idle(fire=False)
        finally:
            self._helper_done()

    def _work_due(self) -> bool:
        """Is a flow or callback ready, or a timer due? (What a task serving the driver runs.)"""
        if self._ready:
            return True
        timers = self._live_timers()
        return bool(timers) and timers[0][0] <= self._clock()

    def _helper_done(self) -> None:
        self._helper = False
        ended = self._helper_ended
        if ended is not None:
            self._helper_ended = None
            ended.set()

    async def _serve_inline(self) -> None:
        """Serve the driver's work from a coroutine task that has ended while the caller's task
        awaits a parallel branch inline, before the task ends: what its end made ready (the
        branch's next steps), in the caller's context, where the driver would run it.

        Whoever calls this has set ``_helper`` (no helper task is started meanwhile). Work
        left that the inline run's alarm does not cover (a timer of another flow) is handed
        to a helper task. A ``KeyboardInterrupt`` (or the like) out of a step stops the driver,
        which raises it (asyncio would let it out of the event loop from a task).
        """
        try:
            while self._inline_scope is not None and self._fatal is None and self._work_due():
                self._caller_ctx.run(self._tick)
                if self._ready:
                    await _checkpoint(self._library)  # a burst was used up
        except BaseException as exc:
            if isinstance(exc, get_cancelled_exc_class()):
                raise
            self._report_fatal(exc)
        finally:
            self._helper_done()
        flow = self._inline_flow
        if flow is None or self._inline_scope is None or self._fatal is not None:
            return
        if self._ready or (self._timers and self._foreign_timers(flow)):
            self._start_helper()

    async def _join_helper(self) -> None:
        """The inline run is over: wait (shielded) until the helper has seen it and ended."""
        with CancelScope(shield=True):
            while self._helper:
                ended = self._helper_ended = anyio.Event()
                self._wake()
                await ended.wait()

    def _spawn(self, func: _CoroRunner, args: tuple[Any, ...], name: object) -> None:
        """Start ``func(*args)`` in a task of no task group (an asyncio task, a trio system
        task) named ``name``: the helper, or a coroutine step of a concurrent flow (a
        ``promise()`` driver only).

        No task group is opened for them: ``promise()`` joins every such task before it
        returns (cancelling them first if it is left by an exception), so none outlives it. An
        exception that escapes one stops the driver (see :meth:`_report_fatal`).
        """
        raw = self._raw_tasks
        if raw is _EMPTY:
            raw = self._raw_tasks = set()
        context = copy_context()
        if _sniffio is not None and self._library == "asyncio":
            # The start may come from a plain event-loop callback (a thread hand-off, a future's
            # done callback), where no task tells which library runs: say it. (Trio says it
            # itself: sniffio reads the thread-local that trio sets for the whole run first.)
            context.run(_sniffio.current_async_library_cvar.set, self._library)
        task = _RawTask()
        raw.add(task)
        if self._library == "asyncio":
            body = self._raw_task(task, func, args)
            task.task = context.run(self._threadsafe.create_task, body, name=str(name))
        else:
            sys.modules["trio"].lowlevel.spawn_system_task(
                self._raw_task, task, func, args, name=name, context=context)

    async def _raw_task(self, task: _RawTask, func: _CoroRunner, args: tuple[Any, ...]) -> None:
        try:
            if func is _run_coroutine:
                # The step's own scope is the task's: _run_coroutine() gives it to ``task``.
                await _run_coroutine(args[0], args[1], task)
            else:
                with CancelScope() as scope:
                    task.scope = scope
                    if task.cancelled:  # promise() was left before this task started
                        cancel_scope(scope, _LEFT)
                    await func(*args)
        except BaseException as exc:  # a task of no group: the driver re-raises it
            self._report_fatal(exc)
        finally:
            raw = self._raw_tasks
            raw.discard(task)
            task.task = task.scope = None
            idle = self._raw_idle
            if not raw and idle is not None:
                self._raw_idle = None
                idle.set()

    async def _join_raw_tasks(self, cancel: bool = False) -> None:
        """Wait, shielded, until every task started by :meth:`_spawn` has ended; with
        ``cancel``, cancel them first (as a task group left by an exception does)."""
        with CancelScope(shield=True):
            while self._raw_tasks:
                if cancel:
                    for task in self._raw_tasks:
                        task.cancelled = True
                        if task.scope is not None:
                            cancel_scope(task.scope, _LEFT)
                idle = self._raw_idle = anyio.Event()
                await idle.wait()

    def _idle_after_promise(self) -> bool:
        """Is there nothing of this promise() driver's left to cancel? (It keeps no pending
        coroutines: its coroutine tasks start at once, see :meth:`_start_coroutine`.)

        Timers count by ``_pending``, not by the heap: a ``set_timeout()`` whose step ended
        leaves its cancelled entry there, holding an emptied handle, and ``_cancel_all()`` for
        nothing but that costs about 1 % of a request's CPU."""
        return not (self._roots or self._ready or self._pending)

    def _start_pending_coros(self) -> None:
        pending = self._pending_coros
        self._pending_coros = _EMPTY
        for step, coro in pending:
            self._start_coroutine(step, coro)

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The long-lived driver of a public AsyncTool."""
        self._tg_ready()
        task_status.started()
        try:
            while True:
                await self._loop(None)
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
            cancel_scope(self._tg.cancel_scope, _fatal_reason(self._fatal))

    def _tasks_now_idle(self) -> None:
        """The last coroutine task ended (``_coro_tasks`` is 0; counted in ``_run_coroutine``):
        wake whoever waits in :meth:`_tasks_ended`."""
        idle = self._tasks_idle
        if idle is not None:
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
                # This driver is going away: nothing to wait with.
                flow.cancel_root(False, "its AsyncTool (or promise()) is ending")
        for item in self._ready:
            if type(item) is Handle:
                item._tool = None
                item._func = _gone
                item._args = ()
        self._ready = _EMPTY
        for entry in self._timers:
            handle = entry[2]
            handle._tool = None
            handle._func = _gone
            handle._args = ()
        self._timers = _EMPTY
        self._pending = 0
        with _foreign:
            self._exited = True  # this driver runs nothing more (its block or promise() ends)

    def _report_fatal(self, exc: BaseException) -> None:
        """A BaseException (KeyboardInterrupt…) escaped a coroutine step: the driver stops and
        re-raises it, bare (``promise()`` once its tasks have ended, an AsyncTool once its task
        group is closed)."""
        if self._fatal is None:
            self._fatal = exc
        inline = self._inline_scope
        if inline is not None:
            cancel_scope(inline, _fatal_reason(exc))  # the caller's inline await stops too
        self._wake()


_Future = _asyncio_future_type


@cython.freelist(128)
@cython.cclass
class _RawTask:
    """A task of :meth:`_Driver._spawn`: its cancel scope once it runs, and its asyncio task
    (held here: asyncio keeps only weak references to tasks)."""

    __slots__ = ("cancelled", "scope", "task")

    def __init__(self) -> None:
        self.task: Any = None
        self.scope: CancelScope | None = None
        self.cancelled = False


class _InContext:
    """Awaits a coroutine with each of its steps run in ``context``: a parallel branch's
    coroutine step awaited inline sees (and sets) its own copy of the caller's context, as it
    would in a task of its own. Sends, throws (the backend's cancellation) and a close go
    through to the coroutine."""

    __slots__ = ("context", "coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], context: Context) -> None:
        self.coro = coro
        self.context = context

    def __await__(self) -> Generator[Any, Any, Any]:
        run = self.context.run
        coro = self.coro
        send = coro.send
        try:
            signal = run(send, None)
        except StopIteration as end:
            return end.value
        while True:
            try:
                value = yield signal
            except GeneratorExit:
                run(coro.close)
                raise
            except BaseException as exc:
                try:
                    signal = run(coro.throw, exc)
                except StopIteration as end:
                    return end.value
            else:
                try:
                    signal = run(send, value)
                except StopIteration as end:
                    return end.value


def _set_result(future: Any) -> None:
    if not future.done():
        future.set_result(None)


class _NoTrio:
    """Stands for ``trio.lowlevel`` until a driver binds to trio: its ``Task`` is no type a
    sleeper can have."""

    class Task:
        pass


#: ``trio.lowlevel`` once a driver has bound to trio (see :meth:`_Driver._bind`).
_trio_lowlevel: Any = _NoTrio

#: The token and clock of the trio run a driver bound to last (one tuple: read whole by threads
#: that each run trio).
_trio_run: tuple[Any, Callable[[], float]] | None = None


def _checkpoint(library: str) -> Awaitable[None]:
    """A checkpoint of the driver's backend: what ``anyio.lowlevel.checkpoint()`` awaits,
    without its look-up of the running backend on every call (a driver yields once a burst)."""
    if library == "trio":
        return _trio_lowlevel.checkpoint()  # type: ignore[no-any-return]
    return _asyncio_sleep(0)


def _task_name(step: AsyncSteps) -> str:
    """A coroutine step's task is named after the step function, as Trio users expect."""
    func = step._func
    name = getattr(func, "__qualname__", None)
    if name is None:
        name = type(func).__qualname__
    module = getattr(func, "__module__", None)
    return f"{module}.{name}" if module else str(name)


def _fatal_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__} escaped a coroutine step"


def _run_callback(handle: Handle) -> None:
    """Run a handle's callback, already counted as done; the handle lets go of it first."""
    func = handle._func
    args = handle._args
    handle._func = _gone
    try:
        if args:
            handle._args = ()
            func(*args)
        else:
            func()  # no tuple to unpack: the common immediate(func)
    except Exception:
        logger.exception("AsyncTool callback %r raised", func)


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


# Typed locals: the compiled build reads the step's, the flow's and the driver's fields in C (a
# step's ``_flow`` and a flow's ``driver`` are untyped fields, their modules importing each other).
@cython.locals(step=_Frame, flow=_Flow, driver=_Driver, ext=_Ext)
async def _run_coroutine(step: AsyncSteps, coro: Coroutine[Any, Any, Any],
                         raw: _RawTask | None = None) -> None:
    """The task of a coroutine step of a concurrent flow: runs it in the step's own scope.

    ``raw``: the driver's record of a task of no task group (``_Driver._spawn``), whose scope
    is then this one: the driver cancels it when ``promise()`` is left by an exception.
    """
    flow = step._flow
    ext = step._ext
    assert flow is not None and ext is not None
    driver = flow.driver
    error: BaseException | None = None
    result: Any = None
    serve_inline = False
    driver._coro_tasks += 1
    try:
        if step._status is not CORO or flow.finished or flow.root._status is CANCELLING:
            # Cancelled before its task could start (the root's cancel() may be waiting for it).
            coro.close()
            return
        with scope_class(driver._library)() as scope:
            if raw is not None:
                raw.scope = scope
                if raw.cancelled:  # promise() was left before this task started
                    cancel_scope(scope, _LEFT)
            # What the coroutine ends with is judged here: the backend's cancellation, and a
            # group of nothing but cancellations (from a nursery or task group inside the
            # step), go out unchanged to the scope that owns them; KeyboardInterrupt and the
            # like are fatal to the driver; anything else is the step's error.
            # :meth:`_Driver._run_inline` has the same judgement: change both together.
            ext.scope = scope
            try:
                result = await coro
            except Exception as exc:
                error = exc
            except BaseException as exc:
                if isinstance(exc, BaseExceptionGroup) and _judgeable_group(exc):
                    error = exc
                elif isinstance(exc, (get_cancelled_exc_class(), BaseExceptionGroup)):
                    raise  # cancellation: our scope absorbs its own, anything else goes out
                else:
                    driver._report_fatal(exc)
                    return
            finally:
                ext.scope = None  # (ext.coro is let go in the finally below, on every path)
                if raw is not None:
                    raw.scope = None
        if raw is not None and raw.cancelled:
            return  # promise() is left by an exception: the step ends with its root
        if driver._inline_scope is not None and not driver._helper \
                and driver._caller_ctx is not None:
            # The driver's task awaits a parallel branch inline: this task serves what its end
            # makes ready before it ends, rather than a helper task started for it.
            driver._helper = serve_inline = True
    finally:
        ext.coro = None
        driver._coro_tasks -= 1
        if not driver._coro_tasks:
            driver._tasks_now_idle()
        if driver._joins:  # an unwinding or a cancel() may wait for this coroutine
            driver._soon(driver._check_joins)
    _coroutine_done(step, result, error, False)
    if serve_inline:
        await driver._serve_inline()
