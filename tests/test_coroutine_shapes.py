"""``async def`` steps in the shapes the docs promise: across plain steps, in parallel branches,
in ISync sections, under labelled loops (issue 24's regressions, both backends).

Each test waits with a bound (``fail_after``): a hang fails fast instead of stalling the run.
The rules kept here are written in ``docs/internals.rst`` ("How an unwinding waits for
coroutines") and ``docs/semantics.rst``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from futoin_anyio import AsyncSteps, Errors, FutoInError, Limiter, Mutex

pytestmark = pytest.mark.anyio

BOUND = 2.0  # seconds: every test here ends well within it, or has hung


async def _checkpoint_step(asi: AsyncSteps) -> None:
    await anyio.lowlevel.checkpoint()


# -- 1. work a plain step schedules between two inline awaits is served -------------------------


def _schedule_deferred(asi: AsyncSteps, ev: anyio.Event) -> None:
    tool = asi.tool
    assert tool is not None
    tool.deferred(10, ev.set)


def _schedule_immediate(asi: AsyncSteps, ev: anyio.Event) -> None:
    tool = asi.tool
    assert tool is not None
    tool.immediate(ev.set)


def _schedule_root(asi: AsyncSteps, ev: anyio.Event) -> None:
    other = asi.new_instance()
    other.add(lambda asi: ev.set())
    other.execute()


def _schedule_async_root(asi: AsyncSteps, ev: anyio.Event) -> None:
    async def setter(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        ev.set()

    other = asi.new_instance()
    other.add(setter)
    other.execute()


SCHEDULERS = [_schedule_deferred, _schedule_immediate, _schedule_root, _schedule_async_root]


@pytest.mark.parametrize("schedule", SCHEDULERS, ids=lambda f: f.__name__[10:])
@pytest.mark.parametrize("first_inline", [True, False], ids=["after-inline", "first"])
async def test_work_scheduled_between_inline_awaits_is_served(
        schedule: Callable[[AsyncSteps, anyio.Event], None], first_inline: bool) -> None:
    ev = anyio.Event()

    async def wait_for_it(asi: AsyncSteps) -> str:
        await ev.wait()
        return "served"

    root = AsyncSteps()
    if first_inline:
        root.add(_checkpoint_step)
    root.add(lambda asi: schedule(asi, ev))
    root.add(wait_for_it)
    with anyio.fail_after(BOUND):
        assert await root.promise() == "served"


async def test_work_scheduled_between_inline_awaits_runs_before_the_chain_ends() -> None:
    """The callback runs while the next inline step still awaits, not after the whole chain."""
    log: list[str] = []

    def schedule(asi: AsyncSteps) -> None:
        tool = asi.tool
        assert tool is not None
        tool.immediate(lambda: log.append("callback"))

    async def long_step(asi: AsyncSteps) -> None:
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
            if log:
                break
        log.append("step ends")

    root = AsyncSteps()
    root.add(_checkpoint_step).add(schedule).add(long_step)
    with anyio.fail_after(BOUND):
        await root.promise()
    assert log == ["callback", "step ends"]


# -- 2. an ISync section's exit waits for the coroutine inside it -------------------------------


class Probe:
    """How many flows are inside a section at once: ``peak`` is the invariant."""

    def __init__(self) -> None:
        self.inside = 0
        self.peak = 0
        self.entered = anyio.Event()

    def enter(self) -> None:
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        self.entered.set()

    def leave(self) -> None:
        self.inside -= 1

    async def slow_section(self, asi: AsyncSteps) -> None:
        """Waits until cancelled, then cleans up for a while, still inside."""
        self.enter()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.05)
            self.leave()

    async def quick_section(self, asi: AsyncSteps) -> None:
        self.enter()
        await anyio.lowlevel.checkpoint()
        self.leave()


def _unwound_by_sibling(root: AsyncSteps, section: Callable[[AsyncSteps], Any],
                        prim: Any, probe: Probe) -> None:
    async def failing(asi: AsyncSteps) -> None:
        await probe.entered.wait()
        raise FutoInError("Boom")

    def body(asi: AsyncSteps) -> None:
        asi.parallel().add(lambda asi: asi.sync(prim, section)).add(failing)

    root.add(body, lambda asi, code: asi.success())


def _unwound_by_outer_timeout(root: AsyncSteps, section: Callable[[AsyncSteps], Any],
                              prim: Any, probe: Probe) -> None:
    def body(asi: AsyncSteps) -> None:
        asi.set_timeout(30)
        asi.parallel().add(lambda asi: asi.sync(prim, section)).add(
            lambda asi: asi.wait_external())

    root.add(body, lambda asi, code: asi.success())


UNWINDERS = [_unwound_by_sibling, _unwound_by_outer_timeout]


async def _second_holder_waits(prim: Any, probe: Probe, first: AsyncSteps) -> None:
    second = AsyncSteps()
    second.sync(prim, probe.quick_section)
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.promise)
        await probe.entered.wait()
        await second.promise()


@pytest.mark.parametrize("unwind", UNWINDERS, ids=lambda f: f.__name__[9:])
@pytest.mark.parametrize("kind", ["Mutex", "Limiter"])
async def test_section_is_left_only_after_its_coroutine_ends(
        kind: str, unwind: Callable[..., None]) -> None:
    prim: Any = Mutex(1) if kind == "Mutex" else Limiter(1, max_queue=None, rate=100, period_ms=10)
    probe = Probe()
    first = AsyncSteps()
    unwind(first, probe.slow_section, prim, probe)
    with anyio.fail_after(BOUND):
        await _second_holder_waits(prim, probe, first)
    assert probe.peak == 1
    assert probe.inside == 0


@pytest.mark.parametrize("how", ["cancel", "outer"])
async def test_section_left_after_coroutine_on_root_cancel(how: str) -> None:
    """``root.cancel()`` and the caller's cancellation also wait for the coroutine."""
    mutex = Mutex(1)
    probe = Probe()
    first = AsyncSteps()
    first.add(lambda asi: asi.parallel().add(lambda asi: asi.sync(mutex, probe.slow_section)))
    second = AsyncSteps()
    second.sync(mutex, probe.quick_section)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def run_first() -> None:
                raises = pytest.raises(FutoInError) if how == "cancel" else contextlib.nullcontext()
                with scope, raises:
                    await first.promise()

            tg.start_soon(run_first)
            await probe.entered.wait()
            if how == "cancel":
                first.cancel()
            else:
                scope.cancel()
            await second.promise()
    assert probe.peak == 1


