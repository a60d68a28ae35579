"""Mutex: independent roots run with ``execute()`` in an ``AsyncTool``.

Three roots enter the same ``Mutex()`` (one at a time).  Each counts how many
flows are inside while it is there, and reports it after leaving.  The
``async with AsyncTool()`` block exits when every executed root is done.  A
second ``Mutex(1, max_queue=1)`` shows the queue limit: of three parallel
branches, one enters, one waits and the third is rejected with
``DefenseRejected``; its error handler recovers, so its siblings go on.
Expected output::

    Max concurrency 0: 1
    Max concurrency 1: 1
    Max concurrency 2: 1
    flow 0: entered
    flow 1: entered
    flow 2: DefenseRejected

Run with ``python examples/mutex.py [--backend trio]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import anyio

from futoin_anyio import AsyncSteps, AsyncTool, Mutex


async def concurrency() -> None:
    mutex = Mutex()
    current = 0

    def critical_section(asi: AsyncSteps) -> None:
        nonlocal current
        current += 1

        def leave(asi: AsyncSteps) -> None:
            nonlocal current
            asi.success(current)
            current -= 1

        asi.add(leave)

    async with AsyncTool():
        for i in range(3):

            def report(asi: AsyncSteps, value: int, i: int = i) -> None:
                print(f"Max concurrency {i}: {value}")

            AsyncSteps().sync(mutex, critical_section).add(report).execute()


async def queue_limit() -> None:
    mutex = Mutex(1, max_queue=1)
    results: dict[int, str] = {}

    def flow(n: int) -> tuple[Callable[[AsyncSteps], object], Callable[[AsyncSteps, str], None]]:
        def enter(asi: AsyncSteps) -> None:
            results[n] = "entered"

            async def hold(asi: AsyncSteps) -> None:
                await anyio.sleep(0.01)

            asi.add(hold)

        def on_error(asi: AsyncSteps, code: str) -> None:
            results[n] = code
            asi.success()

        return lambda asi: asi.sync(mutex, enter), on_error

    asi = AsyncSteps()
    branches = asi.parallel()
    for n in range(3):
        branches.add(*flow(n))
    await asi.promise()
    for n in sorted(results):
        print(f"flow {n}: {results[n]}")


async def main() -> None:
    await concurrency()
    await queue_limit()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    anyio.run(main, backend=parser.parse_args().backend)
