"""Limiter: concurrency and rate limits together, for request processing (FTN12 §1.11.7, §2.5)."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any, final

from ._final import refuse_subclasses
from ._hooks import check_section
from ._mutex import Mutex, _Entry
from ._steps import AsyncSteps
from ._sync_common import (
    check_count,
    check_name,
    check_period,
    check_queue,
    label,
    lazy_binary,
    task_key,
)
from ._throttle import Throttle
from ._throttle import _Section as ThrottleSection
from ._types import ErrorHandler, StepFunc
from ._waitqueue import WaitQueue

__all__ = ("Limiter", "LimiterStatistics")


@final
@dataclass(frozen=True)
class LimiterStatistics:
    """A snapshot of a :class:`Limiter`, as returned by :meth:`Limiter.statistics`."""

    #: Flows and tasks inside (holding one of the ``concurrent`` places).
    held: int
    #: Flows and tasks waiting for a place (at most ``max_queue``).
    waiting: int
    #: Flows and tasks holding a place and waiting for the rate (at most ``burst``).
    rate_waiting: int
    #: Entries let in during the current rate period.
    entries: int
    #: Entries refused with ``DefenseRejected``, by either limit, since creation.
    rejected: int


class _Section(ThrottleSection):
    """The critical section of the Limiter's Mutex: the rate check, then ``func``.

    The Throttle's own section step (see :mod:`._throttle`); run within the Mutex entry's step
    when a place is free at once, so an entry that gets in at once adds no step of its own
    before ``func``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<Limiter.sync {self.func!r}>"


class Limiter:
    """Processing limits in one primitive (FTN12 §1.11.7, §2.5): a Mutex and a Throttle.

    An entry first takes one of ``concurrent`` places (at most ``max_queue`` flows wait for
    one), then one of ``rate`` entries per ``period_ms`` (at most ``burst`` flows wait for the
    rate, while holding their place). A full queue fails the entry with ``DefenseRejected``:
    with the defaults, a second flow arriving while one is inside, or a second entry in the
    same second, is rejected. The place is released when the section ends, fails or is
    cancelled.

    Use it through ``asi.sync(limiter, func, onerror)``, or from plain AnyIO code as
    ``async with limiter:``; both share the same limits, so one Limiter protects flows and
    ordinary tasks together. Not thread-safe: use it (all its methods) from the thread of one
    event loop at a time; entering it from another thread while it is in use raises
    ``RuntimeError``.

    :param concurrent: flows inside at once (``>= 1``).
    :param max_queue: flows waiting for a place (``>= 0``); ``None`` for no limit.
    :param rate: entries per period (``>= 1``).
    :param period_ms: the rate period in milliseconds (``> 0``).
    :param burst: flows waiting for the rate (``>= 0``); ``None`` for no limit.
    :param name: a name for people: the flow dump (:mod:`futoin_anyio.dump`) shows it.
    :raises TypeError: if a count is not an ``int`` or the period not a number.
    :raises ValueError: if a count or the period is out of range.
    """

    __slots__ = ("__weakref__", "_mutex", "_throttle")

    def __init__(self, concurrent: int = 1, max_queue: int | None = 0, rate: int = 1,
                 period_ms: float = 1000, burst: int | None = 0, *,
                 name: str | None = None) -> None:
        concurrent = check_count("Limiter", "concurrent", concurrent, 1)
        max_queue = check_queue("Limiter", "max_queue", max_queue)
        rate = check_count("Limiter", "rate", rate, 1)
        period_ms = check_period("Limiter", "period_ms", period_ms)
        burst = check_queue("Limiter", "burst", burst)
        name = check_name("Limiter", name)
        what = label("Limiter", name)
        # The two wait queues name the Limiter's own limits when they refuse an entry.
        self._mutex = Mutex._with_queue(
            concurrent, WaitQueue(max_queue, "Limiter queue limit (max_queue) reached"), name,
            what)
        self._throttle = Throttle._with_queue(
            rate, period_ms, WaitQueue(burst, "Limiter rate queue limit (burst) reached"), name,
            f"{what} (rate)")

    # -- ISync ------------------------------------------------------------------------------------

    def sync(self, asi: AsyncSteps, func: StepFunc, onerror: ErrorHandler | None = None) -> None:
        """Add a step to ``asi`` that runs ``func`` within both limits (FTN12 §1.11.3).

        ``func`` receives the incoming success arguments; its result goes to the following step
        as if there were no Limiter. ``onerror`` is ``func``'s error handler.
        """
        check_section("Limiter", func, onerror)
        asi.add(_Entry(self._mutex, _Section(self._throttle, func, onerror), None))

    # -- plain AnyIO ------------------------------------------------------------------------------

    async def __aenter__(self) -> None:
        mutex = self._mutex
        await mutex.__aenter__()
        try:
            await self._throttle.__aenter__()
        except BaseException:
            mutex._release(task_key())
            raise

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._mutex._release(task_key(), "Limiter.__aexit__()")

    # -- introspection ----------------------------------------------------------------------------

    def statistics(self) -> LimiterStatistics:
        """Return how many are inside, wait for a place, wait for the rate, and were rejected."""
        m = self._mutex.statistics()
        t = self._throttle.statistics()
        return LimiterStatistics(held=m.held, waiting=m.waiting, rate_waiting=t.waiting,
                                 entries=t.entries, rejected=m.rejected + t.rejected)

    def binary(self) -> Any:
        """The ``FutoInSync *`` of this Limiter for C code (see :mod:`futoin_anyio.binary`)."""
        return lazy_binary(self)

    def __repr__(self) -> str:
        return f"<Limiter {self._mutex!r} {self._throttle!r}>"


# Final in both builds: declared so in ``_limiter.pxd``, refused here in the pure one (``_final``).
refuse_subclasses(Limiter)
