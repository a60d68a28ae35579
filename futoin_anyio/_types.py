"""The callback types and the ISync protocol (FTN12 §2.1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from ._steps import AsyncSteps

__all__ = ("CancelHandler", "ErrorHandler", "ISync", "StepFunc")

#: ``func(asi, *args)``: a step. May be ``async def``.
StepFunc: TypeAlias = Callable[..., object]
#: ``onerror(asi, code)``: an error handler.
ErrorHandler: TypeAlias = Callable[["AsyncSteps", str], object]
#: ``oncancel(asi)``: a cancel handler.
CancelHandler: TypeAlias = Callable[["AsyncSteps"], object]
_Item: TypeAlias = "StepFunc | tuple[StepFunc, ErrorHandler | None]"


@runtime_checkable
class ISync(Protocol):
    """The synchronisation protocol of FTN12 §1.11.3: ``obj.sync(asi, func, onerror)``.

    Runtime-checkable: ``isinstance(obj, ISync)`` is true for any object with a ``sync()``
    method (Mutex, Throttle, Limiter, the Redis primitives, a class of your own).

    An implementation adds steps to ``asi`` that enter its critical section, run ``func`` with the
    incoming success arguments, leave the section and pass ``func``'s result on.
    """

    def sync(self, asi: AsyncSteps, func: StepFunc, onerror: ErrorHandler | None = None) -> object:
        """Add steps to ``asi`` that run ``func`` inside this object's critical section.

        ``func`` receives the incoming success arguments and its results go on to the next
        step; ``onerror`` is ``func``'s error handler. A cancelled or failed entry must give its
        place back.
        """
