"""The AnyIO-native path: ``async def`` steps of a ``promise()`` root run in the calling task.

While the root's flow runs alone, the driver awaits its coroutine steps itself; everything else
that needs the driver meanwhile (callbacks, timers, other flows) must still happen on time.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from backend_support import own_tasks
from scope_support import deadline_once_blocked

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError, Limiter, Throttle

pytestmark = pytest.mark.anyio

_var: ContextVar[str] = ContextVar("test_native_path_var", default="unset")


def _note(log: list[str], text: str, event: anyio.Event) -> None:
    log.append(text)
    event.set()


async def test_async_step_runs_in_the_callers_task() -> None:
    seen: list[Any] = []

    async def step(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(anyio.get_current_task().id)

    asi = AsyncSteps()
    asi.add(step).add(step)
    await asi.promise()
    me = anyio.get_current_task().id
    assert seen == [me, me]


async def test_contextvar_set_in_async_step_is_seen_by_the_next_steps() -> None:
    seen: list[str] = []

    async def setter(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        _var.set("from step 1")

    async def reader(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(_var.get())

    asi = AsyncSteps()
    asi.add(setter).add(reader).add(lambda asi: seen.append(_var.get()))
    await asi.promise()
    assert seen == ["from step 1", "from step 1"]


async def test_no_task_is_spawned_for_lone_async_steps() -> None:
    during: list[set[str | None]] = []

    async def step(asi: AsyncSteps, i: int) -> None:
        await anyio.lowlevel.checkpoint()
        during.append(own_tasks())

    before = own_tasks()
    asi = AsyncSteps()
    asi.add(lambda asi: asi.repeat(5, step))
    await asi.promise()
    assert all(tasks == before for tasks in during)
    assert own_tasks() == before


async def test_timeout_of_the_async_step_itself() -> None:
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        asi.set_timeout(20)
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        try:
            await anyio.sleep_forever()
        finally:
            log.append("coroutine finally")

    def onerror(asi: AsyncSteps, code: str) -> None:
        log.append(f"onerror {code}")
        asi.success("recovered")

    asi = AsyncSteps()
    asi.add(step, onerror)
    assert await asi.promise() == "recovered"
    assert log == ["coroutine finally", "cancel handler", "onerror Timeout"]


async def test_timeout_of_an_enclosing_step_reaches_the_inline_coroutine() -> None:
    log: list[str] = []

    async def inner(asi: AsyncSteps) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            log.append("inner finally")

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(20)
        asi.add(inner, lambda asi, code: log.append(f"inner onerror {code}"))

    asi = AsyncSteps()
    asi.add(outer, lambda asi, code: log.append(f"outer onerror {code}"))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == Errors.Timeout
    assert log == ["inner finally", "inner onerror Timeout", "outer onerror Timeout"]


async def test_replaced_or_finished_timeouts_never_cancel_a_later_coroutine() -> None:
    """The shared scope's deadline follows the flow's timeouts: none fires after it ended."""
    done: list[int] = []

    async def body(asi: AsyncSteps, i: int) -> None:
        if i == 0:
            asi.set_timeout(5)  # this step ends at once: its timeout goes with it
        elif i == 1:
            await anyio.sleep(0.05)
        else:
            asi.set_timeout(5)
            asi.set_timeout(10_000)  # replaces the 5 ms limit
            await anyio.sleep(0.05)
        done.append(i)

    asi = AsyncSteps()
    asi.add(lambda asi: asi.repeat(3, body))
    await asi.promise()
    assert done == [0, 1, 2]


async def test_root_cancel_from_another_task_while_inline() -> None:
    log: list[str] = []
    started = anyio.Event()

    async def step(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            log.append("coroutine finally")

    asi = AsyncSteps()
    asi.add(step, lambda asi, code: log.append("onerror must not run"))

    async def run() -> None:
        with pytest.raises(FutoInError) as info:
            await asi.promise()
        assert info.value.code == Errors.Cancelled
        log.append("promise raised")

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await started.wait()
        asi.cancel()
    assert log == ["coroutine finally", "cancel handler", "promise raised"]


async def test_outer_cancellation_while_inline_propagates_unchanged() -> None:
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            log.append("backend cancellation")
            raise

    asi = AsyncSteps()
    asi.add(step)
    async with deadline_once_blocked() as scope:
        await asi.promise()
        log.append("not reached")
    assert scope.cancelled_caught
    assert log == ["backend cancellation", "cancel handler"]


async def test_tool_callbacks_run_on_time_while_a_coroutine_awaits_inline() -> None:
    """An ``immediate()`` and a ``deferred()`` callback complete the very thing the inline
    coroutine waits for: without a helper serving the driver, this would hang."""
    log: list[str] = []

    async def step(asi: AsyncSteps) -> str:
        tool = asi.tool
        assert tool is not None
        fired = anyio.Event()
        later = anyio.Event()
        tool.immediate(lambda: _note(log, "immediate", fired))
        tool.deferred(10, lambda: _note(log, "deferred", later))
        with anyio.fail_after(5):
            await fired.wait()
            await later.wait()
        return "done"

    asi = AsyncSteps()
    asi.add(step)
    before = own_tasks()
    assert await asi.promise() == "done"
    assert log == ["immediate", "deferred"]
    assert own_tasks() == before  # the helper task ended with the inline run


async def test_immediate_from_a_thread_while_inline() -> None:
    async def step(asi: AsyncSteps) -> None:
        tool = asi.tool
        assert tool is not None
        fired = anyio.Event()

        def from_thread() -> None:
            tool.immediate(lambda: fired.set())

        thread = threading.Thread(target=from_thread)
        thread.start()
        with anyio.fail_after(5):
            await fired.wait()
        await anyio.to_thread.run_sync(thread.join)

    asi = AsyncSteps()
    asi.add(step)
    await asi.promise()


async def test_another_root_in_the_same_driver_runs_while_inline() -> None:
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        other = asi.new_instance()
        released = anyio.Event()
        other.add(lambda asi: _note(log, "other root", released))
        other.execute()
        with anyio.fail_after(5):
            await released.wait()
        log.append("inline step done")

    asi = AsyncSteps()
    asi.add(step)
    async with AsyncTool():
        await asi.promise()
    assert log == ["other root", "inline step done"]


async def test_waiting_step_of_another_flow_completed_while_inline() -> None:
    """A root executed into the promise's driver waits; the inline coroutine completes it."""
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        other = AsyncSteps(tool=asi.tool)
        waiting: list[AsyncSteps] = []
        finished = anyio.Event()

        def wait(asi: AsyncSteps) -> None:
            waiting.append(asi)
            asi.wait_external()

        other.add(wait).add(lambda asi, v: _note(log, f"other got {v}", finished))
        other.execute()
        with anyio.fail_after(5):
            while not waiting:
                await anyio.lowlevel.checkpoint()
            waiting[0].success(42)
            await finished.wait()

    asi = AsyncSteps()
    asi.add(step)
    await asi.promise()
    assert log == ["other got 42"]


