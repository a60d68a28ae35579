"""What comes out of a nursery or task group inside an ``async def`` step.

A group of nothing but the backend's cancellation is a cancellation: the step was cancelled (its
timeout, ``asi.cancel()``, an outer scope). A group with real errors is an error, judged by its
leaves. ``TimeoutError`` and ``trio.TooSlowError`` are ``Timeout``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from backend_support import first_branch_inline
from scope_support import deadline_once_blocked

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

pytestmark = pytest.mark.anyio

trio_only = pytest.mark.parametrize("anyio_backend", ["trio"])


async def _in_task_group(child: Callable[[], Coroutine[Any, Any, Any]], *,
                         nested: bool = False) -> None:
    """Run ``child`` in a task group (two levels with ``nested``) beside a sleeping sibling."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep_forever)
        if nested:
            tg.start_soon(_in_task_group, child)
        else:
            tg.start_soon(child)
        await anyio.sleep_forever()


async def _in_trio_nursery(child: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    import trio

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever)
        nursery.start_soon(child)
        await trio.sleep_forever()


def _timed_root(body: Callable[[AsyncSteps], Awaitable[None]], log: list[str]) -> AsyncSteps:
    async def step(asi: AsyncSteps) -> None:
        asi.set_timeout(20)
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        try:
            await body(asi)
        finally:
            log.append("coroutine finally")

    def onerror(asi: AsyncSteps, code: str) -> None:
        log.append(f"onerror {code}")

    asi = AsyncSteps()
    asi.add(step, onerror)
    return asi


# -- cancellation that arrives in a group -----------------------------------------------------


async def test_timeout_inside_a_task_group_is_a_timeout() -> None:
    log: list[str] = []
    asi = _timed_root(lambda asi: _in_task_group(anyio.sleep_forever, nested=True), log)
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == Errors.Timeout
    assert log == ["coroutine finally", "cancel handler", "onerror Timeout"]


@trio_only
async def test_timeout_inside_a_raw_trio_nursery_is_a_timeout() -> None:
    import trio

    log: list[str] = []
    asi = _timed_root(lambda asi: _in_trio_nursery(trio.sleep_forever), log)
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == Errors.Timeout
    assert log == ["coroutine finally", "cancel handler", "onerror Timeout"]


async def test_root_cancel_inside_a_task_group_gives_cancelled() -> None:
    await _check_root_cancel_inside_a_nursery(raw_trio=False)


@trio_only
async def test_root_cancel_inside_a_raw_trio_nursery_gives_cancelled() -> None:
    await _check_root_cancel_inside_a_nursery(raw_trio=True)


