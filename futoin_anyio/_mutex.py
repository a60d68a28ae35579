"""Mutex: at most ``max`` flows (or tasks) inside a critical section (FTN12 §1.11.1, §2.3)."""

from __future__ import annotations

from dataclasses import dataclass
from threading import get_ident
from time import monotonic
from types import TracebackType
from typing import TYPE_CHECKING, Any, final

from anyio import Event
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from . import _instrument as _ins
from ._driver import _Driver
from ._final import refuse_subclasses
from ._flow import _Flow
from ._frame import SWITCHES
from ._hooks import check_section, flow_key, go_on_with, on_exit, refuse
from ._steps import AsyncSteps
from ._sync_common import (
    check_count,
    check_name,
    check_queue,
    enter_thread,
    label,
    lazy_binary,
    task_key,
)
from ._throttle import _Section as _RateSection
from ._types import ErrorHandler, StepFunc, _Item
from ._waitqueue import DONE, HELD, NEW, QUEUED, WaitQueue, state_name

if TYPE_CHECKING:  # the stand-in's typed decorators
    from . import _nocython as cython
else:
    try:
        import cython
    except ImportError:  # its decorators are no-ops in the pure build
        from . import _nocython as cython

__all__ = ("Mutex", "MutexStatistics")


@final
@dataclass(frozen=True)
class MutexStatistics:
    """A snapshot of a :class:`Mutex`, as returned by :meth:`Mutex.statistics`."""

    #: Flows and tasks inside the critical section (a re-entered one counts once).
    held: int
    #: Flows and tasks waiting in the queue.
    waiting: int
    #: Entries refused with ``DefenseRejected`` since the Mutex was created.
    rejected: int
    #: The ``max`` given to the constructor.
    max: int
    #: The ``max_queue`` given to the constructor (``None``: unlimited).
    max_queue: int | None


@cython.freelist(128)
@cython.cclass
class _Entry:
    """A flow's entry into the Mutex: the step ``sync()`` adds, and the waiter of its run.

    The step enters now, or waits for its turn in itself; then ``func`` runs as its one
    sub-step. The entry is also the step's exit hook: when the step leaves the stack, however
    it ends, the entry leaves the queue or gives its place back. An entry runs once; should a
    cloned model run it again, a fresh copy runs instead.
    """

    # ``since``: when it began to wait (set only then, for the flow dump).
    __slots__ = ("args", "asi", "func", "item", "key", "mutex", "onerror", "since", "state")

    since: float

    def __init__(self, mutex: Mutex, func: StepFunc, onerror: ErrorHandler | None) -> None:
        self.mutex = mutex
        self.func = func
        self.onerror = onerror
        self.item: _Item = func if onerror is None else (func, onerror)
        self.state = NEW
        self.key: object = None  # the flow inside or waiting
        self.asi: AsyncSteps | None = None  # the waiting step of a queued flow
        self.args: tuple[Any, ...] = ()  # its incoming arguments, for ``func``

    # Typed locals: the compiled build reads their fields in C (a step's ``_flow`` and a flow's
    # ``driver`` are untyped fields, their modules importing each other).
    @cython.locals(flow=_Flow, driver=_Driver, section=_RateSection)
    def __call__(self, asi: AsyncSteps, *args: Any) -> None:
        entry = self if self.state is NEW else _Entry(self.mutex, self.func, self.onerror)
        mutex = entry.mutex
        key = entry.key = flow_key(asi)
        flow = asi._flow
        driver = flow.driver  # type: ignore[union-attr]
        if mutex._acquire_nowait(key, driver._thread):
            func = entry.func
            section = func if isinstance(func, _RateSection) else None
            if section is not None:
                # A Limiter's rate check, in this step rather than one of its own. A refusal
                # gives the place back at once: nothing was held, nothing is left to unwind.
                try:
                    entered = section._admit(asi)
                except BaseException:
                    mutex._release(key)
                    entry.key = None  # (as in leave())
                    raise
                if entered is None:  # the rate's queue is full
                    mutex._release(key)
                    entry.state = DONE
                    entry.key = None
                    refuse(asi, section.throttle._queue.rejection())
                    return
            entry.state = HELD
            on_exit(asi, _Entry.leave, entry)
            if SWITCHES.active:
                _ins.sync(asi._flow, "sync_entered", mutex._label)
            if section is not None:
                section._go_on(asi, entered is True, args)
                return
            # Sub-steps start with no arguments: hand the incoming ones on to ``func``.
            if args:
                asi.success_step(*args)
            asi.add(func, entry.onerror)
            return
        queue = mutex._queue
        if queue.full():
            # Refused before it waits or holds anything: no exit hook to run, and the entry
            # lets go of the flow now (as leave() would).
            entry.state = DONE
            entry.key = None
            refuse(asi, queue.rejection())
            return
        on_exit(asi, _Entry.leave, entry)
        # Wait in this step: when let in, it goes on with ``func`` (see ``Mutex._grant``).
        entry.asi = asi
        entry.args = args
        entry.state = QUEUED
        queue.append(entry)
        asi.wait_external()
        if SWITCHES.hooked:  # only for the flow dump and instruments (one test when neither is on)
            if SWITCHES.times:  # (AnyIO's current_time() would cost a backend lookup)
                entry.since = monotonic()
            if SWITCHES.active:
                _ins.sync(asi._flow, "sync_waiting", mutex._label)

    def leave(self) -> None:
        """The entry's step ended, however: leave the queue, or give the place back."""
        state = self.state
        self.state = DONE
        if state is QUEUED:
            self.asi = None
            self.mutex._queue.discard(self)
        elif state is HELD:
            key = self.key
            self.mutex._release(key)
            if SWITCHES.active and isinstance(key, _Flow):
                _ins.sync(key, "sync_left", self.mutex._label)
        # Let go of the flow: a failed root's state keeps its steps' functions
        # (``async_stack``), this entry among them, and the root's error keeps its caller's
        # frame, which keeps the root. Out of that cycle, the flow, its driver and its stack
        # are freed at once (in the compiled build: the pure one's traceback frames keep them).
        self.key = None

    def __repr__(self) -> str:
        return f"<Mutex.sync {self.func!r} {state_name(self.state)}>"