async def test_parallel_async_branches_still_run_concurrently() -> None:
    first = anyio.Event()
    second = anyio.Event()

    async def a(asi: AsyncSteps) -> None:
        first.set()
        with anyio.fail_after(5):
            await second.wait()

    async def b(asi: AsyncSteps) -> None:
        second.set()
        with anyio.fail_after(5):
            await first.wait()

    asi = AsyncSteps()
    asi.parallel().add(a).add(b)
    await asi.promise()
    assert first.is_set() and second.is_set()


async def test_async_steps_after_a_parallel_run_inline_again() -> None:
    seen: list[object] = []

    async def branch(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()

    async def after(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(anyio.get_current_task().id)

    asi = AsyncSteps()
    asi.parallel().add(branch).add(branch)
    asi.add(after)
    await asi.promise()
    assert seen == [anyio.get_current_task().id]


async def test_throttle_timer_fires_while_a_section_awaits_inline() -> None:
    """A Throttle's period timer lives in the promise's driver while its section awaits."""
    throttle = Throttle(1, period_ms=20)
    entered: list[int] = []
    second_in = anyio.Event()

    async def section(asi: AsyncSteps, i: int) -> None:
        entered.append(i)
        if i == 0:
            with anyio.fail_after(5):
                await second_in.wait()
        else:
            second_in.set()

    async def run(i: int) -> None:
        asi = AsyncSteps()
        asi.add(lambda asi: asi.success(i))
        asi.sync(throttle, section)
        await asi.promise()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0)
        await anyio.sleep(0.005)
        tg.start_soon(run, 1)
    assert entered == [0, 1]


async def test_limiter_released_by_inline_section_lets_the_next_in() -> None:
    limiter = Limiter(concurrent=1, max_queue=10, rate=100, period_ms=1000)
    order: list[str] = []

    async def section(asi: AsyncSteps, name: str) -> str:
        order.append(f"{name} in")
        await anyio.sleep(0.005)
        order.append(f"{name} out")
        return name

    async def run(name: str) -> None:
        asi = AsyncSteps()
        asi.add(lambda asi: asi.success(name))
        asi.sync(limiter, section)
        assert await asi.promise() == name

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c"):
            tg.start_soon(run, name)
    # One at a time (trio starts the three tasks in any order).
    assert len(order) == 6
    for i in range(0, 6, 2):
        name = order[i].split()[0]
        assert order[i : i + 2] == [f"{name} in", f"{name} out"]


async def test_keyboard_interrupt_after_an_inline_coroutine_is_raised_bare() -> None:
    async def first(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()

    def second(asi: AsyncSteps) -> None:
        raise KeyboardInterrupt

    log: list[str] = []

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        asi.add(first).add(second)

    asi = AsyncSteps()
    asi.add(outer)
    before = own_tasks()
    with pytest.raises(KeyboardInterrupt):
        await asi.promise()
    assert log == ["cancel handler"]
    assert own_tasks() == before


async def test_error_handler_between_inline_coroutines() -> None:
    seen: list[Any] = []

    async def fails(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        asi.error("First", "info")

    async def after(asi: AsyncSteps, value: str) -> str:
        await anyio.lowlevel.checkpoint()
        seen.append(anyio.get_current_task().id)
        return value.upper()

    asi = AsyncSteps()
    asi.add(fails, lambda asi, code: asi.success(code))
    asi.add(after)
    assert await asi.promise() == "FIRST"
    assert seen == [anyio.get_current_task().id]


async def test_a_coroutine_of_another_root_started_while_inline_ends_with_the_promise() -> None:
    """A root executed into the promise's driver reaches an ``async def`` step while the
    caller awaits inline: it runs concurrently (the inline step waits for it), and when the
    promise returns it has been cancelled and its coroutine's ``finally`` has run."""
    log: list[str] = []
    started = anyio.Event()

    async def other_step(asi: AsyncSteps) -> None:
        log.append("other started")
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            log.append("other finally")

    async def step(asi: AsyncSteps) -> None:
        other = asi.new_instance()
        def outer(asi: AsyncSteps) -> None:
            asi.set_cancel(lambda asi: log.append("other cancelled"))
            asi.add(other_step)

        other.add(outer)
        other.execute()
        with anyio.fail_after(5):
            await started.wait()
        log.append("inline step done")

    asi = AsyncSteps()
    asi.add(step)
    with anyio.fail_after(5):
        await asi.promise()
    assert log[:2] == ["other started", "inline step done"]
    assert log[2:] == ["other finally", "other cancelled"]  # as in a task group


async def test_outer_cancellation_while_a_helper_serves_the_driver() -> None:
    """The inline step has a timer of its own pending (so a helper task serves the driver):
    an outer cancellation still propagates unchanged, the helper ends, the timer never fires."""
    fired: list[str] = []
    handles: list[Any] = []

    async def step(asi: AsyncSteps) -> None:
        tool = asi.tool
        assert tool is not None
        handles.append(tool.deferred(60_000, lambda: fired.append("deferred")))
        tool.immediate(lambda: fired.append("immediate"))
        await anyio.sleep_forever()

    asi = AsyncSteps()
    asi.add(step)
    with anyio.fail_after(5), anyio.move_on_after(0.05) as scope:
        await asi.promise()
    assert scope.cancelled_caught
    assert fired == ["immediate"]
    assert not handles[0].is_valid()


async def test_promise_is_a_cancel_point() -> None:
    """A task whose scope is already cancelled does not start the root."""
    ran: list[str] = []
    asi = AsyncSteps()
    asi.add(lambda asi: ran.append("step"))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await asi.promise()
    assert scope.cancelled_caught
    assert ran == []


async def test_a_loop_of_instant_promises_lets_other_tasks_run() -> None:
    """Roots that complete at once make a schedule point every so often (not on every call,
    which would cost a task switch each): another task keeps running meanwhile."""
    turns = [0]
    done = anyio.Event()

    async def other() -> None:
        while not done.is_set():
            turns[0] += 1
            await anyio.lowlevel.checkpoint()

    calls = 1600
    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        await anyio.lowlevel.checkpoint()
        start = turns[0]
        for _ in range(calls):
            asi = AsyncSteps()
            asi.add(lambda asi: asi.success(1)).add(lambda asi, one: None)
            await asi.promise()
        served = turns[0] - start
        done.set()
    assert calls // 32 <= served <= calls // 4, served


async def test_keyboard_interrupt_of_another_roots_coroutine_as_the_promise_ends() -> None:
    """A coroutine of a root executed into the promise's driver (started while the caller was
    inline) raises ``KeyboardInterrupt`` as the promise ends and cancels it: not lost, raised
    bare by ``promise()``."""
    started = anyio.Event()

    async def other_step(asi: AsyncSteps) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            raise KeyboardInterrupt

    async def step(asi: AsyncSteps) -> None:
        other = asi.new_instance()
        other.add(other_step)
        other.execute()
        with anyio.fail_after(5):
            await started.wait()

    asi = AsyncSteps()
    asi.add(step)
    with anyio.fail_after(5), pytest.raises(KeyboardInterrupt):
        await asi.promise()


async def test_root_cancelled_before_its_next_inline_coroutine_starts() -> None:
    """In one burst of the driver, the flow reaches an ``async def`` step (to be awaited inline
    next) and then a callback cancels the root: the coroutine never runs, the cancel handlers
    run, ``promise()`` raises ``Cancelled``."""
    log: list[str] = []

    async def never(asi: AsyncSteps) -> None:
        log.append("coroutine ran")

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        asi.add(waiting).add(never)

    def waiting(asi: AsyncSteps) -> None:
        tool = asi.tool
        assert tool is not None
        asi.wait_external()

        def resume() -> None:
            asi.success()  # the flow is queued first: it reaches never() in this burst
            tool.immediate(root.cancel)  # ...and then the root is cancelled

        tool.immediate(resume)

    root = AsyncSteps()
    root.add(outer)
    with anyio.fail_after(5), pytest.raises(FutoInError) as caught:
        await root.promise()
    assert caught.value.code == Errors.Cancelled
    assert log == ["cancel handler"]


async def test_keyboard_interrupt_in_a_callback_served_by_the_helper() -> None:
    """A callback run by the helper task (while the caller awaits inline) raises
    ``KeyboardInterrupt``: the inline coroutine is interrupted (its ``finally`` runs), the cancel
    handlers run, and ``promise()`` raises it bare."""
    log: list[str] = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    async def step(asi: AsyncSteps) -> None:
        tool = asi.tool
        assert tool is not None
        tool.immediate(interrupt)
        try:
            await anyio.sleep_forever()
        finally:
            log.append("coroutine finally")

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        asi.add(step)

    root = AsyncSteps()
    root.add(outer)
    with anyio.fail_after(5), pytest.raises(KeyboardInterrupt):
        await root.promise()
    assert log == ["coroutine finally", "cancel handler"]
