"""Quick soak: 10^4 random roots through one AsyncTool and a Limiter leave nothing behind.

The long run (10^6 roots) is by hand: ``python -m benchmarks.soak --roots 1000000``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # ``pytest`` run without ``python -m``
    sys.path.insert(0, str(REPO))

from benchmarks.soak import allowance, run_soak  # noqa: E402


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_quick_soak(backend: str) -> None:
    rep = run_soak(10_000, backend, seed=1, window=1000)
    assert rep.problems() == []
    # Every path was taken: successes, both unhandled codes, cancels, stack() objects.
    assert rep.completed > 5000
    assert set(rep.unhandled) == {"E2", "Timeout"}
    assert rep.cancels_requested > 0
    assert rep.stack_allocated == rep.stack_cleaned > 10_000
    assert rep.sampled_roots > 5 and rep.sampled_roots_alive == 0
    assert rep.mem_growth <= allowance(rep.window)


def test_soak_report_flags_leaks() -> None:
    """problems() is not vacuous: each kind of leftover is reported."""
    rep = run_soak(200, "trio", seed=2, window=100)
    assert rep.problems() == []
    rep.tool_stats["scheduled"] = 1
    rep.limiter_stats["held"] = 1
    rep.stack_cleaned -= 1
    rep.sampled_roots_alive = 1
    rep.tasks_after += 1
    rep.mem_growth = allowance(rep.window) + 1
    assert len(rep.problems()) == 6
