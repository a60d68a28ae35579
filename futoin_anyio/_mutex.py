"""Mutex: at most ``max`` flows (or tasks) inside a critical section (FTN12 §1.11.1, §2.3)."""

from __future__ import annotations

from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, final

from anyio import Event
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from ._engine import AsyncSteps, flow_key, go_on_with, on_exit
from ._errors import Errors
from ._sync_common import (
    DONE,
    HELD,
    NEW,
    QUEUED,
    check_count,
    check_queue,
    check_section,
    lazy_binary,
    rejected,
    task_key,
)
from ._types import ErrorHandler, StepFunc, _Item

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


class _Waiter:
    """One entry into the Mutex: a flow's ``sync()`` step, or one ``async with``.

    For a flow it is also the exit hook of the entry's step: called when that step leaves the
    stack, however it ends, it leaves the queue or gives the place back.
    """

    __slots__ = ("args", "asi", "event", "item", "key", "mutex", "state")

    def __init__(self, mutex: Mutex, key: object) -> None:
        self.mutex = mutex
        self.key = key
        self.state = NEW
        self.asi: AsyncSteps | None = None  # the waiting step of a queued flow
        self.args: tuple[Any, ...] = ()  # its incoming arguments, for the section
        self.item: _Item | None = None  # the section, queued when the flow is let in
        self.event: Event | None = None  # the Event of a queued task

    def __call__(self) -> None:
        """The entry's step ended, however: leave the queue, or give the place back."""
        state = self.state
        self.state = DONE
        if state is QUEUED:
            self.asi = None
            self.mutex._dequeue(self)
        elif state is HELD:
            self.mutex._release(self.key)

    def __repr__(self) -> str:
        return f"<Mutex entry {('new', 'queued', 'held', 'done')[self.state]}>"


class _Section:
    """The step ``sync()`` adds: enter now, or wait for a turn; then the critical section runs
    as its one sub-step, and the entry leaves when the step ends."""

    __slots__ = ("func", "item", "mutex", "onerror")

    def __init__(self, mutex: Mutex, func: StepFunc, onerror: ErrorHandler | None) -> None:
        self.mutex = mutex
        self.func = func
        self.onerror = onerror
        self.item: _Item = func if onerror is None else (func, onerror)

    def __call__(self, asi: AsyncSteps, *args: Any) -> None:
        mutex = self.mutex
        key = flow_key(asi)
        waiter = _Waiter(mutex, key)
        on_exit(asi, waiter)
        if mutex._acquire_nowait(key):
            waiter.state = HELD
            # Sub-steps start with no arguments: hand the incoming ones on to the section.
            if args:
                asi.success_step(*args)
            asi.add(self.func, self.onerror)
            return
        if mutex._full():
            mutex._rejected += 1
            asi.error(Errors.DefenseRejected, mutex._reject_info)
        # Wait in this step: when let in, it goes on with the section (``_grant``).
        waiter.asi = asi
        waiter.args = args
        waiter.item = self.item
        waiter.state = QUEUED
        mutex._queue.append(waiter)
        asi.wait_external()

    def __repr__(self) -> str:
        return f"<Mutex.sync {self.func!r}>"


@final
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

    The primitive is not thread-safe: use it from the thread of one event loop.

    :param max: how many flows may be inside at once (``>= 1``).
    :param max_queue: how many may wait (``>= 0``); ``None`` for no limit.
    :raises TypeError: if an argument is not an ``int`` (or ``None`` for ``max_queue``).
    :raises ValueError: if ``max < 1`` or ``max_queue < 0``.
    """

    __slots__ = ("__weakref__", "_held", "_max", "_max_queue", "_owners", "_queue", "_reject_info",
                 "_rejected")

    def __init__(self, max: int = 1, max_queue: int | None = None) -> None:
        self._max = check_count("Mutex", "max", max, 1)
        self._max_queue = check_queue("Mutex", "max_queue", max_queue)
        self._held = 0
        self._rejected = 0
        #: ``error_info`` of a rejection (a Limiter names its own limit here).
        self._reject_info = "Mutex queue limit (max_queue) reached"
        self._owners: dict[object, int] = {}
        self._queue: deque[_Waiter] = deque()

    # -- ISync ------------------------------------------------------------------------------------

    def sync(self, asi: AsyncSteps, func: StepFunc, onerror: ErrorHandler | None = None) -> None:
        """Add a step to ``asi`` that runs ``func`` inside this Mutex (FTN12 §1.11.3).

        ``func`` receives the incoming success arguments; its result goes to the following step
        as if there were no Mutex. ``onerror`` is ``func``'s error handler. A full queue fails
        the added step with ``DefenseRejected``.
        """
        check_section("Mutex", func, onerror)
        asi.add(_Section(self, func, onerror))

    # -- plain AnyIO ------------------------------------------------------------------------------

    async def __aenter__(self) -> None:
        key = task_key()
        await checkpoint_if_cancelled()
        if self._acquire_nowait(key):
            await cancel_shielded_checkpoint()
            return
        if self._full():
            self._rejected += 1
            raise rejected(self._reject_info)
        waiter = _Waiter(self, key)
        event = waiter.event = Event()
        waiter.state = QUEUED
        self._queue.append(waiter)
        try:
            await event.wait()
        except BaseException:
            if waiter.state is QUEUED:
                waiter.state = DONE
                self._dequeue(waiter)
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
        return MutexStatistics(held=self._held, waiting=len(self._queue),
                               rejected=self._rejected, max=self._max, max_queue=self._max_queue)

    def binary(self) -> Any:
        """The ``FutoInSync *`` of this Mutex for C code (see :mod:`futoin_anyio.binary`)."""
        return lazy_binary(self)

    def __repr__(self) -> str:
        return (f"<Mutex max={self._max} max_queue={self._max_queue} held={self._held} "
                f"waiting={len(self._queue)}>")

    # -- internals (also used by Limiter) ---------------------------------------------------------

    def _full(self) -> bool:
        limit = self._max_queue
        return limit is not None and len(self._queue) >= limit

    def _acquire_nowait(self, key: object) -> bool:
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
            asi = waiter.asi
            if asi is not None:
                waiter.asi = None
                item = waiter.item
                assert item is not None
                args = waiter.args
                waiter.args = ()
                if not go_on_with(asi, item, args):
                    waiter.state = DONE  # no longer waiting: about to be unwound or cancelled
                    continue
                waiter.state = HELD
                self._held += 1
                owners[waiter.key] = 1
            else:
                waiter.state = HELD
                self._held += 1
                owners[waiter.key] = 1
                assert waiter.event is not None
                waiter.event.set()

    def _dequeue(self, waiter: _Waiter) -> None:
        with suppress(ValueError):  # already skipped by _grant()
            self._queue.remove(waiter)