class _TaskWaiter:
    """A plain AnyIO task waiting in the Mutex queue (``async with``)."""

    __slots__ = ("event", "key", "state")

    def __init__(self, key: object) -> None:
        self.key = key
        self.state = QUEUED
        self.event = Event()

    def __repr__(self) -> str:
        return f"<Mutex task entry {state_name(self.state)}>"


class Mutex:
    """Mutual exclusion for AsyncSteps flows and AnyIO tasks (FTN12 §1.11.1, §2.3).

    At most ``max`` flows are inside the critical section at once; the others wait in FIFO
    order. With ``max_queue``, an entry that would make the queue longer than that fails at once
    with ``DefenseRejected``. Use it through ``asi.sync(mutex, func, onerror)``; the same object
    also works from plain AnyIO code as ``async with mutex:``, sharing the same permits, queue
    and limits, so one Mutex protects flows and ordinary tasks together.

    A flow (a root or one parallel branch) that holds the Mutex may enter it again; it leaves
    when every entry has left. Parallel branches are separate flows and inherit no lock. Likewise
    a task may nest ``async with mutex:`` (child tasks inherit nothing). A flow or task that is
    cancelled or fails while waiting leaves the queue; one that is cancelled or fails inside
    releases its place.

    The primitive is not thread-safe: use it from the thread of one event loop at a time (all
    its methods); entering it from another thread while it is held or waited on raises
    ``RuntimeError``.

    :param max: how many flows may be inside at once (``>= 1``).
    :param max_queue: how many may wait (``>= 0``); ``None`` for no limit.
    :param name: a name for people: the flow dump (:mod:`futoin_anyio.dump`) shows it.
    :raises TypeError: if an argument is not an ``int`` (or ``None`` for ``max_queue``).
    :raises ValueError: if ``max < 1`` or ``max_queue < 0``.
    """

    __slots__ = ("__weakref__", "_held", "_label", "_max", "_name", "_owners", "_queue",
                 "_thread")

    def __init__(self, max: int = 1, max_queue: int | None = None, *,
                 name: str | None = None) -> None:
        name = check_name("Mutex", name)
        self._setup(check_count("Mutex", "max", max, 1),
                    WaitQueue(check_queue("Mutex", "max_queue", max_queue),
                              "Mutex queue limit (max_queue) reached"),
                    name, label("Mutex", name))

    @classmethod
    def _with_queue(cls, max: int, queue: WaitQueue[_Entry | _TaskWaiter], name: str | None,
                    what: str) -> Mutex:
        """A Mutex over a wait queue of the caller's (a Limiter names its own limit in it)."""
        self = cls.__new__(cls)
        self._setup(max, queue, name, what)
        return self

    @property
    def name(self) -> str | None:
        """The name given to the constructor (``None``: none)."""
        return self._name

    def _setup(self, max: int, queue: WaitQueue[_Entry | _TaskWaiter], name: str | None,
               what: str) -> None:
        self._name = name
        self._label = what  # "Mutex 'x'", or the Limiter's: what the flow dump says
        self._max = max
        self._held = 0
        self._owners: dict[object, int] = {}
        self._queue = queue
        self._thread = 0  # the thread of the event loop using it (see enter_thread())

    # -- ISync ------------------------------------------------------------------------------------

    def sync(self, asi: AsyncSteps, func: StepFunc, onerror: ErrorHandler | None = None) -> None:
        """Add a step to ``asi`` that runs ``func`` inside this Mutex (FTN12 §1.11.3).

        ``func`` receives the incoming success arguments; its result goes to the following step
        as if there were no Mutex. ``onerror`` is ``func``'s error handler. A full queue fails
        the added step with ``DefenseRejected``.
        """
        check_section("Mutex", func, onerror)
        asi.add(_Entry(self, func, onerror))

    # -- plain AnyIO ------------------------------------------------------------------------------

    async def __aenter__(self) -> None:
        key = task_key()
        await checkpoint_if_cancelled()
        if self._acquire_nowait(key, get_ident()):
            await cancel_shielded_checkpoint()
            return
        queue = self._queue
        if queue.full():
            raise queue.rejection()
        waiter = _TaskWaiter(key)
        queue.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.state is QUEUED:
                waiter.state = DONE
                queue.discard(waiter)
            elif waiter.state is HELD:  # let in, but cancelled before it could resume
                waiter.state = DONE
                self._release(key)
            raise

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._release(task_key(), "Mutex.__aexit__()")

    # -- introspection ----------------------------------------------------------------------------

    def statistics(self) -> MutexStatistics:
        """Return how many flows are inside, how many wait, and how many were rejected."""
        queue = self._queue
        return MutexStatistics(held=self._held, waiting=len(queue), rejected=queue.rejected,
                               max=self._max, max_queue=queue.limit)

    def binary(self) -> Any:
        """The ``FutoInSync *`` of this Mutex for C code (see :mod:`futoin_anyio.binary`)."""
        return lazy_binary(self)

    def __repr__(self) -> str:
        return (f"<Mutex max={self._max} max_queue={self._queue.limit} held={self._held} "
                f"waiting={len(self._queue)}>")

    # -- internals (also used by Limiter) ---------------------------------------------------------

    def _acquire_nowait(self, key: object, thread: int | None) -> bool:
        if thread != self._thread:
            enter_thread("Mutex", self, thread, not self._held and not self._queue)
        owners = self._owners
        count = owners.get(key)
        if count is not None:  # re-entrance by the same flow or task
            owners[key] = count + 1
            return True
        if self._held < self._max:  # a free permit implies an empty queue
            self._held += 1
            owners[key] = 1
            return True
        return False

    def _release(self, key: object, what: str | None = None) -> None:
        owners = self._owners
        count = owners.get(key)
        if count is None:
            raise RuntimeError(f"{what or 'Mutex'}: the Mutex is not held by this task")
        if count > 1:
            owners[key] = count - 1
            return
        del owners[key]
        self._held -= 1
        self._grant()

    def _grant(self) -> None:
        """Hand free permits to the head of the queue."""
        queue = self._queue
        owners = self._owners
        while queue and self._held < self._max:
            waiter = queue.popleft()
            if isinstance(waiter, _Entry):
                asi = waiter.asi
                assert asi is not None
                waiter.asi = None
                args = waiter.args
                waiter.args = ()
                if not go_on_with(asi, waiter.item, args):
                    waiter.state = DONE  # no longer waiting: about to be unwound or cancelled
                    continue
                if SWITCHES.active:
                    _ins.sync(asi._flow, "sync_entered", self._label)
            else:
                waiter.event.set()
            waiter.state = HELD
            self._held += 1
            owners[waiter.key] = 1


# Final in both builds: declared so in ``_mutex.pxd``, refused here in the pure one (``_final``).
refuse_subclasses(Mutex)
