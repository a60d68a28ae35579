"""The AnyIO-native path (issue 11): ``await asi.promise()`` in a task, against plain AnyIO.

Each row has two sides doing the same work on the running backend, each verifying
its own result: ``ours`` (futoin_anyio, public API only, the way an AnyIO user writes
it: a task per request, ``async def`` steps, ``await root.promise()``) and ``plain``
(the same code hand-written in AnyIO). Some rows have a third side, for information
(:data:`VARIANTS`): row ``tasks`` has ``plain_cp``, the plain tasks plus one checkpoint
each: what a task costs that yields once, as a ``promise()`` whose root waits does (one of
instant roots yields every 16th call). Rows ``async_tasks`` and ``mutex_tasks`` have
``plain_scope``, the plain tasks with their ``async def`` part inside a cancel scope of the
backend's own class, the one the contract puts around an ``async def`` step (the engine
uses the same class): ``plain_scope / plain`` is the best ratio that any implementation
honouring that scope could reach if everything else it did were free.

The clock runs from before the first task or root is built until the last one has
finished. ``blocked_mem`` measures traced bytes (tracemalloc) per blocked task instead.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any, Final

import anyio
from anyio.lowlevel import checkpoint

from futoin_anyio import AsyncSteps, Mutex

from ._common import Measurement, Scenario, check, now, rate

#: Row order in tables and charts.
ROWS: Final = ("async_loop", "async_tasks", "tasks", "mutex_tasks", "blocked_mem")

TITLES: Final = {
    "async_loop": "(a) repeat of async def steps, each a checkpoint",
    "async_tasks": "(b) a task per root: async def step + plain step",
    "tasks": "(c) a task per root of two plain steps",
    "mutex_tasks": "(d) a task per root through Mutex(1)",
    "blocked_mem": "(e) a root blocked in wait_external() in promise()",
}

SIZES: Final[dict[str, dict[str, int]]] = {
    "full": {
        "async_loop": 20_000,
        "async_tasks": 20_000,
        "tasks": 100_000,
        "mutex_tasks": 10_000,
        "blocked_mem": 10_000,
    },
    "quick": {
        "async_loop": 2_000,
        "async_tasks": 1_000,
        "tasks": 5_000,
        "mutex_tasks": 1_000,
        "blocked_mem": 1_000,
    },
    "tiny": {
        "async_loop": 50,
        "async_tasks": 50,
        "tasks": 50,
        "mutex_tasks": 20,
        "blocked_mem": 20,
    },
}

UNITS: Final = {
    "async_loop": "steps/s",
    "async_tasks": "roots/s",
    "tasks": "roots/s",
    "mutex_tasks": "roots/s",
    "blocked_mem": "B/root",
}

#: The sides beyond ``ours`` and ``plain``, for information (the targets are against ``plain``).
VARIANTS: Final = {
    "plain_cp": "plain AnyIO + a checkpoint",
    "plain_scope": "plain AnyIO + the step's cancel scope",
}

#: Targets: throughput ours/plain >= bound; memory: ours <= plain + bound bytes.
TARGETS: Final = {
    "async_loop": 0.5,
    "async_tasks": 0.6,
    "tasks": 0.8,
    "mutex_tasks": 0.8,
    "blocked_mem": 1024.0,
}

#: Extra checkpoints after the last task reported it is blocked, so that every task reaches
#: the point where it sleeps (the same number on both sides).
SETTLE = 3


def _step_scope_type() -> Callable[[], Any]:
    """The backend's own cancel scope class: the one the engine enters around an inline
    ``async def`` step (on trio, trio's own, without AnyIO's wrapper)."""
    try:
        import trio

        trio.lowlevel.current_root_task()  # RuntimeError unless trio runs
    except (ImportError, RuntimeError):
        return type(anyio.CancelScope())
    return trio.CancelScope


async def _time_tasks(n: int, task: Any) -> float:
    """Seconds from before the first of *n* tasks running *task* starts until the last ends."""
    t0 = now()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(task)
    return now() - t0


# --------------------------------------------------------------------------- (a)


async def async_loop_ours(n: int) -> Measurement:
    count = 0

    async def body(asi: Any, i: int) -> None:
        nonlocal count
        await checkpoint()
        count += 1

    t0 = now()
    root = AsyncSteps()
    root.add(lambda asi: asi.repeat(n, body))
    await root.promise()
    dt = now() - t0
    check(count == n, f"async_loop: {count} != {n}")
    return rate(n, dt)


async def async_loop_plain(n: int) -> Measurement:
    count = 0
    t0 = now()
    for _ in range(n):
        await checkpoint()
        count += 1
    dt = now() - t0
    check(count == n, f"async_loop: {count} != {n}")
    return rate(n, dt)


# --------------------------------------------------------------------------- (b)


async def async_tasks_ours(n: int) -> Measurement:
    done = 0

    async def fetch(asi: Any) -> int:
        await checkpoint()
        return 1

    def use(asi: Any, v: int) -> None:
        nonlocal done
        done += v

    async def one() -> None:
        root = AsyncSteps()
        root.add(fetch)
        root.add(use)
        await root.promise()

    dt = await _time_tasks(n, one)
    check(done == n, f"async_tasks: {done} != {n}")
    return rate(n, dt)


async def _async_tasks_plain(n: int, scoped: bool) -> Measurement:
    done = 0
    scope_type = _step_scope_type()

    async def fetch() -> int:
        await checkpoint()
        return 1

    def use(v: int) -> None:
        nonlocal done
        done += v

    async def one() -> None:
        use(await fetch())

    async def one_scoped() -> None:
        with scope_type():
            v = await fetch()
        use(v)

    dt = await _time_tasks(n, one_scoped if scoped else one)
    check(done == n, f"async_tasks: {done} != {n}")
    return rate(n, dt)


async def async_tasks_plain(n: int) -> Measurement:
    return await _async_tasks_plain(n, False)


async def async_tasks_plain_scope(n: int) -> Measurement:
    return await _async_tasks_plain(n, True)


# --------------------------------------------------------------------------- (c)


async def tasks_ours(n: int) -> Measurement:
    done = 0

    def step1(asi: Any) -> None:
        asi.success(1)

    def step2(asi: Any, v: int) -> None:
        nonlocal done
        done += v

    async def one() -> None:
        root = AsyncSteps()
        root.add(step1)
        root.add(step2)
        await root.promise()

    dt = await _time_tasks(n, one)
    check(done == n, f"tasks: {done} != {n}")
    return rate(n, dt)


async def _tasks_plain(n: int, with_checkpoint: bool) -> Measurement:
    done = 0

    def step1() -> int:
        return 1

    def step2(v: int) -> None:
        nonlocal done
        done += v

    async def one() -> None:
        step2(step1())

    async def one_cp() -> None:
        await checkpoint()
        step2(step1())

    task = one_cp if with_checkpoint else one
    dt = await _time_tasks(n, task)
    check(done == n, f"tasks: {done} != {n}")
    return rate(n, dt)


async def tasks_plain(n: int) -> Measurement:
    return await _tasks_plain(n, False)


async def tasks_plain_cp(n: int) -> Measurement:
    return await _tasks_plain(n, True)


# --------------------------------------------------------------------------- (d)


class _Section:
    """Counts the tasks inside a critical section: more than one at a time is a failure."""

    def __init__(self) -> None:
        self.inside = self.max_inside = self.done = 0

    async def hold(self) -> None:
        self.inside += 1
        if self.inside > self.max_inside:
            self.max_inside = self.inside
        await checkpoint()  # held across a checkpoint: the other tasks queue up
        self.inside -= 1

    def check(self, n: int) -> None:
        check(self.done == n, f"mutex_tasks: {self.done} != {n}")
        check(self.max_inside == 1, f"mutex_tasks: max inside {self.max_inside} != 1")
        check(self.inside == 0, f"mutex_tasks: {self.inside} still inside")


async def mutex_tasks_ours(n: int) -> Measurement:
    mtx = Mutex(1)
    section = _Section()

    async def critical(asi: Any) -> None:
        await section.hold()

    def enter(asi: Any) -> None:
        asi.sync(mtx, critical)

    def last(asi: Any) -> None:
        section.done += 1

    async def one() -> None:
        root = AsyncSteps()
        root.add(enter)
        root.add(last)
        await root.promise()

    dt = await _time_tasks(n, one)
    section.check(n)
    return rate(n, dt)


async def _mutex_tasks_plain(n: int, scoped: bool) -> Measurement:
    lock = anyio.Lock()
    section = _Section()
    scope_type = _step_scope_type()

    async def one() -> None:
        async with lock:
            await section.hold()
        section.done += 1

    async def one_scoped() -> None:
        async with lock:
            with scope_type():
                await section.hold()
        section.done += 1

    dt = await _time_tasks(n, one_scoped if scoped else one)
    section.check(n)
    return rate(n, dt)


async def mutex_tasks_plain(n: int) -> Measurement:
    return await _mutex_tasks_plain(n, False)


async def mutex_tasks_plain_scope(n: int) -> Measurement:
    return await _mutex_tasks_plain(n, True)


# --------------------------------------------------------------------------- (e)


async def _blocked(n: int, start: Any, blocked: list[Any], release: Any) -> float:
    """Start *n* tasks with *start*, wait until all are *blocked*; return traced bytes each."""
    async with anyio.create_task_group() as tg:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(n):
                tg.start_soon(start)
            spins = 0
            while len(blocked) < n:
                await checkpoint()
                spins += 1
                check(spins < 10 * n + 1000, f"blocked_mem: only {len(blocked)}/{n} blocked")
            for _ in range(SETTLE):
                await checkpoint()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        release()
    return (after - before) / n


async def blocked_mem_ours(n: int) -> Measurement:
    waiting: list[Any] = []
    done = 0

    def wait_step(asi: Any) -> None:
        asi.wait_external()
        waiting.append(asi)

    def last(asi: Any) -> None:
        nonlocal done
        done += 1

    async def one() -> None:
        root = AsyncSteps()
        root.add(wait_step)
        root.add(last)
        await root.promise()

    def release() -> None:
        check(done == 0, f"blocked_mem: {done} roots went past wait_external()")
        for asi in waiting:
            asi.success()

    per_root = await _blocked(n, one, waiting, release)
    check(done == n, f"blocked_mem: {done} != {n}")
    return Measurement(per_root, 0.0)


async def blocked_mem_plain(n: int) -> Measurement:
    events: list[anyio.Event] = []
    done = 0

    async def one() -> None:
        nonlocal done
        event = anyio.Event()
        events.append(event)
        await event.wait()
        done += 1

    def release() -> None:
        check(done == 0, f"blocked_mem: {done} tasks went past their event")
        for event in events:
            event.set()

    per_task = await _blocked(n, one, events, release)
    check(done == n, f"blocked_mem: {done} != {n}")
    return Measurement(per_task, 0.0)


#: ``SIDES[row][side]``: the scenario of one side of one row.
SIDES: Final[dict[str, dict[str, Scenario]]] = {
    "async_loop": {"ours": async_loop_ours, "plain": async_loop_plain},
    "async_tasks": {
        "ours": async_tasks_ours,
        "plain": async_tasks_plain,
        "plain_scope": async_tasks_plain_scope,
    },
    "tasks": {"ours": tasks_ours, "plain": tasks_plain, "plain_cp": tasks_plain_cp},
    "mutex_tasks": {
        "ours": mutex_tasks_ours,
        "plain": mutex_tasks_plain,
        "plain_scope": mutex_tasks_plain_scope,
    },
    "blocked_mem": {"ours": blocked_mem_ours, "plain": blocked_mem_plain},
}
