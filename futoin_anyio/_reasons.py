"""Why the library cancels: the reasons its cancel scopes carry, and the ``info`` of ``Timeout``.

Every cancel scope the engine cancels is cancelled with a reason naming the cause (trio's
``CancelScope.cancel(reason)``, AnyIO's since 4.16): ``root.cancel()`` (or the user's own
reason), ``sibling branch failed with NotFound``, ``parallel step unwound by Timeout``,
``set_timeout(100 ms) of step fetch_orders``. A ``set_timeout()`` that expires is never left to
a scope's deadline (which carries no reason of ours): its handler cancels the scope of the
coroutine step it interrupts with the text that is also the ``Timeout`` error's ``info``, on both
paths (a task of its own, or awaited inline: see ``_alarm``).

Nothing here runs unless something is cancelled: the hot path pays nothing for reasons.
"""

from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING, Any

from ._frame import SWITCHES

if TYPE_CHECKING:
    from ._flow import _Flow
    from ._steps import AsyncSteps

__all__ = ("cancel_scope", "flow_reason", "step_name", "timeout_info")


def step_name(func: object) -> str:
    """A step's name for people: its callable's ``__qualname__`` (a loop or sync step names
    the body it runs)."""
    inner = getattr(func, "func", None)  # _Loop, _SyncStep, sync entries: the user's body
    if inner is not None and callable(inner) and not hasattr(func, "__qualname__"):
        func = inner
    name = getattr(func, "__qualname__", None)
    if name is None:
        name = type(func).__qualname__
    return str(name)


def timeout_info(frame: AsyncSteps, timeout_ms: float) -> str:
    """``set_timeout(100 ms) of step fetch_orders``: the ``info`` of the Timeout error."""
    return f"set_timeout({timeout_ms:.15g} ms) of step {step_name(frame._func)}"


#: A new number per cancel: ``next()`` of a ``count`` is one C call, so a cancel on one event
#: loop's thread never writes back a number another thread's cancel has already passed (``+= 1``
#: could, between its read and its write).
_cancel_numbers = count(1)


def cancel_scope(scope: Any, reason: str) -> None:
    """``scope.cancel(reason)``; a backend whose ``cancel()`` takes no reason (AnyIO < 4.16)
    is cancelled without one. Every cancel of the engine's goes through here, and changes
    ``SWITCHES.cancels``."""
    SWITCHES.cancels = next(_cancel_numbers)
    try:
        scope.cancel(reason)
    except TypeError:  # pragma: no cover - AnyIO < 4.16
        scope.cancel()


def flow_reason(flow: _Flow, default: str) -> str:
    """The reason a flow is being cancelled, set by whoever started the cancel."""
    reason: str | None = getattr(flow, "cancel_reason", None)
    return reason if reason is not None else default
