"""Instruments: hooks into the life of roots, in the style of ``trio.abc.Instrument``.

An :class:`Instrument` is told when a root starts and ends (with its outcome), when a step
fails (with the code), when the library cancels a root or its branches (with the reason), when
a ``set_timeout()`` expires, and when a flow waits for, enters or leaves a sync primitive.
Register one for every root of the process (:func:`add_instrument`) or for the roots
executed in one :class:`~futoin_anyio.AsyncTool` (``add_instrument(inst, tool=tool)``).

With none registered, the engine tests one switch (``_frame.SWITCHES.active``) at each of these
points and calls nothing. An instrument that raises is logged and removed, as trio does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._frame import SWITCHES
from ._reasons import step_name

if TYPE_CHECKING:
    from ._driver import _Driver
    from ._flow import _Flow
    from ._steps import AsyncSteps

__all__ = ("Instrument", "add_instrument", "remove_instrument")

logger = logging.getLogger("futoin_anyio")

# The engine's tests (``_frame.SWITCHES``), set here: ``active`` while any instrument is
# registered, globally or on a tool (the one test the engine makes); ``times`` once the flow dump
# asked for times (``dump.record_times()``: a root then notes when it starts, and a queued sync
# entry when it began to wait, a clock read each, for its ages); ``hooked``, ``active or times``,
# the one test a root's start makes.
_global: list[Instrument] = []
_tools = 0  # tools with instruments of their own


class Instrument:
    """The base class of instruments: override the methods you need (each does nothing here).

    Every method is called on the event loop's thread, synchronously, from inside the engine:
    keep it short, and do not call back into the root it is told about. ``root`` is the root
    ``AsyncSteps`` (hashable: a key for what you keep per root until :meth:`root_ended`).
    """

    def root_started(self, root: AsyncSteps, name: str, awaited: bool) -> None:
        """A root starts: ``promise()`` was awaited (``awaited``), or ``execute()`` called. It is
        called in the caller's context (the caller's current span, say, is current here).
        ``name`` is the qualname of its first step.

        An awaited root runs in the awaiting task, and :meth:`root_ended` is called there, in
        the same context: a context variable set here (and reset there) is seen by its steps.
        An executed root runs in its AsyncTool's task, and ends there."""

    def root_ended(self, root: AsyncSteps, outcome: str | None) -> None:
        """A root ended: ``outcome`` is ``None`` on success, else the error code
        (``"Cancelled"`` for a cancelled root). For a ``promise()`` root it is called in the
        awaiting task, in the same context as :meth:`root_started`."""

    def step_failed(self, root: AsyncSteps, step: str, code: str, info: Any) -> None:
        """A step of the root (``step``: its qualname) failed with ``code``; the error starts to
        unwind (its handlers may yet recover). Loop signals are not reported."""

    def cancelled(self, root: AsyncSteps, reason: str) -> None:
        """The library cancels the root, or branches of it: ``reason`` says why (as the cancel
        scopes of its coroutine steps are told)."""

    def timed_out(self, root: AsyncSteps, info: str) -> None:
        """A ``set_timeout()`` of the root expired: ``info`` names the step and the limit."""

    def sync_waiting(self, root: AsyncSteps, what: str) -> None:
        """A flow of the root waits in the queue of ``what`` (``"Limiter 'db'"``...)."""

    def sync_entered(self, root: AsyncSteps, what: str) -> None:
        """A flow of the root entered the section of ``what`` (at once, or after waiting)."""

    def sync_left(self, root: AsyncSteps, what: str) -> None:
        """A flow of the root left the section of ``what``."""

    def before_root_run(self, root: AsyncSteps) -> None:
        """A root started with ``execute()`` is about to run some of its steps in its
        AsyncTool's task (a burst of steps, the unwinding of an error or a timeout, a cancel).

        Such a root has no task of its own: its steps run in the tool's task, in turns with the
        other roots, so a context variable the caller of ``execute()`` had set is not current
        there. Set one here and reset it in :meth:`after_root_run` (called after every call of
        this one, in the same task, with no task switch between): the root's plain steps and
        handlers see it, and so do the tasks of its ``async def`` steps, which copy the context
        when they start. As ``trio.abc.Instrument.before_task_step``, in spirit.

        Called only on instruments whose class overrides it or :meth:`after_root_run`, chosen
        when the root starts, and never for a ``promise()`` root (it runs in the awaiting task,
        in the context :meth:`root_started` was called in)."""

    def after_root_run(self, root: AsyncSteps) -> None:
        """The root's steps stop running for now (see :meth:`before_root_run`)."""


def _check(instrument: object) -> None:
    if not isinstance(instrument, Instrument):
        raise TypeError("an instrument must be an instance of futoin_anyio.Instrument, got "
                        f"{type(instrument).__name__}")


