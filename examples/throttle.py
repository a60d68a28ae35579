"""Throttle: at most N entries per period.

``Throttle(10, period_ms=100)`` lets ten flows in per 100 ms window; the rest
wait in its queue for the next window.  Twenty five parallel branches go
through it; each records the window it entered in: whole periods since the
start.  Expected output::

    window 0: 10 flows
    window 1: 10 flows
    window 2: 5 flows

Run with ``python examples/throttle.py [--backend trio]``.
"""

from __future__ import annotations

import argparse
from collections import Counter

import anyio

from futoin_anyio import AsyncSteps, Throttle

PERIOD_MS = 100


async def main() -> None:
    throttle = Throttle(10, period_ms=PERIOD_MS)
    windows: Counter[int] = Counter()
    start = anyio.current_time()

    def enter(asi: AsyncSteps) -> None:
        # Period k never starts before k periods have passed (a busy event loop
        # can only delay it), so a flow of period k is counted in window k, or
        # later if the event loop ran late: never earlier.
        elapsed_ms = (anyio.current_time() - start) * 1000
        windows[int(elapsed_ms // PERIOD_MS)] += 1

    asi = AsyncSteps()
    branches = asi.parallel()
    for _ in range(25):
        branches.add(lambda asi: asi.sync(throttle, enter))
    await asi.promise()
    for window, count in sorted(windows.items()):
        print(f"window {window}: {count} flows")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