async def test_redis_mutex_section_left_after_its_coroutine(redis_server: Any) -> None:
    coredis = pytest.importorskip("coredis")
    from futoin_anyio.redis import RedisMutex

    async with coredis.Redis(host="127.0.0.1", port=redis_server.port) as client:
        prim = RedisMutex(client, f"shape-{uuid.uuid4().hex[:8]}")
        probe = Probe()
        first = AsyncSteps()
        _unwound_by_sibling(first, probe.slow_section, prim, probe)
        with anyio.fail_after(BOUND):
            await _second_holder_waits(prim, probe, first)
        assert probe.peak == 1


def _slow_to_cancel(cleaning: anyio.Event, log: list[str] | None = None,
                    cancel_log: str | None = None) -> Callable[[AsyncSteps], Any]:
    """An ``async def`` step that waits until cancelled, sets ``cleaning``, then cleans up for a
    while (shielded); it logs ``A ends`` at its very end, and ``cancel_log`` from its cancel
    handler."""

    async def slow(asi: AsyncSteps) -> None:
        if cancel_log is not None and log is not None:
            asi.set_cancel(lambda asi: log.append(cancel_log))
        try:
            await anyio.sleep_forever()
        finally:
            cleaning.set()
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.05)
            if log is not None:
                log.append("A ends")

    return slow


async def _fail_soon(asi: AsyncSteps) -> None:
    await anyio.lowlevel.checkpoint()
    raise FutoInError("InnerFail")


# -- 3. no branch's coroutine outlives its parallel step ------------------------------------------


