"""Instruments: hooks into the life of roots, in the style of ``trio.abc.Instrument``.

An :class:`Instrument` is told when a root starts and ends (with its outcome), when a step
fails (with the code), when the library cancels a root or its branches (with the reason), when
a ``set_timeout()`` expires, and when a flow waits for, enters or leaves a sync primitive.
Register one for every root of the process (:func:`add_instrument`) or for the roots
executed in one :class:`~futoin_anyio.AsyncTool` (``add_instrument(inst, tool=tool)``).

With none registered, the engine tests one module attribute at each of these points and calls
nothing. An instrument that raises is logged and removed, as trio does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._reasons import step_name

if TYPE_CHECKING:
    from ._driver import _Driver
    from ._flow import _Flow
    from ._steps import AsyncSteps

__all__ = ("Instrument", "add_instrument", "remove_instrument")

logger = logging.getLogger("futoin_anyio")

#: True while any instrument is registered, globally or on a tool: the one test the engine makes.
ACTIVE = False
#: True once the flow dump asked for times (``dump.record_times()``): a waiting root and a queued
#: sync entry then note when they began to wait (a clock read each), for its ages and waits.
TIMES = False
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


def _check(instrument: object) -> None:
    if not isinstance(instrument, Instrument):
        raise TypeError("an instrument must be an instance of futoin_anyio.Instrument, got "
                        f"{type(instrument).__name__}")


def add_instrument(instrument: Instrument, tool: Any = None) -> None:
    """Register ``instrument`` for every root, or only for the roots executed in ``tool``.

    Any thread (a registration is one list append). Adding it twice is a no-op.
    """
    global ACTIVE, _tools
    _check(instrument)
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
    ACTIVE = True


def remove_instrument(instrument: Instrument, tool: Any = None) -> None:
    """Unregister ``instrument`` (globally, or from ``tool``); a no-op if it is not there."""
    global ACTIVE, _tools
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
    ACTIVE = bool(_global) or _tools > 0


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


# -- the engine's calls (only when ACTIVE) -----------------------------------------------------


def started(root: AsyncSteps, driver: _Driver, awaited: bool) -> None:
    queue = root._queue
    if type(root._func) is str:  # the name it was given
        name = root._func
    elif queue:
        item = queue[-1] if root._flow is not None else queue[0]  # a started root's is reversed
        name = step_name(item[0] if type(item) is tuple else item)
    else:
        name = "(no step)"
    _call(driver, "root_started", root, name, awaited)


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
