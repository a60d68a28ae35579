"""Benchmark hook: a loop of C steps driven through ``asi.binary()``.

``c_loop(asi, n)`` adds one C step to ``asi`` that calls the table's ``repeat(n)``; each
iteration ``add()``\\ s a C step that calls ``success()``. So it measures n C steps, each
entering C from Python and coming back through two ``extern "Python"`` trampolines::

    root = AsyncSteps()
    c_loop(root, 100_000)
    await root.promise()
"""

from __future__ import annotations

from typing import Any

from ._bridge import c_step
from ._ffi import ffi, lib

__all__ = ("c_loop", "last_count")


def c_loop(asi: Any, n: int) -> None:
    """Add a step to ``asi`` running ``n`` C steps (see the module docstring)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    asi.add(c_step(ffi.addressof(lib, "ftnpy_bench_loop"), n))


def last_count() -> int:
    """How many C bench steps ran so far (a check that the loop really ran)."""
    return int(lib.ftnpy_bench_count())
