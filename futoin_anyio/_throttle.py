"""Throttle: at most ``max`` entries per period (FTN12 §1.11.2, §2.4)."""

from __future__ import annotations

from dataclasses import dataclass
from threading import get_ident
from time import monotonic
from types import TracebackType
from typing import TYPE_CHECKING, Any, final

from anyio import Event, current_time, move_on_at
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from . import _instrument as _ins
from ._driver import Handle
from ._final import refuse_subclasses
from ._frame import SWITCHES
from ._hooks import check_section, refuse
from ._steps import AsyncSteps
from ._sync_common import (
    check_count,
    check_name,
    check_period,
    check_queue,
    enter_thread,
    label,
    lazy_binary,
)
from ._types import ErrorHandler, StepFunc
from ._waitqueue import DONE, HELD, NEW, QUEUED, WaitQueue, state_name

if TYPE_CHECKING:  # the stand-in's typed decorators
    from . import _nocython as cython
else:
    try:
        import cython
    except ImportError:  # its decorators are no-ops in the pure build
        from . import _nocython as cython

__all__ = ("Throttle", "ThrottleStatistics")

#: A period boundary reached within this many seconds counts as reached: timers computed from
#: floating-point deadlines must never be a hair too early and spin.
_EPS = 1e-6


@final
@dataclass(frozen=True)
class ThrottleStatistics:
    """A snapshot of a :class:`Throttle`, as returned by :meth:`Throttle.statistics`."""

    #: Entries let in during the current period (0 when no period is running).
    entries: int
    #: Flows and tasks waiting for a later period.
    waiting: int
    #: Entries refused with ``DefenseRejected`` since the Throttle was created.
    rejected: int
    #: The ``max`` given to the constructor.
    max: int
    #: The period length in milliseconds.
    period_ms: float
    #: The ``max_queue`` given to the constructor (``None``: unlimited).
    max_queue: int | None


class _Waiter:
    """A flow or task waiting for a later period."""

    # ``since``: when it began to wait (set only then, for the flow dump).
    __slots__ = ("args", "asi", "event", "period_end", "since", "state", "throttle")

    since: float

    def __init__(self, throttle: Throttle) -> None:
        self.throttle = throttle
        self.state = NEW
        self.asi: AsyncSteps | None = None
        self.args: tuple[Any, ...] = ()
        self.event: Event | None = None
        self.period_end = 0.0  # the period a task was let in, to give its entry back

    def wait(self, asi: AsyncSteps, *args: Any) -> None:
        """The step that waits for the next period when the current one was full."""
        throttle = self.throttle
        driver = asi._flow.driver  # type: ignore[union-attr]
        if throttle._enter_nowait(driver._clock(), driver._thread):
            self.state = HELD
            asi.success(*args)
            return
        queue = throttle._queue
        if queue.full():
            refuse(asi, queue.rejection())
            return
        self.asi = asi
        self.args = args
        self.state = QUEUED
        queue.append(self)
        if SWITCHES.hooked:  # only for the flow dump and instruments (one test when neither is on)
            if SWITCHES.times:  # (AnyIO's current_time() would cost a backend lookup)
                self.since = monotonic()
            if SWITCHES.active:
                _ins.sync(asi._flow, "sync_waiting", throttle._label)
        asi.set_cancel(self.abandon)
        asi.wait_external()
        throttle._sync_timer()

    def abandon(self, asi: AsyncSteps) -> None:
        """Cancel handler of the waiting step: leave the queue."""
        if self.state is QUEUED:
            self.state = DONE
            self.asi = None
            self.throttle._dequeue(self)

    def __repr__(self) -> str:
        return f"<Throttle entry {state_name(self.state)}>"


@cython.freelist(128)
@cython.cclass
class _Section:
    """The step ``sync()`` adds: enter (now or in a later period), then the section."""

    # A Mutex entry that gets its place at once calls a section in its own step (see
    # ``_mutex._Entry``) instead of adding it as a sub-step: the Limiter's case.
    __slots__ = ("func", "onerror", "throttle")

    def __init__(self, throttle: Throttle, func: StepFunc, onerror: ErrorHandler | None) -> None:
        self.throttle = throttle
        self.func = func
        self.onerror = onerror

    def __call__(self, asi: AsyncSteps, *args: Any) -> None:
        entered = self._admit(asi)
        if entered is None:
            refuse(asi, self.throttle._queue.rejection())
            return
        self._go_on(asi, entered, args)

    def _admit(self, asi: AsyncSteps) -> bool | None:
        """Enter the current period (``True``), wait for a later one (``False``), or ``None``
        when the queue is full: the caller refuses the step with its ``DefenseRejected``
        (``_hooks.refuse``), with no waiter made and dropped."""
        throttle = self.throttle
        driver = asi._flow.driver  # type: ignore[union-attr]
        # The driver's clock is the event loop's (anyio.current_time() without its backend
        # lookup).
        if throttle._enter_nowait(driver._clock(), driver._thread):
            return True
        if throttle._queue.full():
            return None
        return False

    def _go_on(self, asi: AsyncSteps, entered: bool, args: tuple[Any, ...]) -> None:
        """Add the section's steps: a wait for the next period unless ``entered``, then
        ``func`` with the incoming ``args``."""
        # Sub-steps start with no arguments: hand the incoming ones on (see Mutex).
        if args:
            asi.success_step(*args)
        if not entered:
            asi.add(_Waiter(self.throttle).wait)
        asi.add(self.func, self.onerror)

    def __repr__(self) -> str:
        return f"<Throttle.sync {self.func!r}>"


