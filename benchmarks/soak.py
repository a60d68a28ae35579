"""Soak: a million roots through ``execute()`` under one AsyncTool and a Limiter.

Each root enters the Limiter and then, at random: succeeds at once, waits for an external event
(completed by the tool after a few ms), fails (handled or not), times out, runs two parallel
branches or an ``async def`` step; some roots are cancelled at a random moment. Every step
allocates a ``stack()`` object whose cleanup must run exactly once.

At the end nothing may be left: AsyncTool statistics (roots, ready, scheduled, tasks) and Limiter
statistics (held, waiting, rate_waiting) are zero, every ``stack()`` object was cleaned up, the
sampled roots were garbage-collected, no task outlived the tool, and memory is flat: tracemalloc
starts after a warm-up, and the memory still allocated at the end (after ``gc.collect()``) must
not grow with the number of roots: it may only hold containers that grew to the size of the
in-flight window (the AsyncTool's set of roots, queue blocks), and the compiled engine's free
lists, :func:`allowance` bytes.

By hand (takes minutes)::

    python -m benchmarks.soak --roots 1000000 --backend trio
    python -m benchmarks.soak --roots 1000000 --backend asyncio

``tests/test_soak.py`` runs a quick variant (10^4 roots) on both backends.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import tracemalloc
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from futoin_anyio import AsyncSteps, AsyncTool, Limiter
from futoin_anyio._alarm import TASK_NAME as ALARM_TASK
from futoin_anyio._frame import COMPILED

__all__ = ("SoakReport", "run_soak", "soak")


class _Root(AsyncSteps):
    """AsyncSteps that can be weakly referenced (its steps are of the root's class too)."""

    __slots__ = ("__weakref__",)


#: What the compiled engine's free lists keep at most (``docs/internals.rst``, "Free lists"):
#: about 290 KiB of freed step objects, flows, drivers and the like, and 128 closures of each
#: compiled coroutine that ran. Whatever the number of roots; none in the pure build.
FREE_LISTS = 512 * 1024 if COMPILED else 0


def allowance(window: int) -> int:
    """Bytes the run may keep at the end: 64 KiB plus 128 bytes per in-flight root, plus
    :data:`FREE_LISTS`.

    Independent of the number of roots: a leak of one byte per root in a 10^6-root run exceeds it.
    """
    return 64 * 1024 + 128 * window + FREE_LISTS


@dataclass
class SoakReport:
    backend: str
    roots: int
    seconds: float = 0.0
    completed: int = 0
    unhandled: dict[str, int] = field(default_factory=dict)
    cancels_requested: int = 0
    stack_allocated: int = 0
    stack_cleaned: int = 0
    #: bytes still allocated since tracing started (after the warm-up), at the end
    mem_growth: int = 0
    #: tracemalloc peak during the traced part
    mem_peak: int = 0
    #: memory growth per root of the traced part
    bytes_per_root: float = 0.0
    window: int = 0
    tool_stats: dict[str, int] = field(default_factory=dict)
    limiter_stats: dict[str, int] = field(default_factory=dict)
    sampled_roots_alive: int = 0
    sampled_roots: int = 0
    tasks_before: int = 0
    tasks_after: int = 0

    def problems(self) -> list[str]:
        """What is wrong with this run (an empty list: nothing)."""
        out = []
        if any(self.tool_stats.values()):
            out.append(f"AsyncTool not idle: {self.tool_stats}")
        if any(self.limiter_stats[k] for k in ("held", "waiting", "rate_waiting")):
            out.append(f"Limiter not idle: {self.limiter_stats}")
        if self.stack_allocated != self.stack_cleaned:
            out.append(f"stack() cleanups: {self.stack_cleaned} of {self.stack_allocated}")
        if self.sampled_roots_alive:
            out.append(f"{self.sampled_roots_alive} of {self.sampled_roots} sampled roots leaked")
        if self.tasks_after != self.tasks_before:
            out.append(f"tasks: {self.tasks_before} before, {self.tasks_after} after")
        if self.mem_growth > allowance(self.window):
            out.append(f"memory grew {self.mem_growth} bytes ({self.bytes_per_root:.2f}/root), "
                       f"more than {allowance(self.window)}")
        if self.completed + sum(self.unhandled.values()) == 0:
            out.append("no root completed")
        return out


def _tasks() -> int:
    """The running tasks, less the alarm task a trio run gets at its first set_timeout() over an
    inline step (one per run, like trio's own system tasks: it holds no root)."""
    return sum(1 for task in anyio.get_running_tasks() if task.name != ALARM_TASK)


async def soak(roots: int, *, seed: int = 0, window: int = 2000, warmup: float = 0.1,
               backend: str = "?") -> SoakReport:
    """Run ``roots`` random roots; see the module docstring."""
    rnd = random.Random(seed)
    rep = SoakReport(backend, roots, window=window)
    limiter = Limiter(concurrent=64, max_queue=None, rate=400, period_ms=5, burst=None)
    counts = [0, 0]  # stack() allocated, cleaned
    sample: list[weakref.ref[_Root]] = []
    warm = max(1, int(roots * warmup))

    def cleaned(_: object) -> None:
        counts[1] += 1

    def alloc(asi: AsyncSteps) -> None:
        counts[0] += 1
        asi.stack(8, cleaned)

    def ext_wait(asi: AsyncSteps, ms: int) -> None:
        asi.wait_external()
        tool = asi.tool
        assert tool is not None
        tool.deferred(ms, lambda: asi.success() if asi else None)

    def alloc_and_wait(asi: AsyncSteps, ms: int) -> None:
        alloc(asi)
        ext_wait(asi, ms)

    def section(asi: AsyncSteps, kind: int, ms: int) -> None:
        alloc(asi)
        if kind == 0:
            return
        if kind == 1:
            ext_wait(asi, ms)
        elif kind == 2:
            asi.error("E1", "handled")
        elif kind == 3:
            asi.error("E2", "unhandled")
        elif kind == 4:
            asi.set_timeout(ms)
            ext_wait(asi, ms + 3)
        elif kind == 5:
            par = asi.parallel()
            par.add(lambda b: alloc_and_wait(b, ms))
            par.add(lambda b: alloc(b))
        else:
            asi.add(coro_step)

    async def coro_step(asi: AsyncSteps) -> int:
        alloc(asi)
        await anyio.lowlevel.checkpoint()
        return 1

    def recover(asi: AsyncSteps, code: str) -> None:
        if code == "E1":
            asi.success()

    def done(asi: AsyncSteps, *_: Any) -> None:
        rep.completed += 1

    def unhandled(code: str) -> None:
        rep.unhandled[code] = rep.unhandled.get(code, 0) + 1

    rep.tasks_before = _tasks()
    start = time.perf_counter()
    async with AsyncTool() as tool:
        for i in range(roots):
            if i == warm:
                gc.collect()
                tracemalloc.start()
            kind = rnd.randrange(7)
            ms = rnd.randint(0, 3)
            root = _Root()
            root.add(lambda a, kind=kind, ms=ms: a.sync(
                limiter, lambda b: section(b, kind, ms), recover))
            root.add(done)
            root.execute(unhandled)
            if rnd.random() < 0.05:
                rep.cancels_requested += 1
                tool.deferred(rnd.randint(0, 4), root.cancel)
            if i % 997 == 0:
                sample.append(weakref.ref(root))
            del root
            if tool.statistics().roots >= window:
                # Back-pressure: no event tells when a (cancelled) root ends, so poll.
                while tool.statistics().roots > window // 2:  # noqa: ASYNC110
                    await anyio.sleep(0.001)
    rep.seconds = time.perf_counter() - start
    await anyio.lowlevel.checkpoint()  # let finished tasks be reaped
    rep.tasks_after = _tasks()
    gc.collect()
    if tracemalloc.is_tracing():
        rep.mem_growth, rep.mem_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    rep.bytes_per_root = rep.mem_growth / max(1, roots - warm)
    rep.tool_stats = asdict(tool.statistics())
    rep.limiter_stats = asdict(limiter.statistics())
    rep.stack_allocated, rep.stack_cleaned = counts
    rep.sampled_roots = len(sample)
    rep.sampled_roots_alive = sum(1 for ref in sample if ref() is not None)
    return rep


def run_soak(roots: int, backend: str, seed: int = 0, **kwargs: Any) -> SoakReport:
    """Run :func:`soak` in a fresh event loop of ``backend``."""

    async def main() -> SoakReport:
        return await soak(roots, seed=seed, backend=backend, **kwargs)

    return anyio.run(main, backend=backend)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--roots", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="trio")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rep = run_soak(args.roots, args.backend, args.seed)
    json.dump(asdict(rep), sys.stdout, indent=1)
    sys.stdout.write("\n")
    problems = rep.problems()
    for problem in problems:
        sys.stderr.write(f"SOAK PROBLEM: {problem}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
