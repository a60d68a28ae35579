"""The benchmark scenarios written with futoin_anyio (the library under test).

Written against the public API (docs/semantics.rst) only. Each function mirrors its
twin in ``js/bench.js`` (same N, same work, same checks) and in ``_plain.py``.
The clock runs from before the roots are built (``add()`` is part of the cost a
user pays) until the last root has completed.
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

from anyio.lowlevel import checkpoint

from futoin_anyio import AsyncSteps, AsyncTool

from ._common import Measurement, NotAvailable, Scenario, check, now, rate


class _Unhandled:
    """``unhandled_error`` callback for ``execute()``: an unhandled error fails the scenario."""

    def __init__(self) -> None:
        self.codes: list[str] = []

    def __call__(self, code: str) -> None:
        self.codes.append(code)

    def check(self, name: str) -> None:
        check(not self.codes, f"{name}: unhandled errors {self.codes[:5]}")


async def seq(n: int) -> Measurement:
    count = 0

    def body(asi: Any, i: int) -> None:
        nonlocal count
        count += 1

    t0 = now()
    root = AsyncSteps()
    root.add(lambda asi: asi.repeat(n, body))
    await root.promise()
    dt = now() - t0
    check(count == n, f"seq: {count} != {n}")
    return rate(n, dt)


async def chain(n: int) -> Measurement:
    def step(asi: Any, v: int) -> None:
        asi.success(v + 1)

    t0 = now()
    root = AsyncSteps()
    root.add(lambda asi: asi.success(0))
    add = root.add
    for _ in range(n):
        add(step)
    res = await root.promise()
    dt = now() - t0
    check(res == n, f"chain: {res!r} != {n}")
    return rate(n, dt)


async def instances(n: int) -> Measurement:
    """``n`` roots started with ``execute()`` in one tool; the tool's exit joins them."""
    done = 0
    unhandled = _Unhandled()

    def step1(asi: Any) -> None:
        asi.success(1)

    def step2(asi: Any, v: int) -> None:
        nonlocal done
        done += v

    t0 = now()
    async with AsyncTool() as tool:
        for _ in range(n):
            root = AsyncSteps(tool=tool)
            root.add(step1)
            root.add(step2)
            root.execute(unhandled)
    dt = now() - t0
    unhandled.check("instances")
    check(done == n, f"instances: {done} != {n}")
    return rate(n, dt)


async def parallel(n: int) -> Measurement:
    count = 0
    after = False

    t0 = now()
    async with AsyncTool() as tool:
        immediate = tool.immediate

        def branch(asi: Any) -> None:
            asi.wait_external()

            def complete() -> None:
                nonlocal count
                count += 1
                asi.success()

            immediate(complete)

        def fork(asi: Any) -> None:
            p = asi.parallel()
            for _ in range(n):
                p.add(branch)

        def last(asi: Any) -> None:
            nonlocal after
            after = True

        root = AsyncSteps(tool=tool)
        root.add(fork)
        root.add(last)
        await root.promise()
    dt = now() - t0
    check(count == n and after, f"parallel: {count} != {n} or no step after")
    return rate(n, dt)


async def mutex(n: int) -> Measurement:
    try:
        from futoin_anyio import Mutex
    except ImportError as e:
        raise NotAvailable(f"futoin_anyio.Mutex: {e}") from e

    mtx = Mutex(1)
    inside = max_inside = done = 0
    unhandled = _Unhandled()

    t0 = now()
    async with AsyncTool() as tool:
        immediate = tool.immediate

        def critical(asi: Any) -> None:
            nonlocal inside, max_inside
            inside += 1
            if inside > max_inside:
                max_inside = inside
            asi.wait_external()

            def leave() -> None:
                nonlocal inside
                inside -= 1
                asi.success()

            immediate(leave)

        def enter(asi: Any) -> None:
            asi.sync(mtx, critical)

        def last(asi: Any) -> None:
            nonlocal done
            done += 1

        for _ in range(n):
            root = AsyncSteps(tool=tool)
            root.add(enter)
            root.add(last)
            root.execute(unhandled)
    dt = now() - t0
    unhandled.check("mutex")
    check(done == n, f"mutex: {done} != {n}")
    check(max_inside == 1, f"mutex: max inside {max_inside} != 1")
    check(inside == 0, f"mutex: {inside} still inside")
    return rate(n, dt)


async def errors(n: int) -> Measurement:
    recovered = 0

    def sub_sub(asi: Any) -> None:
        asi.error("BenchError", "boom")

    def sub(asi: Any) -> None:
        asi.add(sub_sub)

    def onerror(asi: Any, code: str) -> None:
        nonlocal recovered
        if code == "BenchError":
            recovered += 1
            asi.success()

    def body(asi: Any, i: int) -> None:
        asi.add(sub, onerror)

    t0 = now()
    root = AsyncSteps()
    root.add(lambda asi: asi.repeat(n, body))
    await root.promise()
    dt = now() - t0
    check(recovered == n, f"errors: {recovered} != {n}")
    return rate(n, dt)


async def c_steps(n: int) -> Measurement:
    # HOOK (binary bridge issue): `_csteps.c_steps` compiles a tiny C module against
    # futoin_anyio.binary's header and runs n C steps through asi.binary(); it raises
    # NotAvailable until the bridge provides get_include() and AsyncSteps.binary().
    from ._csteps import c_steps as run

    return await run(n)


async def waiting_mem(n: int) -> Measurement:
    waiting: list[Any] = []
    done = 0
    unhandled = _Unhandled()

    def wait_step(asi: Any) -> None:
        asi.wait_external()
        waiting.append(asi)

    def last(asi: Any) -> None:
        nonlocal done
        done += 1

    async with AsyncTool() as tool:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(n):
                root = AsyncSteps(tool=tool)
                root.add(wait_step)
                root.add(last)
                root.execute(unhandled)
            spins = 0
            while len(waiting) < n:
                await checkpoint()
                spins += 1
                check(spins < 10 * n + 1000, f"waiting_mem: only {len(waiting)}/{n} waiting")
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        check(done == 0, f"waiting_mem: {done} roots went past wait_external()")
        for asi in waiting:
            asi.success()
    unhandled.check("waiting_mem")
    check(done == n, f"waiting_mem: {done} != {n}")
    return Measurement((after - before) / n, 0.0)


SCENARIOS: dict[str, Scenario] = {
    "seq": seq,
    "chain": chain,
    "instances": instances,
    "parallel": parallel,
    "mutex": mutex,
    "errors": errors,
    "c_steps": c_steps,
    "waiting_mem": waiting_mem,
}
