"""The wait queue under the synchronisation primitives (as trio's ``ParkingLot`` under its locks).

:class:`Mutex` and :class:`Throttle` each keep one :class:`WaitQueue`: the FIFO of their waiters,
its length limit (``max_queue``, or a Limiter's ``max_queue``/``burst``), the refusal of an entry
that would exceed it, and the count of refusals. :class:`Limiter` gives the two queues it builds
its own ``error_info``. What a waiter is and how it is let in stays with each primitive.

A waiter is an AsyncSteps *flow* (its waiting step goes on when it is let in) or a plain AnyIO
*task* (it waits on an event of its own). Its state decides, when it is cancelled or fails,
whether it leaves the queue or gives its place back: this is what keeps "no permit lost or
doubled" under any interleaving.
"""

from __future__ import annotations

from collections import deque
from contextlib import suppress
from typing import Final, Generic, TypeVar

from ._errors import Errors, FutoInError

__all__ = ("DONE", "HELD", "NEW", "QUEUED", "WaitQueue", "state_name")

# Waiter states.
NEW: Final = 0  # created, neither queued nor inside
QUEUED: Final = 1  # in the primitive's queue
HELD: Final = 2  # let in: a Mutex permit is held, or a Throttle entry is counted
DONE: Final = 3  # gone: released, left the queue, or skipped as out of service

_STATE_NAMES: Final = ("new", "queued", "held", "done")


def state_name(state: int) -> str:
    """The name of a waiter state, for ``repr()``."""
    return _STATE_NAMES[state]


_W = TypeVar("_W")


class WaitQueue(deque[_W], Generic[_W]):
    """The FIFO of a primitive's waiters, with its length limit and its refusals.

    A :class:`collections.deque` (``append()``, ``popleft()``, ``len()`` and iteration are the
    deque's own, at no extra cost on the hot path) plus the limit: :meth:`full` says whether a
    newcomer must be refused, :meth:`reject` / :meth:`rejection` refuse it and count it.
    """

    __slots__ = ("limit", "reject_info", "rejected")

    def __init__(self, limit: int | None, reject_info: str) -> None:
        super().__init__()
        #: How many may wait; ``None``: no limit.
        self.limit = limit
        #: ``error_info`` of a refusal: it names the limit.
        self.reject_info = reject_info
        #: Entries refused since the primitive was created.
        self.rejected = 0

    def full(self) -> bool:
        """Whether one more waiter would exceed the limit."""
        limit = self.limit
        return limit is not None and len(self) >= limit

    def rejection(self) -> FutoInError:
        """Refuse a flow or a task: count it and return its ``DefenseRejected`` error.

        A task raises it; a flow's entry step hands it to its flow (``_hooks.refuse``), which
        unwinds it as if the step had raised it: no traceback is made inside the engine, whose
        frames would each cost an object (``promise()`` raising it starts its traceback).
        """
        self.rejected += 1
        return FutoInError(Errors.DefenseRejected, self.reject_info)

    def discard(self, waiter: _W) -> None:
        """Take a waiter out of the queue, if it is still there (a grant may have skipped it)."""
        with suppress(ValueError):
            self.remove(waiter)

    def __repr__(self) -> str:
        return f"<WaitQueue waiting={len(self)} limit={self.limit}>"
