"""Shared parts of the synchronisation primitives (:class:`Mutex`, :class:`Throttle`,
:class:`Limiter`, and the Redis ones): argument checks, the thread rule and the key of a plain
AnyIO task. The wait queue and the waiter states are in ``_waitqueue``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from anyio import get_current_task

from ._errors import Errors, FutoInError

__all__ = ()

def enter_thread(owner: str, prim: Any, thread: int | None, idle: bool) -> None:
    """An entry on a thread other than the primitive's last one: it moves to this thread if
    nothing holds or waits on it, else ``RuntimeError`` (a primitive is not thread-safe)."""
    if not idle:
        raise RuntimeError(
            f"{owner} entered from another thread while in use on its event loop's thread: "
            "use a primitive from the thread of one event loop at a time")
    prim._thread = thread


def check_count(owner: str, name: str, value: object, minimum: int) -> int:
    """An ``int`` argument ``>= minimum``; ``bool`` is not a count."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{owner}: {name} must be >= {minimum}, got {value}")
    return value


def check_name(owner: str, name: object) -> str | None:
    """A primitive's optional name (shown by the flow dump and ``repr()``)."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{owner}: name must be a str, got {type(name).__name__}")
    return name


def label(kind: str, name: str | None) -> str:
    """``Limiter 'db'``: how the flow dump names a primitive."""
    return kind if name is None else f"{kind} {name!r}"


def check_queue(owner: str, name: str, value: object) -> int | None:
    """A queue limit: ``None`` (unlimited) or an ``int >= 0``."""
    if value is None:
        return None
    return check_count(owner, name, value, 0)


def check_period(owner: str, name: str, value: object) -> float:
    """A period in milliseconds: a finite number ``> 0``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}: {name} must be a number of milliseconds, "
                        f"got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a finite number > 0, got {value!r}")
    return float(value)


def task_key() -> tuple[str, int]:
    """The owner key of the current AnyIO task (flows are keyed by their flow object)."""
    return ("task", get_current_task().id)


def rejected(info: str) -> FutoInError:
    """The ``DefenseRejected`` error of a full queue; ``info`` names the limit."""
    return FutoInError(Errors.DefenseRejected, info)


def lazy_binary(obj: object) -> Any:
    """The ``FutoInSync *`` of ``obj`` (the binary bridge is imported only when needed)."""
    from .binary import _bridge

    sync_binary_of: Callable[[object], Any] = _bridge.sync_binary_of
    return sync_binary_of(obj)
