"""The callback types and the ISync protocol (FTN12 §2.1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from ._steps import AsyncSteps

__all__ = ("CancelHandler", "ErrorHandler", "ForEachFunc", "ISync", "LoopFunc", "RepeatFunc",
           "StepFunc", "VariadicStep")


class VariadicStep(Protocol):
    """A step that takes any number of success arguments: ``def step(asi, *args)``."""

    def __call__(self, asi: AsyncSteps, /, *args: Any) -> object: ...


#: ``func(asi, *args)``: a step. May be ``async def``.
#:
#: A union of callables of each arity (up to six success arguments, and ``*args``) rather than
#: ``Callable[..., object]``: type checkers then know the type of ``asi`` in a lambda step
#: (pyright picks the member whose arity matches the lambda), and check a ``def`` step's first
#: parameter. Success arguments are ``Any``: the previous step decides them at run time.
StepFunc: TypeAlias = (
    Callable[["AsyncSteps"], object]
    | Callable[["AsyncSteps", Any], object]
    | Callable[["AsyncSteps", Any, Any], object]
    | Callable[["AsyncSteps", Any, Any, Any], object]
    | Callable[["AsyncSteps", Any, Any, Any, Any], object]
    | Callable[["AsyncSteps", Any, Any, Any, Any, Any], object]
    | Callable[["AsyncSteps", Any, Any, Any, Any, Any, Any], object]
    | VariadicStep
)
#: ``func(asi)``: the body of ``loop()``.
LoopFunc: TypeAlias = Callable[["AsyncSteps"], object]
#: ``func(asi, i)``: the body of ``repeat()``.
RepeatFunc: TypeAlias = Callable[["AsyncSteps", int], object]
#: ``func(asi, key, value)``: the body of ``for_each()``.
ForEachFunc: TypeAlias = Callable[["AsyncSteps", Any, Any], object]
#: ``onerror(asi, code)``: an error handler.
ErrorHandler: TypeAlias = Callable[["AsyncSteps", str], object]
#: ``oncancel(asi)``: a cancel handler.
CancelHandler: TypeAlias = Callable[["AsyncSteps"], object]
#: A queued step, as the engine keeps it (it calls it with whatever arguments came).
_Item: TypeAlias = "Callable[..., object] | tuple[Callable[..., object], ErrorHandler | None]"


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
