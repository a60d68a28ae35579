"""AsyncTool: the event-loop interface of FTN12 §2.6.

One :class:`AsyncTool` is one *driver* (``_driver``): a single coroutine that runs many flows
(roots and parallel branches) as plain function calls, keeps their timers in one heap, and yields
to the event loop about every ``BURST`` steps. ``await asi.promise()`` runs a private driver in
the calling task; ``async with AsyncTool()`` runs a shared one in its own task for ``execute()``.
This module holds the public surface: :class:`AsyncTool` (the driver plus the §2.6 methods and
the ``async with`` block), :class:`Handle` (defined with the driver, which makes and runs them),
:class:`AsyncToolStatistics` and :func:`current_tool`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from threading import get_ident
from types import TracebackType
from typing import final
from weakref import ReferenceType

from anyio import create_task_group

from ._driver import _EMPTY, Handle, _current_tool, _Driver, _foreign, _unwrap_group
from ._errors import Errors, FutoInError
from ._final import refuse_subclasses
from ._frame import _internal

__all__ = ("AsyncTool", "AsyncToolStatistics")

#: The registry of live roots, for the flow dump: a weak reference to every AsyncTool whose block
#: was entered, dropped from the set (by the reference's callback) as soon as the tool is freed.
#: It keeps nothing alive; a tool lists its executed roots itself (``_roots``), a ``promise()``
#: driver its one root (``_main``). No ``promise()`` driver is listed: the dump finds them in the
#: await chains of the loop's tasks (a weak reference with a callback and a set entry were some
#: 1,700 instructions and an object for the collector per waiting root): the pure build's in a
#: frame of ``promise()``, the compiled build's in the closure its coroutine holds.
_live: set[ReferenceType[AsyncTool]] = set()
_live_add = _live.add
_live_discard = _live.discard
#: The compiled build's ``promise()`` drivers in their first run (not in a task's await chain
#: yet). The pure build leaves it empty: the dump finds those on the stack, in a frame of
#: ``promise()``, which the compiled ``promise()`` has none of.
_first_runs: list[AsyncTool] = []
_weakref = ReferenceType


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


class AsyncTool(_Driver):
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

    # The slots (the driver's state, and the weak reference that lists it in _live) are _Driver's.
    __slots__ = ()

    def __init__(self) -> None:
        self._public = True
        self._init()

    # -- the FTN12 §2.6 interface -------------------------------------------------------------

    def immediate(self, func: Callable[[], object]) -> Handle:
        """Schedule ``func()`` to run soon on the loop's thread; callable from any thread."""
        if not callable(func):
            raise TypeError(f"immediate() needs a callable, got {type(func).__name__}")
        if self._exited:
            _internal("immediate(): the AsyncTool has already exited")
        handle = Handle.__new__(Handle)  # _driver._new_handle(), inlined: a hot path
        handle._func = func
        handle._args = ()
        handle._tool = self
        thread = self._thread
        if thread is None or get_ident() == thread:
            self._pending += 1
            ready = self._ready  # _ready_queue(), inlined
            if ready is _EMPTY:
                ready = self._ready = deque()
            ready.append(handle)
            if self._sleep_scope is not None or self._inline is not None:
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
        _live_add(_weakref(self, _live_discard))
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

    def _require_running(self, what: str) -> None:
        if self._exited:
            _internal(f"{what}: the AsyncTool has already exited")
        if self._thread is None:
            raise FutoInError(Errors.InternalError, f"{what}: the AsyncTool is not running")


# Final in both builds: declared so in ``_tool.pxd``, refused here in the pure one (``_final``).
refuse_subclasses(AsyncTool)


def private_tool() -> AsyncTool:
    """A driver for one ``promise()`` call, run inline in the awaiting task (a function, not a
    class method: the compiled ``promise()`` then knows the type of what it gets, and reads the
    driver's fields and calls its methods in C)."""
    tool = AsyncTool.__new__(AsyncTool)
    tool._public = False
    tool._init()
    return tool


def _check_ms(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of milliseconds, got {type(value).__name__}")
    if value < 0 or value != value:
        raise ValueError(f"{what} must be >= 0 milliseconds, got {value!r}")
    return float(value) / 1000.0


def current_tool() -> AsyncTool | None:
    """The AsyncTool of the innermost ``async with AsyncTool()`` block, if any."""
    return _current_tool.get()
