"""``promise_as()``: ``await asi.promise()`` typed by its result, for type checkers."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from ._steps import AsyncSteps

__all__ = ("promise_as",)

T = TypeVar("T")


async def promise_as(root: AsyncSteps, result_type: type[T], /) -> T:
    """Run ``root`` as ``await root.promise()`` does, and return its result as a ``result_type``.

    ``promise()`` returns what the last step passed to ``success()``, which no type checker can
    follow through the steps, so it is typed ``Any``. This helper checks the result with
    ``isinstance(result, result_type)`` and is typed by it::

        total: int = await promise_as(root, int)

    A result of another type raises ``TypeError`` naming both (the root has completed by then).
    Errors, ``cancel()`` and the caller's cancellation behave as in ``promise()``. For a root
    that succeeds with several values use ``tuple``.
    """
    if not isinstance(result_type, type):
        raise TypeError(f"promise_as(): result_type must be a class, got {result_type!r}")
    result = await root.promise()
    if not isinstance(result, result_type):
        raise TypeError(f"promise_as(): the root's result is a {type(result).__name__}, "
                        f"expected {result_type.__name__}: {result!r}")
    return result