class Throttle:
    """At most ``max`` critical section entries per period (FTN12 §1.11.2, §2.4).

    A period starts with the first entry after an idle time and lasts ``period_ms``; entries
    beyond ``max`` wait in FIFO order for the following periods, which then follow each other
    back to back while anyone waits. There is no "leave": an entry counts for its period
    whatever it does next. With ``max_queue``, an entry that would make the queue longer than
    that fails at once with ``DefenseRejected``.

    Periods are measured with the event loop's clock (:func:`anyio.current_time`), so trio's
    ``MockClock`` drives them in tests. No timer runs while nothing waits: the next period is
    scheduled on the waiting flow's :class:`~futoin_anyio.AsyncTool` only when a flow waits (a
    waiting task sleeps until the period ends by itself).

    Use it through ``asi.sync(throttle, func, onerror)``, or from plain AnyIO code as
    ``async with throttle:``; both share the same periods and queue. Not thread-safe: use it
    (all its methods) from the thread of one event loop at a time; entering it from another
    thread while entries wait raises ``RuntimeError``.

    :param max: entries per period (``>= 1``).
    :param period_ms: the period in milliseconds (``> 0``).
    :param max_queue: how many may wait (``>= 0``); ``None`` for no limit.
    :param name: a name for people: the flow dump (:mod:`futoin_anyio.dump`) shows it.
    :raises TypeError: if a count is not an ``int`` or the period not a number.
    :raises ValueError: if ``max < 1``, ``period_ms <= 0`` or ``max_queue < 0``.
    """

    __slots__ = (
        "__weakref__",
        "_count",
        "_label",
        "_max",
        "_name",
        "_period",
        "_period_end",
        "_period_ms",
        "_queue",
        "_thread",
        "_timer",
        "_timer_host",
    )

    def __init__(self, max: int, period_ms: float = 1000,
                 max_queue: int | None = None, *, name: str | None = None) -> None:
        name = check_name("Throttle", name)
        self._setup(check_count("Throttle", "max", max, 1),
                    check_period("Throttle", "period_ms", period_ms),
                    WaitQueue(check_queue("Throttle", "max_queue", max_queue),
                              "Throttle queue limit (max_queue) reached"),
                    name, label("Throttle", name))

    @classmethod
    def _with_queue(cls, max: int, period_ms: float, queue: WaitQueue[_Waiter],
                    name: str | None, what: str) -> Throttle:
        """A Throttle over a wait queue of the caller's (a Limiter names its own limit in it)."""
        self = cls.__new__(cls)
        self._setup(max, period_ms, queue, name, what)
        return self

    @property
    def name(self) -> str | None:
        """The name given to the constructor (``None``: none)."""
        return self._name

    def _setup(self, max: int, period_ms: float, queue: WaitQueue[_Waiter], name: str | None,
               what: str) -> None:
        self._name = name
        self._label = what  # "Throttle 'x'", or the Limiter's rate: what the flow dump says
        self._max = max
        self._period_ms = period_ms
        self._period = period_ms / 1000.0
        self._count = 0
        self._period_end: float | None = None  # None: no period running
        self._queue = queue
        self._timer: Handle | None = None
        self._timer_host: _Waiter | None = None  # the queued flow whose AsyncTool runs the timer
        self._thread = 0  # the thread of the event loop using it (see enter_thread())

    # -- ISync ------------------------------------------------------------------------------------

    def sync(self, asi: AsyncSteps, func: StepFunc, onerror: ErrorHandler | None = None) -> None:
        """Add a step to ``asi`` that runs ``func`` once this Throttle lets it in (FTN12 §1.11.3).

        ``func`` receives the incoming success arguments; its result goes to the following step
        as if there were no Throttle. ``onerror`` is ``func``'s error handler. A full queue fails
        the added step with ``DefenseRejected``.
        """
        check_section("Throttle", func, onerror)
        asi.add(_Section(self, func, onerror))

    # -- plain AnyIO ------------------------------------------------------------------------------

    async def __aenter__(self) -> None:
        await checkpoint_if_cancelled()
        if self._enter_nowait(current_time(), get_ident()):
            await cancel_shielded_checkpoint()
            return
        queue = self._queue
        if queue.full():
            raise queue.rejection()
        waiter = _Waiter(self)
        event = waiter.event = Event()
        waiter.state = QUEUED
        queue.append(waiter)
        try:
            while waiter.state is QUEUED:
                end = self._period_end
                assert end is not None  # someone waits, so a period is running
                with move_on_at(end):
                    await event.wait()
                if waiter.state is QUEUED:  # the period is over: start the next one
                    self._refresh(current_time())
        except BaseException:
            if waiter.state is QUEUED:
                waiter.state = DONE
                self._dequeue(waiter)
            elif waiter.state is HELD:
                # Let in, but cancelled before it could resume: give the entry back.
                waiter.state = DONE
                if waiter.period_end == self._period_end and self._count > 0:
                    self._count -= 1
                    self._grant()
                    self._sync_timer()
            raise

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        return None

    # -- introspection ----------------------------------------------------------------------------

    def statistics(self) -> ThrottleStatistics:
        """Return the entries of the current period, how many wait and how many were rejected."""
        entries = self._count
        end = self._period_end
        if end is None:
            entries = 0
        elif not self._queue:
            try:
                if current_time() + _EPS >= end:
                    entries = 0  # the period is over; nothing waited for the next one
            except Exception:  # no event loop running: report the last known count
                pass
        queue = self._queue
        return ThrottleStatistics(entries=entries, waiting=len(queue), rejected=queue.rejected,
                                  max=self._max, period_ms=self._period_ms,
                                  max_queue=queue.limit)

    def binary(self) -> Any:
        """The ``FutoInSync *`` of this Throttle for C code (see :mod:`futoin_anyio.binary`)."""
        return lazy_binary(self)

    def __repr__(self) -> str:
        return (f"<Throttle max={self._max} period_ms={self._period_ms:g} "
                f"max_queue={self._queue.limit} entries={self._count} waiting={len(self._queue)}>")

    # -- internals (also used by Limiter) ---------------------------------------------------------

    def _enter_nowait(self, now: float, thread: int | None) -> bool:
        if thread != self._thread:
            enter_thread("Throttle", self, thread, not self._queue)
        self._refresh(now)
        if self._queue or self._count >= self._max:
            return False
        if self._period_end is None:
            self._period_end = now + self._period
        self._count += 1
        return True

    def _refresh(self, now: float) -> None:
        """If the current period is over, start the next one and let waiters in."""
        end = self._period_end
        if end is None or now + _EPS < end:
            return
        self._count = 0
        if not self._queue:
            self._period_end = None
            return
        # Periods follow each other back to back while someone waits; after a long stall
        # (a busy event loop) the next one starts now.
        self._period_end = (end if now < end + self._period else now) + self._period
        self._grant()
        self._sync_timer()  # the timer's host may have been let in, or nobody waits any more

    def _grant(self) -> None:
        queue = self._queue
        limit = self._max
        while queue and self._count < limit:
            waiter = queue.popleft()
            asi = waiter.asi
            if asi is not None:
                waiter.asi = None
                if not asi:  # out of service: its cancel handler is about to run
                    waiter.state = DONE
                    continue
                waiter.state = HELD
                self._count += 1
                args = waiter.args
                waiter.args = ()
                asi.success(*args)
            else:
                waiter.state = HELD
                self._count += 1
                assert self._period_end is not None and waiter.event is not None
                waiter.period_end = self._period_end
                waiter.event.set()

    def _dequeue(self, waiter: _Waiter) -> None:
        self._queue.discard(waiter)
        self._sync_timer()

    def _sync_timer(self) -> None:
        """Keep exactly one timer while a flow waits, none otherwise.

        The timer runs in the AsyncTool of a waiting flow (its host): that tool is running for
        as long as the flow waits. When the host leaves the queue, the timer moves to another
        waiting flow's tool.
        """
        host = self._timer_host
        if host is not None and host.state is QUEUED:
            return
        timer = self._timer
        if timer is not None:
            self._timer = None
            timer.cancel()
        self._timer_host = None
        for waiter in self._queue:
            asi = waiter.asi
            if asi is not None and asi:
                tool = asi.tool
                end = self._period_end
                if tool is None or end is None:  # pragma: no cover - invariants
                    continue
                delay_ms = max(0.0, end - current_time()) * 1000.0
                self._timer = tool.deferred(delay_ms, self._on_timer)
                self._timer_host = waiter
                return

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_host = None
        self._refresh(current_time())
        self._sync_timer()  # still waiting for this period's end (a clock a hair early)


# Final in both builds: declared so in ``_throttle.pxd``, refused here in the pure one (``_final``).
refuse_subclasses(Throttle)
