"""Shared pieces of the benchmark harness: sizes, results, errors, timing."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

#: Scenario order in tables and charts.
SCENARIOS: Final = (
    "seq",
    "chain",
    "instances",
    "parallel",
    "mutex",
    "errors",
    "c_steps",
    "waiting_mem",
)

#: Problem sizes. ``chain`` runs at two sizes to show that the cost per step is flat.
SIZES: Final[dict[str, dict[str, list[int]]]] = {
    "full": {
        "seq": [1_000_000],
        "chain": [20_000, 200_000],
        "instances": [100_000],
        "parallel": [10_000],
        "mutex": [10_000],
        "errors": [100_000],
        "c_steps": [100_000],
        "waiting_mem": [10_000],
    },
    "quick": {
        "seq": [50_000],
        "chain": [2_000, 20_000],
        "instances": [10_000],
        "parallel": [2_000],
        "mutex": [2_000],
        "errors": [10_000],
        "c_steps": [10_000],
        "waiting_mem": [2_000],
    },
    # For tests/test_benchmarks_quick.py: checks that every scenario verifies, not speed.
    "tiny": {
        "seq": [500],
        "chain": [50, 500],
        "instances": [100],
        "parallel": [50],
        "mutex": [50],
        "errors": [100],
        "c_steps": [100],
        "waiting_mem": [50],
    },
}

#: Unit of each scenario's figure; ``B/root`` is the only lower-is-better unit.
UNITS: Final = {
    "seq": "steps/s",
    "chain": "steps/s",
    "instances": "roots/s",
    "parallel": "branches/s",
    "mutex": "roots/s",
    "errors": "errors/s",
    "c_steps": "steps/s",
    "waiting_mem": "B/root",
}


def fmt_value(value: float, unit: str) -> str:
    """A figure for a table cell: bytes as they are, a rate in k or M."""
    if unit == "B/root":
        return f"{value:,.0f}"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e3:
        return f"{value / 1e3:.1f} k"
    return f"{value:.0f}"


def lower_is_better(scenario: str) -> bool:
    """Return whether a smaller figure is better for *scenario* (memory)."""
    return UNITS[scenario] == "B/root"


class VerificationError(AssertionError):
    """A scenario computed a wrong result: its figure must not be posted."""


class NotAvailable(Exception):
    """The implementation cannot run this scenario (missing feature or tool)."""


def check(cond: bool, message: str) -> None:
    """Raise :class:`VerificationError` unless *cond* (``assert`` vanishes under ``-O``)."""
    if not cond:
        raise VerificationError(message)


@dataclass(frozen=True)
class Measurement:
    """One verified run of one scenario at one size."""

    value: float
    seconds: float


def rate(n: int, seconds: float) -> Measurement:
    """Throughput measurement of *n* operations done in *seconds*."""
    return Measurement(n / max(seconds, 1e-9), seconds)


#: A scenario: ``await scenario(n)`` does the work for size *n*, verifies it, measures it.
Scenario = Callable[[int], Awaitable[Measurement]]

now = time.perf_counter