def add_instrument(instrument: Instrument, tool: Any = None) -> None:
    """Register ``instrument`` for every root, or only for the roots executed in ``tool``.

    Any thread (a registration is one list append). Adding it twice is a no-op.
    """
    global _tools
    _check(instrument)
    _broken[:] = [b for b in _broken if b is not instrument]  # registered anew: called again
    if tool is None:
        if instrument not in _global:
            _global.append(instrument)
    else:
        # AsyncTool itself is not imported here (the engine modules import this one).
        if type(tool).__name__ != "AsyncTool" or getattr(tool, "_public", False) is not True:
            raise TypeError(f"tool must be an AsyncTool, got {type(tool).__name__}")
        mine: list[Instrument] | None = getattr(tool, "_instruments", None)
        if mine is None:
            mine = tool._instruments = []
            _tools += 1
        if instrument not in mine:
            mine.append(instrument)
    SWITCHES.active = SWITCHES.hooked = True


def remove_instrument(instrument: Instrument, tool: Any = None) -> None:
    """Unregister ``instrument`` (globally, or from ``tool``); a no-op if it is not there."""
    global _tools
    if tool is None:
        if instrument in _global:
            _global.remove(instrument)
    else:
        mine: list[Instrument] | None = getattr(tool, "_instruments", None)
        if mine is not None and instrument in mine:
            mine.remove(instrument)
            if not mine:
                tool._instruments = None
                _tools -= 1
    SWITCHES.active = bool(_global) or _tools > 0
    SWITCHES.hooked = SWITCHES.active or SWITCHES.times


def record_times(on: bool) -> None:
    """Turn the notes of ``SWITCHES.times`` on or off (``dump.record_times()``)."""
    SWITCHES.times = bool(on)
    SWITCHES.hooked = SWITCHES.active or SWITCHES.times


def _call(driver: _Driver | None, method: str, *args: Any) -> None:
    # A tool's slot is read only while some tool has instruments: reading the unset slot of a
    # promise() driver costs an AttributeError.
    mine: list[Instrument] | None = getattr(driver, "_instruments", None) if _tools else None
    targets = tuple(_global) if not mine else (*_global, *mine)
    for instrument in targets:
        try:
            getattr(instrument, method)(*args)
        except Exception:
            logger.exception("instrument %r raised in %s(); it is removed", instrument, method)
            remove_instrument(instrument)
            if mine is not None and instrument in mine:
                remove_instrument(instrument, driver)


def _overrides_run_hooks(instrument: Instrument) -> bool:
    cls = type(instrument)
    return (cls.before_root_run is not Instrument.before_root_run
            or cls.after_root_run is not Instrument.after_root_run)


def run_tracers(driver: _Driver) -> tuple[Instrument, ...]:
    """The instruments to call around each run of a root executed in ``driver``'s tool."""
    mine: list[Instrument] | None = getattr(driver, "_instruments", None) if _tools else None
    targets = _global if not mine else [*_global, *mine]
    return tuple(i for i in targets if _overrides_run_hooks(i))


def call_tracers(tracers: tuple[Instrument, ...], method: str, root: AsyncSteps) -> None:
    """``before_root_run`` / ``after_root_run`` on each of ``tracers``; one that raises is logged
    and removed (from every registration; this root keeps calling the others)."""
    for instrument in tracers:
        if _broken and any(instrument is b for b in _broken):
            continue
        try:
            getattr(instrument, method)(root)
        except Exception:
            logger.exception("instrument %r raised in %s(); it is removed", instrument, method)
            _broken.append(instrument)
            remove_instrument(instrument)
            tool = getattr(root, "_tool", None)
            if tool is not None and getattr(tool, "_public", False):
                remove_instrument(instrument, tool)


#: Tracers removed because they raised: the roots that chose them call them no more.
_broken: list[Instrument] = []


# -- the engine's calls (only when SWITCHES.active) ---------------------------------------------


def root_name(root: AsyncSteps) -> str:
    """A root's name: the one it was given (``AsyncSteps(name=...)``), else the qualname of its
    first step (kept by its flow once it started, the head of its queue before)."""
    if type(root._func) is str:  # the name it was given
        return root._func
    first = getattr(root._flow, "first", None)
    if first is None:
        queue = root._queue
        if not queue or root._flow is not None:
            return "(no step)"
        first = queue[0]
    return step_name(first[0] if type(first) is tuple else first)


def started(root: AsyncSteps, driver: _Driver, awaited: bool) -> None:
    _call(driver, "root_started", root, root_name(root), awaited)


def ended(root: AsyncSteps, driver: _Driver, outcome: str | None) -> None:
    _call(driver, "root_ended", root, outcome)


def failed(flow: _Flow, frame: AsyncSteps, code: str, info: Any) -> None:
    _call(flow.driver, "step_failed", flow.root, step_name(frame._func), code, info)


def cancelled(flow: _Flow, reason: str) -> None:
    _call(flow.driver, "cancelled", flow.root, reason)


def timed_out(flow: _Flow, info: str) -> None:
    _call(flow.driver, "timed_out", flow.root, info)


def sync(flow: _Flow | None, method: str, what: str) -> None:
    if flow is not None:
        _call(flow.driver, method, flow.root, what)