async def _check_root_cancel_inside_a_nursery(raw_trio: bool) -> None:
    log: list[str] = []
    started = anyio.Event()

    async def child() -> None:
        started.set()
        await anyio.sleep_forever()

    async def step(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        await (_in_trio_nursery(child) if raw_trio else _in_task_group(child))

    asi = AsyncSteps()
    asi.add(step, lambda asi, code: log.append("onerror must not run"))
    result: list[str] = []

    async def request() -> None:
        try:
            await asi.promise()
        except FutoInError as err:
            result.append(err.code)

    async with anyio.create_task_group() as tg:  # a service's own nursery
        tg.start_soon(request)
        await started.wait()
        asi.cancel()
    assert result == [Errors.Cancelled]
    assert log == ["cancel handler"]


async def test_every_reply_arrives_when_requests_time_out_inside_nurseries() -> None:
    """A task per request in the service's nursery: nothing escapes, every request answers."""
    replies: dict[int, str] = {}

    async def handle(i: int) -> None:
        async def backend_call(asi: AsyncSteps) -> str:
            asi.set_timeout(10)
            await _in_task_group(lambda: anyio.sleep(0.001 if i % 2 else 1), nested=bool(i % 3))
            return "ok"

        asi = AsyncSteps()
        asi.add(backend_call)
        try:
            replies[i] = await asi.promise()
        except FutoInError as err:
            replies[i] = err.code

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(handle, i)
    assert sorted(replies) == list(range(20))
    assert {replies[i] for i in range(0, 20, 2)} == {Errors.Timeout}


async def test_outer_cancellation_in_a_group_goes_to_its_owner() -> None:
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        await _in_task_group(anyio.sleep_forever, nested=True)

    asi = AsyncSteps()
    asi.add(step)
    async with deadline_once_blocked() as scope:
        await asi.promise()
    assert scope.cancelled_caught
    assert log == ["cancel handler"]


async def test_root_timing_out_in_a_nursery_under_execute_leaves_others_alone() -> None:
    results: list[str] = []

    async def timed(asi: AsyncSteps) -> None:
        asi.set_timeout(10)
        await _in_task_group(anyio.sleep_forever, nested=True)

    async def other(asi: AsyncSteps) -> str:
        await anyio.sleep(0.05)
        return "other ok"

    async with AsyncTool() as tool:
        first = AsyncSteps()
        first.add(timed)
        first.execute(lambda code: results.append(f"first {code}"))
        second = AsyncSteps()
        second.add(other)
        second.add(lambda asi, v: results.append(v))
        second.execute()
    assert sorted(results) == ["first Timeout", "other ok"]
    assert tool.statistics().tasks == 0


# -- errors through task groups keep their code ---------------------------------------------------


@pytest.mark.parametrize("nested", [False, True])
async def test_futoin_error_inside_a_task_group_keeps_its_code(nested: bool) -> None:
    raised: list[FutoInError] = []

    async def step(asi: AsyncSteps) -> None:
        async def child() -> None:
            await anyio.lowlevel.checkpoint()
            try:
                asi.error("NotFound", "no such item")
            except FutoInError as err:
                raised.append(err)
                raise

        await _in_task_group(child, nested=nested)

    seen: list[Any] = []

    def onerror(asi: AsyncSteps, code: str) -> None:
        seen.append((code, asi.state.error_info, asi.state.last_exception))
        asi.success()

    asi = AsyncSteps()
    asi.add(step, onerror)
    await asi.promise()
    assert seen == [("NotFound", "no such item", raised[0])]


async def test_several_errors_in_a_group_take_the_first_futoin_code() -> None:
    async def step(asi: AsyncSteps) -> None:
        async def boom() -> None:
            raise KeyError("k")

        async def refuse() -> None:
            raise FutoInError("Unauthorized", "who are you")

        async with anyio.create_task_group() as tg:
            tg.start_soon(boom)
            tg.start_soon(refuse)

    seen: list[Any] = []

    def onerror(asi: AsyncSteps, code: str) -> None:
        seen.append((code, asi.state.error_info, type(asi.state.last_exception)))
        asi.success()

    asi = AsyncSteps()
    asi.add(step, onerror)
    await asi.promise()
    assert seen == [("Unauthorized", "who are you", ExceptionGroup)]


async def test_plain_exception_in_a_group_is_internal_error_naming_the_leaf() -> None:
    async def step(asi: AsyncSteps) -> None:
        async def boom() -> None:
            await anyio.lowlevel.checkpoint()
            raise KeyError("k")

        await _in_task_group(boom, nested=True)

    seen: list[Any] = []

    def onerror(asi: AsyncSteps, code: str) -> None:
        seen.append((code, asi.state.error_info))
        seen.append(asi.state.last_exception)
        asi.success()

    asi = AsyncSteps()
    asi.add(step, onerror)
    await asi.promise()
    assert seen[0] == (Errors.InternalError, "KeyError: 'k'")
    assert isinstance(seen[1], BaseExceptionGroup)


async def test_error_beside_a_timeout_cancellation_wins() -> None:
    """A child that fails while its group is being cancelled by the step's timeout: the error
    wins, as in a task group."""

    async def step(asi: AsyncSteps) -> None:
        asi.set_timeout(10)

        async def fails_on_cancel() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                raise ValueError("cleanup failed")

        await _in_task_group(fails_on_cancel)

    seen: list[Any] = []

    def onerror(asi: AsyncSteps, code: str) -> None:
        seen.append((code, asi.state.error_info))
        asi.success()

    asi = AsyncSteps()
    asi.add(step, onerror)
    await asi.promise()
    assert seen == [(Errors.InternalError, "ValueError: cleanup failed")]


# -- a deadline of the user's own ------------------------------------------------------------------


async def test_anyio_fail_after_is_a_timeout() -> None:
    async def step(asi: AsyncSteps) -> None:
        with anyio.fail_after(0.01):
            await anyio.sleep_forever()

    seen: list[Any] = []

    def onerror(asi: AsyncSteps, code: str) -> None:
        seen.append((code, type(asi.state.last_exception)))
        asi.success()

    asi = AsyncSteps()
    asi.add(step, onerror)
    await asi.promise()
    assert seen == [(Errors.Timeout, TimeoutError)]


async def test_timeout_error_from_a_plain_step_is_a_timeout() -> None:
    def step(asi: AsyncSteps) -> None:
        raise TimeoutError("socket read")

    asi = AsyncSteps()
    asi.add(step)
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == Errors.Timeout
    assert isinstance(info.value.__cause__, TimeoutError)


@trio_only
async def test_trio_fail_after_is_a_timeout() -> None:
    import trio

    async def step(asi: AsyncSteps) -> None:
        with trio.fail_after(0.01):
            await trio.sleep_forever()

    seen: list[Any] = []

    def onerror(asi: AsyncSteps, code: str) -> None:
        seen.append((code, type(asi.state.last_exception)))
        asi.success()

    asi = AsyncSteps()
    asi.add(step, onerror)
    await asi.promise()
    assert seen == [(Errors.Timeout, trio.TooSlowError)]


# -- task names ---------------------------------------------------------------------------------


async def branch_step(asi: AsyncSteps) -> None:
    asi.state.names.append(str(anyio.get_current_task().name))


async def test_tasks_of_coroutine_steps_are_named_after_the_step_function() -> None:
    asi = AsyncSteps()
    asi.state.names = []
    asi.parallel().add(branch_step).add(branch_step)
    await asi.promise()
    name = f"{__name__}.branch_step"
    # The first branch to start runs in the caller's task where it can; a task is spawned for
    # the other only.
    first = str(anyio.get_current_task().name) if first_branch_inline() else name
    assert asi.state.names == [first, name]

    names: list[str] = []

    async def root_step(asi: AsyncSteps) -> None:
        names.append(str(anyio.get_current_task().name))

    async with AsyncTool():
        root = AsyncSteps()
        root.add(root_step)
        root.execute()
    assert names == [f"{__name__}.{root_step.__qualname__}"]


async def test_root_cancelled_inside_a_nursery_under_execute_leaves_others_alone() -> None:
    started = anyio.Event()
    log: list[str] = []

    async def in_group(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))

        async def child() -> None:
            started.set()
            await anyio.sleep_forever()

        await _in_task_group(child, nested=True)

    async def other(asi: AsyncSteps) -> str:
        await started.wait()
        await anyio.sleep(0.02)
        return "other ok"

    async with AsyncTool() as tool:
        first = AsyncSteps()
        first.add(in_group)
        first.execute(lambda code: log.append(f"unhandled {code}"))
        second = AsyncSteps()
        second.add(other)
        second.add(lambda asi, v: log.append(v))
        second.execute()
        await started.wait()
        first.cancel()
    assert log == ["cancel handler", "other ok"]
    assert tool.statistics().tasks == 0
