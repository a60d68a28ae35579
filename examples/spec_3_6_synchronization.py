"""FTN12 section 3.6 "Synchronization": a critical section with ``asi.sync()``.

``Mutex(10)`` lets at most ten flows into the critical section at a time.  The
section is regular AsyncSteps: here a step that takes a little while.  Twenty
five parallel branches compete for it.  Expected output::

    25 flows passed the critical section, at most 10 at a time

Run with ``python examples/spec_3_6_synchronization.py [--backend trio]``.
"""

from __future__ import annotations

import argparse

import anyio

from futoin_anyio import AsyncSteps, Mutex

FLOWS = 25


async def main() -> None:
    mutex = Mutex(10)
    inside = 0
    max_inside = 0
    passed = 0

    def critical_section(asi: AsyncSteps) -> None:
        nonlocal inside, max_inside
        inside += 1
        max_inside = max(max_inside, inside)

        async def work(asi: AsyncSteps) -> None:
            await anyio.sleep(0.01)

        def leave(asi: AsyncSteps) -> None:
            nonlocal inside, passed
            inside -= 1
            passed += 1

        asi.add(work)
        asi.add(leave)

    asi = AsyncSteps()
    branches = asi.parallel()
    for _ in range(FLOWS):
        branches.add(lambda asi: asi.sync(mutex, critical_section))
    await asi.promise()
    print(f"{passed} flows passed the critical section, at most {max_inside} at a time")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
