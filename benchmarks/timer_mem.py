"""Memory held by finished timers: traced bytes per finished timed root (lower is better).

A timer that ends before its deadline (a step that set a timeout and succeeded, a cancelled
``deferred()``, a cancelled root) must not keep its callback, its arguments (the step object,
and through it the root's state) or a slot of the driver's timer heap until its deadline.

Scenarios, each in one ``async with AsyncTool()`` while one 30 s timer lives (so the heap is
never empty and the driver never reaches the dead entries through its deadlines):

- ``execute``: ``n`` roots, each a step that does ``set_timeout(60_000)`` and succeeds at once,
  started in waves of :data:`WINDOW` (a service with that many requests in flight);
- ``promise``: one ``promise()`` root whose ``repeat(n)`` body does the same, measured from
  inside the root (its private driver holds the timers) while an outer ``set_timeout()`` lives;
- ``deferred``: ``n`` times ``tool.deferred(60_000, callback).cancel()``, handles dropped;
- ``cancel``: ``n`` roots waiting under ``set_timeout(60_000)``, each cancelled with
  ``root.cancel()``, in waves of :data:`WINDOW`.

tracemalloc starts after a warm-up (one wave: the containers sized by the in-flight window, such
as the tool's set of roots, exist by then); the figure is the memory still allocated after
``gc.collect()``, divided by ``n``. Run from the repository root::

    python -m benchmarks.timer_mem                 # n = 10^5, both backends, every scenario
    python -m benchmarks.timer_mem -n 20000 --backend trio --only execute
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python benchmarks/timer_mem.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from anyio.lowlevel import checkpoint

from futoin_anyio import AsyncSteps, AsyncTool

__all__ = ("SCENARIOS", "cancelled_deferred", "cancelled_roots", "execute_roots",
           "promise_root")

#: Roots in flight at once, and the warm-up before tracemalloc starts.
WINDOW = 1000


def _noop() -> None:
    pass


def _timed_success(asi: Any, *_: Any) -> None:
    asi.set_timeout(60_000)
    asi.success()


async def _drain(tool: AsyncTool) -> None:
    """Until every root of ``tool`` has ended."""
    while tool.statistics().roots:
        await checkpoint()


def _start() -> int:
    gc.collect()
    tracemalloc.start()
    return tracemalloc.get_traced_memory()[0]


def _stop(before: int, n: int) -> float:
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n


async def _held_per_item(waves: Callable[[AsyncTool, int], Awaitable[None]], n: int) -> float:
    """Bytes held per item after ``waves(tool, n)`` (a warm-up wave first), in one tool where a
    30 s timer lives throughout."""
    async with AsyncTool() as tool:
        keeper = tool.deferred(30_000, _noop)
        await waves(tool, WINDOW)
        before = _start()
        try:
            await waves(tool, n)
        finally:
            per = _stop(before, n)
            keeper.cancel()
    return per


async def execute_roots(n: int) -> float:
    """Bytes held per finished root whose step set a 60 s timeout and succeeded at once."""
    failed: list[str] = []

    async def waves(tool: AsyncTool, count: int) -> None:
        for start in range(0, count, WINDOW):
            for _ in range(min(WINDOW, count - start)):
                root = AsyncSteps(tool=tool)
                root.add(_timed_success)
                root.execute(failed.append)
            await _drain(tool)

    per_root = await _held_per_item(waves, n)
    if failed:
        raise AssertionError(f"execute: roots failed: {failed[:5]}")
    return per_root


async def promise_root(n: int) -> float:
    """Bytes held per iteration of a ``promise()`` root's loop whose body set a 60 s timeout
    and succeeded, measured inside the root while its outer 30 s timeout lives."""
    box: dict[str, Any] = {}

    def outer(asi: Any) -> None:
        asi.set_timeout(30_000)
        asi.repeat(WINDOW, _timed_success)
        asi.add(lambda asi: box.setdefault("before", _start()))
        asi.repeat(n, _timed_success)
        asi.add(lambda asi: box.setdefault("per", _stop(box["before"], n)))

    root = AsyncSteps()
    root.add(outer)
    try:
        await root.promise()
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
    per: float = box["per"]
    return per


async def cancelled_deferred(n: int) -> float:
    """Bytes held per ``deferred(60 s)`` handle cancelled (and dropped) at once."""

    def callback() -> None:  # pragma: no cover - never runs
        raise AssertionError("a cancelled deferred() ran")

    async def waves(tool: AsyncTool, count: int) -> None:
        for _ in range(count):
            tool.deferred(60_000, callback).cancel()
        await checkpoint()

    return await _held_per_item(waves, n)


async def cancelled_roots(n: int) -> float:
    """Bytes held per root cancelled while its step waited under a 60 s timeout."""

    def wait_timed(asi: Any) -> None:
        asi.set_timeout(60_000)

    async def waves(tool: AsyncTool, count: int) -> None:
        for start in range(0, count, WINDOW):
            roots = []
            for _ in range(min(WINDOW, count - start)):
                root = AsyncSteps(tool=tool)
                root.add(wait_timed)
                root.execute()
                roots.append(root)
            while tool.statistics().ready:
                await checkpoint()
            for root in roots:
                root.cancel()
            del roots, root
            await _drain(tool)

    return await _held_per_item(waves, n)


SCENARIOS: dict[str, Callable[[int], Awaitable[float]]] = {
    "execute": execute_roots,
    "promise": promise_root,
    "deferred": cancelled_deferred,
    "cancel": cancelled_roots,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.timer_mem", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=100_000, help="roots per scenario")
    parser.add_argument("--backend", default="asyncio,trio")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    args = parser.parse_args(argv)
    names, backends = args.only.split(","), args.backend.split(",")
    if args.n < 1:
        parser.error(f"-n must be >= 1, not {args.n}")
    if set(names) - set(SCENARIOS):
        parser.error(f"--only {args.only}: choose among {', '.join(SCENARIOS)}")
    if set(backends) - {"asyncio", "trio"}:
        parser.error(f"--backend {args.backend}: choose among asyncio, trio")
    print("| scenario | backend | n | bytes held per finished timer |\n| --- | --- | --- | --- |")
    for name in names:
        for backend in backends:
            per = anyio.run(SCENARIOS[name], args.n, backend=backend)
            print(f"| {name} | {backend} | {args.n} | {per:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
