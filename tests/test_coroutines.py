"""async def steps and await_() (§1.13): each runs as a task inside its step's cancel scope."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import sniffio

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError

pytestmark = pytest.mark.anyio


async def test_async_step_result_becomes_success_argument() -> None:
    async def add(asi: AsyncSteps, a: int, b: int) -> int:
        await anyio.lowlevel.checkpoint()
        return a + b

    asi = AsyncSteps()
    asi.add(lambda asi: asi.success(1, 2)).add(add)
    asi.add(lambda asi, total: asi.success(total * 10))
    assert await asi.promise() == 30


async def test_async_step_returning_none_passes_no_arguments() -> None:
    async def nothing(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()

    asi = AsyncSteps()
    asi.add(nothing).add(lambda asi, *args: asi.success(args))
    assert await asi.promise() == ()


async def test_async_step_sub_steps_run_after_it_returns() -> None:
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        asi.add(lambda asi: log.append("sub-step"))
        await anyio.lowlevel.checkpoint()
        log.append("coroutine done")

    asi = AsyncSteps()
    asi.add(step)
    await asi.promise()
    assert log == ["coroutine done", "sub-step"]


async def test_async_step_exceptions_reach_error_handlers() -> None:
    async def futoin_error(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        asi.error("Async", "info")

    async def plain_error(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        raise KeyError("k")

    seen: list[Any] = []
    asi = AsyncSteps()
    def recover(asi: AsyncSteps, code: str) -> None:
        seen.append((code, asi.state.error_info))
        asi.success()

    asi.add(futoin_error, recover)
    asi.add(plain_error, recover)
    await asi.promise()
    assert seen == [("Async", "info"), (Errors.InternalError, "KeyError: 'k'")]


async def test_success_inside_async_step_is_misuse() -> None:
    async def step(asi: AsyncSteps) -> None:
        asi.success(1)

    asi = AsyncSteps()
    asi.add(step)
    with pytest.raises(FutoInError, match="return the result instead"):
        await asi.promise()


async def test_await_coroutine_and_native_future() -> None:
    async def compute() -> str:
        await anyio.lowlevel.checkpoint()
        return "value"

    asi = AsyncSteps()
    asi.await_(compute())
    asi.add(lambda asi, v: asi.success(v.upper()))
    assert await asi.promise() == "VALUE"

    if sniffio.current_async_library() == "asyncio":
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        asi = AsyncSteps()
        asi.await_(fut)
        asyncio.get_running_loop().call_soon(fut.set_result, 7)
        assert await asi.promise() == 7


async def test_await_error_handler_and_non_awaitable() -> None:
    async def fail() -> None:
        raise RuntimeError("nope")

    asi = AsyncSteps()
    asi.await_(fail(), lambda asi, e: asi.success(asi.state.error_info))
    assert await asi.promise() == "RuntimeError: nope"
    with pytest.raises(FutoInError, match="expected an awaitable"):
        AsyncSteps().await_(5)  # type: ignore[arg-type]


async def test_root_cancel_cancels_a_running_coroutine() -> None:
    log: list[str] = []
    started = anyio.Event()

    async def step(asi: AsyncSteps) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            log.append("coroutine ended")

    asi = AsyncSteps()
    asi.add(step)

    async def run() -> None:
        with pytest.raises(FutoInError, match="Cancelled"):
            await asi.promise()
        log.append("promise raised")

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await started.wait()
        asi.cancel()
    assert log == ["coroutine ended", "promise raised"]


async def test_async_steps_under_execute_in_tool() -> None:
    results: list[int] = []

    async def step(asi: AsyncSteps, i: int) -> int:
        await anyio.lowlevel.checkpoint()
        return i * 2

    async with AsyncTool() as tool:
        for i in range(5):
            asi = AsyncSteps()
            asi.add(lambda asi, i=i: asi.success(i)).add(step)
            asi.add(lambda asi, v: results.append(v))
            asi.execute()
        assert tool.statistics().roots == 5
    assert sorted(results) == [0, 2, 4, 6, 8]
    assert tool.statistics().tasks == 0


async def test_coroutine_cancelled_before_it_started_is_closed() -> None:
    """No 'coroutine was never awaited' warning (warnings are errors in this suite)."""

    async def step(asi: AsyncSteps) -> None:
        await anyio.sleep_forever()

    asi = AsyncSteps()
    asi.add(step)
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(asi.promise)
            await anyio.lowlevel.checkpoint()
            scope.cancel()
    assert scope.cancelled_caught


async def test_keyboard_interrupt_in_async_step_is_raised_bare() -> None:
    """Never an ExceptionGroup from our internal task group."""

    async def step(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        raise KeyboardInterrupt

    asi = AsyncSteps()
    asi.add(step)
    with pytest.raises(KeyboardInterrupt):
        await asi.promise()


async def test_futoin_error_from_async_step_is_never_grouped() -> None:
    async def step(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        asi.error("Plain")

    asi = AsyncSteps()
    asi.parallel().add(step).add(step)
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert type(info.value) is FutoInError
    assert info.value.code == "Plain"


async def test_keyboard_interrupt_in_async_step_under_tool_is_raised_bare() -> None:
    async def step(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        raise KeyboardInterrupt

    log: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        async with AsyncTool():
            waiting = AsyncSteps()
            waiting.add(lambda asi: asi.set_cancel(lambda _: log.append("cancel handler")))
            waiting.execute()
            asi = AsyncSteps()
            asi.add(step)
            asi.execute()
            await anyio.sleep_forever()
    assert log == ["cancel handler"]


async def test_keyboard_interrupt_in_sync_step_under_tool_leaves_the_tool_block() -> None:
    log: list[str] = []

    def step(asi: AsyncSteps) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        async with AsyncTool():
            waiting = AsyncSteps()
            waiting.add(lambda asi: asi.set_cancel(lambda _: log.append("cancel handler")))
            waiting.execute()
            asi = AsyncSteps()
            asi.add(step)
            asi.execute()
            await anyio.sleep_forever()
    assert log == ["cancel handler"]


async def test_cancel_before_the_coroutine_task_starts_runs_the_cancel_handlers() -> None:
    """A root cancelled after its ``async def`` step's task was started but before it ran: the
    coroutine never runs, the cancel handlers run at once (found by the service chaos test:
    the cancel waited for a task that ran the step to its end, or for ever)."""
    calls: list[str] = []

    async def forever(asi: AsyncSteps) -> None:
        calls.append("coroutine ran")
        await anyio.sleep_forever()

    with anyio.fail_after(5):
        async with AsyncTool() as tool:
            root = AsyncSteps()

            def outer(asi: AsyncSteps) -> None:
                asi.set_cancel(lambda asi: calls.append("cancel handler"))
                asi.add(forever)
                tool.immediate(root.cancel)  # runs in this burst, before the step's task

            root.add(outer)
            root.execute()
    assert calls == ["cancel handler"]
    assert not root


class _Awaitable:
    """An awaitable that is no coroutine: ``await_()`` wraps it in a coroutine of its own."""

    def __await__(self) -> Any:
        yield from anyio.lowlevel.checkpoint().__await__()
        return 5


async def test_await_of_an_awaitable_that_is_no_coroutine() -> None:
    """In the compiled build the wrapper is a compiled coroutine (no ``CoroutineType``): the
    step still awaits it, and its value is the step's result."""
    asi = AsyncSteps()
    asi.await_(_Awaitable())
    asi.add(lambda asi, v: asi.success(v * 2))
    assert await asi.promise() == 10
