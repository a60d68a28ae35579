"""Flows of the roots that started while instruments were registered or the flow dump was timing
(``SWITCHES.hooked``): what they pay for, and only they.

A plain :class:`~._flow._Flow` carries nothing for instruments or the dump: the choice is the
flow's class, made once when its root starts (parallel branches take the class of the flow they
branch from).

* :class:`_HookedFlow` keeps the root's first step (its name for people, unless given one) and,
  while the dump is timing, when it started (``since``, for its age); it tells instruments when
  an executed root ends.
* :class:`_TracedFlow` also brackets every way the engine enters the flow from its AsyncTool's
  task — a run of its steps, an error or a timeout unwinding it, a cancel — with the
  ``before_root_run`` / ``after_root_run`` of the instruments that override them. A root started
  with ``execute()`` runs in the tool's task, in turns with the tool's other roots, so nothing of
  the context its caller had (an OpenTelemetry span, say) is current there otherwise; the tasks
  of its ``async def`` steps, started inside a bracket, copy the context set there.
"""

from __future__ import annotations

from time import monotonic
from typing import TYPE_CHECKING

from . import _instrument as _ins
from ._flow import _Flow
from ._frame import SWITCHES

if TYPE_CHECKING:
    from ._instrument import Instrument
    from ._parallel import _ParallelRun
    from ._steps import AsyncSteps
    from ._tool import AsyncTool

__all__ = ("_HookedFlow", "_TracedFlow", "hooked_flow")


class _HookedFlow(_Flow):
    """A flow of a root started while instruments or the dump's times were on."""

    __slots__ = (
        # The root's first step (its name for people: see _instrument.root_name); dropped when
        # the root ends (a sync entry refers to its flow: no cycle is left behind). A branch
        # has none.
        "first",
        # When the root started (time.monotonic()), while the dump is timing: its age.
        "since",
    )

    first: object
    since: float

    def _root_done(self) -> None:
        self.first = None
        _Flow._root_done(self)
        if self.executed and SWITCHES.active:  # a promise() root's end is told by promise()
            _ins.ended(self.root, self.driver, self.result_code)


class _TracedFlow(_HookedFlow):
    """A hooked flow whose every entry from the driver is bracketed by its root's tracers."""

    __slots__ = ("tracers",)

    tracers: tuple[Instrument, ...]

    def __init__(self, driver: AsyncTool, root: AsyncSteps, base: AsyncSteps,
                 par: _ParallelRun | None) -> None:
        _Flow.__init__(self, driver, root, base, par)
        if par is not None:  # a branch: its parent's tracers
            self.tracers = par.frame._flow.tracers  # type: ignore[union-attr]

    def run(self, budget: int) -> int:
        _ins.call_tracers(self.tracers, "before_root_run", self.root)
        try:
            return _Flow.run(self, budget)
        finally:
            _ins.call_tracers(self.tracers[::-1], "after_root_run", self.root)

    def throw(self, code: str, reason: str) -> None:
        _ins.call_tracers(self.tracers, "before_root_run", self.root)
        try:
            _Flow.throw(self, code, reason)
        finally:
            _ins.call_tracers(self.tracers[::-1], "after_root_run", self.root)

    def throw_at(self, frame: AsyncSteps, code: str) -> None:
        _ins.call_tracers(self.tracers, "before_root_run", self.root)
        try:
            _Flow.throw_at(self, frame, code)
        finally:
            _ins.call_tracers(self.tracers[::-1], "after_root_run", self.root)

    def _resume_unwind(self, code: str, label: str | None = None) -> None:
        _ins.call_tracers(self.tracers, "before_root_run", self.root)
        try:
            _Flow._resume_unwind(self, code, label)
        finally:
            _ins.call_tracers(self.tracers[::-1], "after_root_run", self.root)

    def _cancel_frames(self) -> None:
        _ins.call_tracers(self.tracers, "before_root_run", self.root)
        try:
            _Flow._cancel_frames(self)
        finally:
            _ins.call_tracers(self.tracers[::-1], "after_root_run", self.root)

    def cancel_root(self, wait: bool = True, reason: str | None = None) -> None:
        _ins.call_tracers(self.tracers, "before_root_run", self.root)
        try:
            _Flow.cancel_root(self, wait, reason)
        finally:
            _ins.call_tracers(self.tracers[::-1], "after_root_run", self.root)


def hooked_flow(driver: AsyncTool, root: AsyncSteps, executed: bool) -> _HookedFlow:
    """The flow of a root starting while ``SWITCHES.hooked``: traced if it is ``executed``
    and some instrument (registered now, globally or on the tool) overrides the run hooks;
    timed if the dump asked. Its queue is not reversed yet."""
    tracers = _ins.run_tracers(driver) if executed and SWITCHES.active else ()
    flow: _HookedFlow
    if tracers:
        flow = _TracedFlow(driver, root, root, None)
        flow.tracers = tracers
    else:
        flow = _HookedFlow(driver, root, root, None)
    queue = root._queue
    flow.first = queue[0] if queue else None
    if SWITCHES.times:
        flow.since = monotonic()  # for the flow dump: the root's age
    return flow