async def test_paused_unwinding_is_waited_for_by_an_outer_failure() -> None:
    log: list[str] = []
    cleaning = anyio.Event()

    slow = _slow_to_cancel(cleaning, log)

    async def fail_while_paused(asi: AsyncSteps) -> None:
        await cleaning.wait()
        raise FutoInError("OuterFail")

    def branch_x(asi: AsyncSteps) -> None:
        asi.parallel().add(slow).add(_fail_soon)

    def outer(asi: AsyncSteps) -> None:
        asi.parallel().add(branch_x).add(fail_while_paused)

    def handler(asi: AsyncSteps, code: str) -> None:
        log.append(f"handler {code}")
        asi.success()

    root = AsyncSteps()
    root.add(outer, handler)
    root.add(lambda asi: log.append("next step"))
    with anyio.fail_after(BOUND):
        await root.promise()
    assert log == ["A ends", "handler OuterFail", "next step"]


async def test_root_cancel_during_paused_unwinding_waits_for_the_coroutine() -> None:
    log: list[str] = []
    cleaning = anyio.Event()

    slow = _slow_to_cancel(cleaning, log, "cancel handler A")

    def body(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler body"))
        asi.parallel().add(slow).add(_fail_soon)

    root = AsyncSteps()
    root.add(lambda asi: asi.add(body))
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            async def run() -> None:
                with pytest.raises(FutoInError) as info:
                    await root.promise()
                assert info.value.code == Errors.Cancelled

            tg.start_soon(run)
            await cleaning.wait()
            root.cancel()
    assert log[0] == "A ends"
    assert log[-1] == "cancel handler body"


# -- 4. a labelled break belongs to the branch that raised it --------------------------------------


async def test_labelled_break_from_a_branch_is_not_overwritten_by_a_sibling_flow() -> None:
    log: list[str] = []
    cleaning = anyio.Event()

    slow = _slow_to_cancel(cleaning)

    async def break_outer(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        asi.break_loop("outer")

    def inner_body(asi: AsyncSteps, i: int) -> None:
        log.append(f"inner {i}")
        asi.parallel().add(slow).add(break_outer)

    def outer_body(asi: AsyncSteps) -> None:
        log.append("outer iteration")
        asi.repeat(3, inner_body, "inner")

    def branch_x(asi: AsyncSteps) -> None:
        asi.loop(outer_body, "outer")
        asi.add(lambda asi: log.append("X after outer"))

    async def branch_y(asi: AsyncSteps) -> None:
        await cleaning.wait()
        asi.add(lambda asi: asi.loop(lambda asi: asi.break_loop()))
        asi.add(lambda asi: log.append("Y broke its loop"))

    root = AsyncSteps()
    root.add(lambda asi: asi.parallel().add(branch_x).add(branch_y))
    with anyio.fail_after(BOUND):
        await root.promise()
    assert log.count("outer iteration") == 1
    assert log.count("inner 0") == 1 and "inner 1" not in log
    assert "X after outer" in log and "Y broke its loop" in log


async def test_unknown_label_from_a_branch_names_it() -> None:
    root = AsyncSteps()
    root.add(lambda asi: asi.parallel().add(lambda asi: asi.break_loop("nowhere")))
    with anyio.fail_after(BOUND), pytest.raises(FutoInError) as info:
        await root.promise()
    assert info.value.code == Errors.LoopBreak
    assert "nowhere" in str(root.state.error_info)


# -- 5. async_stack is the path through the branch ------------------------------------------------


async def test_async_stack_runs_through_the_branch() -> None:
    def c(asi: AsyncSteps) -> None:
        asi.error("Fail")

    def br(asi: AsyncSteps) -> None:
        asi.add(c)

    def p(asi: AsyncSteps) -> None:
        asi.parallel().add(br)

    root = AsyncSteps()
    root.add(p)
    with anyio.fail_after(BOUND), pytest.raises(FutoInError):
        await root.promise()
    stack = list(root.state.async_stack)
    assert stack[0] is p
    assert stack[-2:] == [br, c]
    assert len(stack) == 4  # p, the parallel step, br, c


async def test_async_stack_sequential_is_unchanged() -> None:
    def c(asi: AsyncSteps) -> None:
        asi.error("Fail")

    def b(asi: AsyncSteps) -> None:
        asi.add(c)

    def a(asi: AsyncSteps) -> None:
        asi.add(b)

    root = AsyncSteps()
    root.add(a)
    with anyio.fail_after(BOUND), pytest.raises(FutoInError):
        await root.promise()
    assert list(root.state.async_stack) == [a, b, c]
