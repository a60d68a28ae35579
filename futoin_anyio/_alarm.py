"""Alarms: the ``set_timeout()`` of a flow awaited inline expires by the engine's own hand, with
its reason.

A cancel scope whose deadline expires is cancelled by the event loop with no reason of ours:
trio's ``Cancelled`` says ``deadline`` (trio has no way to attach a reason to a deadline: its
``CancelReason`` is private, and a reason put on our scope beforehand would also label a
cancellation of the caller's scopes), AnyIO's says ``deadline exceeded``. So the scope an inline
run awaits its coroutine steps in has no deadline; an *alarm* wakes the driver at the flow's
nearest ``set_timeout()`` deadline instead, and the timeout's own handler cancels the scope with
``set_timeout(100 ms) of step fetch_orders`` — as it cancels the scope of a coroutine step that
runs as a task. Both paths tell one story, and the caller's own cancellation keeps its reason.

* asyncio: ``loop.call_at()``, which is what AnyIO's deadline scope arms itself.
* trio: one system task per ``trio.run`` (started at the first alarm, ended with the run's system
  tasks) sleeps in a cancel scope whose deadline is the nearest alarm's. Arming one is a heap push
  (and a new deadline for that scope when it is the nearest); disarming it drops what it holds
  and leaves the deadline: woken at the time of an alarm that is gone, the task finds nothing due
  and sleeps on until the next live one. Under concurrent requests each armed and disarmed in
  turn, that is one wake per stale deadline instead of a deadline moved per request.

Nothing here runs without a ``set_timeout()`` over an inline coroutine step, and nothing of it
fires unless the timeout does.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from contextvars import Context
from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the stand-in's typed decorators
    from . import _nocython as cython
else:
    try:
        import cython
    except ImportError:  # its decorators are no-ops in the pure build
        from . import _nocython as cython

__all__ = ("TASK_NAME", "Alarm", "arm")

#: The name of the one system task per trio run that sleeps until the nearest alarm. A service of
#: the run, like trio's own system tasks: it holds no root, and ends with the run.
TASK_NAME = "futoin_anyio timeout alarms"

logger = logging.getLogger("futoin_anyio")


@cython.freelist(128)
@cython.cclass
class Alarm:
    """One armed alarm: calls ``due()`` at ``when`` (the event loop's clock) unless disarmed."""

    __slots__ = ("_handle", "_sleeper", "due", "when")

    def __init__(self, when: float, due: Callable[[], object]) -> None:
        self.when = when
        self.due: Callable[[], object] | None = due
        self._handle: Any = None  # asyncio's TimerHandle
        self._sleeper: _Sleeper | None = None  # trio's: the run's sleeper that holds it

    def disarm(self) -> None:
        """It will not fire (a no-op once it has)."""
        if self.due is None:
            return
        self.due = None
        handle = self._handle
        if handle is not None:
            self._handle = None
            handle.cancel()
        else:
            sleeper = self._sleeper
            if sleeper is not None:
                self._sleeper = None
                # The sleeping task's deadline stays, even when this was the nearest alarm: a
                # deadline moved costs a trio scope's bookkeeping (about ten calls) at every
                # disarm, where a task woken for nothing goes back to sleep until the next live
                # alarm once per stale deadline (a disarmed alarm is most often the nearest: the
                # first armed is the first done).
                sleeper.live -= 1

    def _fire(self) -> None:
        due = self.due
        if due is None:
            return
        self.due = None
        self._handle = None
        try:
            due()
        except Exception:  # pragma: no cover - the engine's own handler; never break the loop
            logger.exception("futoin_anyio: a timeout's alarm raised")


def arm(library: str, loop: Any, when: float, due: Callable[[], object]) -> Alarm:
    """An alarm calling ``due()`` at ``when``, on the event loop's thread. ``loop`` is the
    running asyncio loop, or on trio the run's token (``trio.lowlevel.current_trio_token()``,
    which tells its run's sleeper without a look-up)."""
    alarm = Alarm(when, due)
    if library == "asyncio":
        alarm._handle = loop.call_at(when, alarm._fire)
    else:
        _trio_arm(alarm, loop)
    return alarm


# -- trio: one sleeping system task per run ------------------------------------------------------

_run_var: Any = None


class _Sleeper:
    """The alarms of one trio run and the system task that fires them."""

    __slots__ = ("deadline", "heap", "live", "scope", "seq", "token")

    def __init__(self, token: Any) -> None:
        self.token = token  # the run's TrioToken: which run this sleeper serves
        self.heap: list[tuple[float, int, Alarm]] = []
        self.live = 0  # alarms armed and neither fired nor disarmed
        self.seq = 0
        self.scope: Any = None  # the cancel scope the task sleeps in, while it sleeps
        self.deadline = math.inf  # that scope's deadline (read without trio's property)

    def _top(self) -> float:
        """The nearest live alarm's time, dropping disarmed ones from the top."""
        heap = self.heap
        while heap and heap[0][2].due is None:
            heappop(heap)
        return heap[0][0] if heap else math.inf

    async def run(self) -> None:
        trio = sys.modules["trio"]
        heap = self.heap
        while True:
            deadline = self.deadline = self._top()
            with trio.CancelScope(deadline=deadline) as scope:
                self.scope = scope
                await trio.sleep_forever()
            self.scope = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                alarm = heappop(heap)[2]
                if alarm.due is not None:
                    self.live -= 1
                    alarm._sleeper = None
                    alarm._fire()


#: The sleeper of the run that armed an alarm last (a run's token tells it without RunVar).
_last: _Sleeper | None = None


def _sleeper(token: Any) -> _Sleeper:
    global _run_var, _last
    sleeper = _last
    if sleeper is not None and sleeper.token is token:
        return sleeper
    trio = sys.modules["trio"]
    if _run_var is None:
        _run_var = trio.lowlevel.RunVar("futoin_anyio_alarms")
    sleeper = _run_var.get(None)
    if sleeper is None:
        sleeper = _Sleeper(token)
        _run_var.set(sleeper)
        # A fresh context: the task serves every flow of the run, none of whose context it
        # should carry (nor keep alive).
        trio.lowlevel.spawn_system_task(sleeper.run, name=TASK_NAME, context=Context())
    _last = sleeper
    return sleeper


def _trio_arm(alarm: Alarm, token: Any) -> None:
    sleeper = alarm._sleeper = _sleeper(token)
    sleeper.seq += 1
    sleeper.live += 1
    heap = sleeper.heap
    if len(heap) > 2 * sleeper.live + 64:
        # Disarmed alarms outnumber live ones: rebuild without them (amortised O(1) per alarm,
        # as the driver's own timer heap is pruned).
        heap[:] = [entry for entry in heap if entry[2].due is not None]
        heapify(heap)
    heappush(heap, (alarm.when, sleeper.seq, alarm))
    scope = sleeper.scope
    if scope is not None and alarm.when < sleeper.deadline:
        sleeper.deadline = scope.deadline = alarm.when
