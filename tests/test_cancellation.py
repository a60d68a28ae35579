"""Cancellation: root cancel(), outer cancel scopes, failing parallel branches, timeouts.

The orders asserted here are the reference implementation's (checked with npm
futoin-asyncsteps 2.5): at each level the cancel handler runs before the error handler.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import anyio
import pytest
from anyio import get_cancelled_exc_class
from anyio.lowlevel import checkpoint
from scope_support import deadline_once_blocked

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError

pytestmark = pytest.mark.anyio


def waiting(name: str, log: list[str]) -> Any:
    """A step that waits for an external event, logging its cancellation."""

    def step(asi: AsyncSteps, *_: Any) -> None:
        asi.set_cancel(lambda asi: log.append(f"{name} cancel"))

    return step


def nested(log: list[str]) -> AsyncSteps:
    """outer (cancel handler) > inner (cancel handler, waiting), both with error handlers."""

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("outer cancel"))
        asi.add(waiting("inner", log), lambda asi, e: log.append(f"inner onerror {e}"))

    asi = AsyncSteps()
    asi.add(outer, lambda asi, e: log.append(f"outer onerror {e}"))
    asi.add(lambda asi: log.append("after"))
    return asi


async def test_root_cancel_runs_cancel_handlers_innermost_first() -> None:
    log: list[str] = []
    asi = nested(log)
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            with pytest.raises(FutoInError) as info:
                await asi.promise()
            log.append(info.value.code)

        tg.start_soon(run)
        await _settle()
        asi.cancel()
    assert log == ["inner cancel", "outer cancel", Errors.Cancelled]
    assert not asi


async def test_outer_scope_cancellation_propagates_unchanged() -> None:
    log: list[str] = []
    asi = nested(log)
    caught: list[BaseException] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    await asi.promise()
                except BaseException as exc:
                    caught.append(exc)
                    raise

            tg.start_soon(run)
            await _settle()
            scope.cancel()
    assert scope.cancelled_caught
    assert len(caught) == 1
    assert isinstance(caught[0], get_cancelled_exc_class())
    assert log == ["inner cancel", "outer cancel"]


async def test_move_on_after_cancels_steps() -> None:
    log: list[str] = []
    asi = nested(log)
    async with deadline_once_blocked() as scope:
        await asi.promise()
    assert scope.cancelled_caught
    assert log == ["inner cancel", "outer cancel"]


async def test_error_unwinds_cancel_then_error_handler_per_level() -> None:
    log: list[str] = []

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("outer cancel"))

        def inner(asi: AsyncSteps) -> None:
            asi.set_cancel(lambda asi: log.append("inner cancel"))
            asi.tool.immediate(lambda: _ignore(asi.error, "E2"))

        asi.add(inner, lambda asi, e: log.append(f"inner onerror {e}"))

    asi = AsyncSteps()
    asi.add(outer, lambda asi, e: log.append(f"outer onerror {e}"))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == "E2"
    assert log == ["inner cancel", "inner onerror E2", "outer cancel", "outer onerror E2"]


async def test_own_cancel_handler_runs_when_step_fails_synchronously() -> None:
    log: list[str] = []

    def step(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel"))
        asi.error("E1")

    asi = AsyncSteps()
    asi.add(step, lambda asi, e: log.append(f"onerror {e}"))
    with pytest.raises(FutoInError):
        await asi.promise()
    assert log == ["cancel", "onerror E1"]


async def test_parallel_failure_cancels_siblings_then_parallel_onerror() -> None:
    log: list[str] = []

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("outer cancel"))
        par = asi.parallel(lambda asi, e: log.append(f"par onerror {e}"))
        par.add(waiting("b0", log), lambda asi, e: log.append(f"b0 onerror {e}"))

        def b1(asi: AsyncSteps) -> None:
            asi.add(waiting("b1 inner", log))
            asi.set_cancel(lambda asi: log.append("b1 cancel"))

        par.add(b1, lambda asi, e: log.append(f"b1 onerror {e}"))

        def b2(asi: AsyncSteps) -> None:
            def b2_inner(asi: AsyncSteps) -> None:
                asi.tool.immediate(lambda: _ignore(asi.error, "BE"))
                asi.set_cancel(lambda asi: log.append("b2 inner cancel"))

            asi.add(b2_inner, lambda asi, e: log.append(f"b2 inner onerror {e}"))

        par.add(b2, lambda asi, e: log.append(f"b2 onerror {e}"))
        par.add(lambda asi: log.append("b3"))

    asi = AsyncSteps()
    asi.add(outer, lambda asi, e: log.append(f"outer onerror {e}"))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == "BE"
    assert log == [
        "b3",
        "b2 inner cancel",
        "b2 inner onerror BE",
        "b2 onerror BE",
        "b0 cancel",
        "b1 inner cancel",
        "b1 cancel",
        "par onerror BE",
        "outer cancel",
        "outer onerror BE",
    ]


async def test_parallel_onerror_can_recover() -> None:
    asi = AsyncSteps()
    asi.parallel(lambda asi, e: asi.success("recovered")).add(lambda asi: asi.error("Q")).add(
        lambda asi: None
    )
    asi.add(lambda asi, *args: asi.success(args))
    assert await asi.promise() == ("recovered",)


async def test_no_task_left_after_failed_parallel() -> None:
    """Coroutine steps of cancelled branches end before promise() raises."""
    ended: list[str] = []
    started = anyio.Event()

    async def slow(asi: AsyncSteps) -> None:
        try:
            started.set()
            await anyio.sleep_forever()
        finally:
            ended.append("slow")

    async def failing(asi: AsyncSteps) -> None:
        await started.wait()
        asi.error("Boom")

    tasks_before = len(_all_tasks())
    asi = AsyncSteps()
    asi.parallel().add(slow).add(slow).add(failing)
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == "Boom"
    assert ended == ["slow", "slow"]
    assert len(_all_tasks()) == tasks_before  # every task of the root has ended


async def test_cancellation_of_coroutine_step_by_outer_scope() -> None:
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        try:
            await anyio.sleep_forever()
        except get_cancelled_exc_class():
            log.append("coroutine cancelled")
            raise

    asi = AsyncSteps()
    asi.add(step)
    async with deadline_once_blocked():
        await asi.promise()
    assert sorted(log) == ["cancel handler", "coroutine cancelled"]


async def test_cancel_from_inside_a_step_stops_the_root() -> None:
    log: list[str] = []
    asi = AsyncSteps()

    def step(inner: AsyncSteps) -> None:
        inner.set_cancel(lambda _: log.append("cancel handler"))
        asi.cancel()
        log.append("step returned")

    asi.add(step)
    asi.add(lambda _: log.append("must not run"))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == Errors.Cancelled
    assert log == ["step returned", "cancel handler"]


async def test_cancel_handler_error_while_cancelling_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("outer cancel"))

        def inner(asi: AsyncSteps) -> None:
            def bad(asi: AsyncSteps) -> None:
                raise RuntimeError("in cancel handler")

            asi.set_cancel(bad)

        asi.add(inner)

    asi = AsyncSteps()
    asi.add(outer)
    async with deadline_once_blocked():
        await asi.promise()
    assert log == ["outer cancel"]
    assert "in cancel handler" in caplog.text


async def test_cancel_handler_error_while_unwinding_replaces_error() -> None:
    log: list[Any] = []

    def step(asi: AsyncSteps) -> None:
        def bad(asi: AsyncSteps) -> None:
            raise RuntimeError("oops")

        asi.set_cancel(bad)
        asi.error("Original")

    asi = AsyncSteps()
    asi.add(step, lambda asi, e: log.append((e, asi.state.error_info)))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert log == [(Errors.InternalError, "RuntimeError: oops")]
    assert isinstance(info.value.__cause__, RuntimeError)


async def test_keyboard_interrupt_is_never_swallowed() -> None:
    log: list[str] = []

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel"))
        asi.add(lambda asi: _raise(KeyboardInterrupt()), lambda asi, e: log.append("onerror"))

    asi = AsyncSteps()
    asi.add(outer, lambda asi, e: log.append("outer onerror"))
    with pytest.raises(KeyboardInterrupt):
        await asi.promise()
    assert log == ["cancel"]


async def test_backend_cancellation_raised_by_step_is_not_turned_into_error() -> None:
    cancelled = get_cancelled_exc_class()
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await checkpoint()
        log.append("inner scope absorbed its own cancellation")

    asi = AsyncSteps()
    asi.add(step, lambda asi, e: log.append(f"onerror {e}"))
    await asi.promise()
    assert log == ["inner scope absorbed its own cancellation"]
    assert cancelled is not None


async def test_execute_roots_cancelled_when_tool_block_is_cancelled() -> None:
    log: list[str] = []
    with anyio.move_on_after(0.01):
        async with AsyncTool():
            nested(log).execute()
            await anyio.sleep_forever()
    assert log == ["inner cancel", "outer cancel"]


def _ignore(func: Any, *args: Any) -> None:
    with contextlib.suppress(FutoInError):
        func(*args)


def _raise(exc: BaseException) -> None:
    raise exc


def _all_tasks() -> list[Any]:
    import sniffio

    if sniffio.current_async_library() == "trio":
        import trio

        root = trio.lowlevel.current_root_task()
        assert root is not None
        out: list[Any] = []
        stack = [root]
        while stack:
            task = stack.pop()
            out.append(task)
            for nursery in task.child_nurseries:
                stack.extend(nursery.child_tasks)
        return out
    import asyncio

    return list(asyncio.all_tasks())


async def _settle() -> None:
    for _ in range(10):
        await checkpoint()


async def test_failing_branch_waits_for_sibling_coroutines_before_parallel_onerror() -> None:
    """Task-group semantics: the cancelled siblings' coroutines end, then their cancel handlers
    run (as under ``cancel()`` and a timeout), before the error goes on."""
    log: list[str] = []
    started = anyio.Event()

    async def sibling(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("sibling cancel handler"))
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # an async clean-up that takes a while
            log.append("sibling task ended")

    async def failing(asi: AsyncSteps) -> None:
        await started.wait()
        asi.error("Boom")

    asi = AsyncSteps()
    asi.parallel(lambda asi, e: log.append(f"par onerror {e}")).add(sibling).add(failing)
    asi.add(lambda asi: log.append("must not run"))
    with pytest.raises(FutoInError, match="Boom"):
        await asi.promise()
    assert log == ["sibling task ended", "sibling cancel handler", "par onerror Boom"]


async def test_error_unwinding_through_parallel_waits_for_branch_coroutines() -> None:
    log: list[str] = []

    async def branch(asi: AsyncSteps) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)
            log.append("branch task ended")

    def outer(asi: AsyncSteps) -> None:
        asi.parallel().add(branch).add(lambda b: b.wait_external())
        assert asi.tool is not None
        asi.tool.deferred(5, lambda: None)

    def trigger(asi: AsyncSteps) -> None:
        asi.set_timeout(20)
        asi.add(outer)

    asi = AsyncSteps()
    asi.add(trigger, lambda asi, e: log.append(f"onerror {e}"))
    with pytest.raises(FutoInError, match="Timeout"):
        await asi.promise()
    assert log == ["branch task ended", "onerror Timeout"]


@pytest.mark.parametrize("how", ["cancel()", "outer scope", "timeout"])
async def test_coroutine_step_ends_before_outer_cancel_handlers(how: str) -> None:
    """However the root is stopped, the inner task's finally runs before the outer handlers,
    so an outer cancel handler never releases what the inner task still uses."""
    log: list[str] = []
    started = anyio.Event()

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("A_cancel"))
        if how == "timeout":
            asi.set_timeout(20)
        asi.add(inner)

    async def inner(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("B_cancel"))
        started.set()
        try:
            await anyio.sleep(10)
        finally:
            log.append("B finally")

    root = AsyncSteps()
    root.add(outer)
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            with contextlib.suppress(FutoInError), anyio.CancelScope() as scope:
                outer_scope.append(scope)
                await root.promise()

        outer_scope: list[anyio.CancelScope] = []
        tg.start_soon(run)
        await started.wait()
        if how == "cancel()":
            root.cancel()
        elif how == "outer scope":
            outer_scope[0].cancel()
    assert log == ["B finally", "B_cancel", "A_cancel"]


@pytest.mark.parametrize("how", ["exception", "outer scope"])
async def test_tool_block_left_early_ends_coroutines_before_cancel_handlers(how: str) -> None:
    log: list[str] = []
    started = anyio.Event()

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("A_cancel"))
        asi.add(inner)

    async def inner(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("B_cancel"))
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)
            log.append("B finally")

    with contextlib.suppress(RuntimeError), anyio.CancelScope() as scope:
        async with AsyncTool():
            root = AsyncSteps()
            root.add(outer)
            root.execute()
            await started.wait()
            if how == "exception":
                raise RuntimeError("leave the block")
            scope.cancel()
            await anyio.sleep_forever()
    assert log == ["B finally", "B_cancel", "A_cancel"]


async def test_a_flow_that_never_awaits_yields_each_burst_and_is_cancelled_from_outside() -> None:
    """An endless loop of plain steps yields to the event loop once a burst (the backend's own
    checkpoint): another task runs between bursts, and its cancellation of the scope around
    ``promise()`` ends the loop with the backend's cancellation, which the scope catches."""
    from futoin_anyio._driver import BURST

    iterations = 0
    seen: list[int] = []

    def body(asi: AsyncSteps) -> None:
        nonlocal iterations
        iterations += 1

    root = AsyncSteps()
    root.add(lambda asi: asi.loop(body))
    with anyio.fail_after(30):  # a swallowed cancellation would loop for ever
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def between_bursts() -> None:
                    for _ in range(3):
                        await checkpoint()
                        seen.append(iterations)
                    scope.cancel()

                tg.start_soon(between_bursts)
                await root.promise()
    assert scope.cancelled_caught
    # The loop's first burst ran before the other task's first turn, and it went on between
    # that task's turns: at most a burst on each side of a turn of the scheduler (trio orders
    # the tasks of a turn at random).
    assert len(seen) == 3 and seen == sorted(seen) and seen[0] >= BURST
    assert all(later - earlier <= 2 * BURST for earlier, later in itertools.pairwise(seen))
    assert iterations - seen[2] <= 2 * BURST  # and the cancellation got in at the next yield
