"""The benchmark scenarios hand-written in plain AnyIO: the floor a Python user compares with.

Each function does the same work as its twin in ``_futoin.py`` the way one would
write it without futoin_anyio: a task per flow, :class:`anyio.Event` for an
external wait, :class:`anyio.Lock` for the mutex, ``try``/``except`` for errors.
Loops that run in one task yield to the loop every 100 iterations, as the
futoin_anyio driver does between bursts of steps.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Callable

import anyio
import sniffio
from anyio.lowlevel import checkpoint

from ._common import Measurement, NotAvailable, Scenario, check, now, rate

BURST = 100


def _call_soon() -> Callable[[Callable[[], object]], object]:
    """The running loop's "call this soon" primitive (what ``AsyncTool.immediate`` wraps)."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
    return asyncio.get_running_loop().call_soon


async def seq(n: int) -> Measurement:
    count = 0

    def body(i: int) -> None:
        nonlocal count
        count += 1

    t0 = now()
    for i in range(n):
        body(i)
        if i % BURST == BURST - 1:
            await checkpoint()
    dt = now() - t0
    check(count == n, f"seq: {count} != {n}")
    return rate(n, dt)


async def chain(n: int) -> Measurement:
    def first() -> int:
        return 0

    def step(v: int) -> int:
        return v + 1

    t0 = now()
    steps = [step] * n
    v = first()
    for i, func in enumerate(steps):
        v = func(v)
        if i % BURST == BURST - 1:
            await checkpoint()
    dt = now() - t0
    check(v == n, f"chain: {v} != {n}")
    return rate(n, dt)


async def instances(n: int) -> Measurement:
    done = 0

    def step1() -> int:
        return 1

    def step2(v: int) -> None:
        nonlocal done
        done += v

    async def root() -> None:
        step2(step1())

    t0 = now()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(root)
    dt = now() - t0
    check(done == n, f"instances: {done} != {n}")
    return rate(n, dt)


async def parallel(n: int) -> Measurement:
    call_soon = _call_soon()
    count = 0

    async def branch() -> None:
        nonlocal count
        event = anyio.Event()
        call_soon(event.set)
        await event.wait()
        count += 1

    t0 = now()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(branch)
    after = True
    dt = now() - t0
    check(count == n and after, f"parallel: {count} != {n}")
    return rate(n, dt)


async def mutex(n: int) -> Measurement:
    call_soon = _call_soon()
    lock = anyio.Lock()
    inside = max_inside = done = 0

    async def root() -> None:
        nonlocal inside, max_inside, done
        async with lock:
            inside += 1
            max_inside = max(max_inside, inside)
            event = anyio.Event()
            call_soon(event.set)
            await event.wait()
            inside -= 1
        done += 1

    t0 = now()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(root)
    dt = now() - t0
    check(done == n, f"mutex: {done} != {n}")
    check(max_inside == 1, f"mutex: max inside {max_inside} != 1")
    check(inside == 0, f"mutex: {inside} still inside")
    return rate(n, dt)


class _BenchError(Exception):
    def __init__(self, code: str, info: str) -> None:
        super().__init__(code, info)
        self.code = code


async def errors(n: int) -> Measurement:
    recovered = 0

    def sub_sub() -> None:
        raise _BenchError("BenchError", "boom")

    def sub() -> None:
        sub_sub()

    t0 = now()
    for i in range(n):
        try:
            sub()
        except _BenchError as e:
            if e.code == "BenchError":
                recovered += 1
        if i % BURST == BURST - 1:
            await checkpoint()
    dt = now() - t0
    check(recovered == n, f"errors: {recovered} != {n}")
    return rate(n, dt)


async def c_steps(n: int) -> Measurement:
    raise NotAvailable("no C steps in plain AnyIO")


async def waiting_mem(n: int) -> Measurement:
    events: list[anyio.Event] = []
    done = 0

    async def root() -> None:
        nonlocal done
        event = anyio.Event()
        events.append(event)
        await event.wait()
        done += 1

    async with anyio.create_task_group() as tg:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(n):
                tg.start_soon(root)
            while len(events) < n:
                await checkpoint()
            await checkpoint()  # the last ones reach event.wait()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        for event in events:
            event.set()
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
