"""Results that carry across: parallel branches hand back values, promise_as(), asi.tool."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError, promise_as

pytestmark = pytest.mark.anyio


async def test_parallel_results_in_order_and_in_state() -> None:
    got: list[Any] = []

    async def slow(asi: AsyncSteps) -> int:
        await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
        return 1

    def waits(asi: AsyncSteps) -> None:
        asi.tool.immediate(lambda: asi.success("b"))
        asi.wait_external()

    root = AsyncSteps()
    root.add(lambda asi: asi.parallel(results="parts")
             .add(slow)
             .add(waits)
             .add(lambda asi: asi.success(3, 4))
             .add(lambda asi: None)
             .add(lambda asi: asi.add(lambda asi: asi.success("nested"))))
    root.add(lambda asi, parts: got.append(parts))
    await root.promise()
    assert got == [[1, "b", (3, 4), None, "nested"]]
    assert root.state.parts is got[0]


async def test_parallel_without_results_succeeds_with_no_arguments() -> None:
    got: list[tuple[Any, ...]] = []
    root = AsyncSteps()
    root.add(lambda asi: asi.parallel().add(lambda asi: asi.success(1)))
    root.add(lambda asi, *args: got.append(args))
    await root.promise()
    assert got == [()]
    assert "parts" not in root.state


async def test_parallel_results_of_no_branch() -> None:
    root = AsyncSteps()
    root.add(lambda asi: asi.parallel(results="r"))
    assert await root.promise() == []
    assert root.state.r == []


async def test_parallel_results_a_failed_branch_fails_the_step() -> None:
    root = AsyncSteps()
    root.add(lambda asi: asi.parallel(results="r")
             .add(lambda asi: asi.success(1))
             .add(lambda asi: asi.error(Errors.NotImplemented)))
    with pytest.raises(FutoInError) as info:
        await root.promise()
    assert info.value.code == Errors.NotImplemented
    assert "r" not in root.state


async def test_parallel_results_in_a_loop_are_per_iteration() -> None:
    got: list[Any] = []
    root = AsyncSteps()
    root.add(lambda asi: asi.repeat(2, lambda asi, i: (
        asi.parallel(results="r").add(lambda asi: asi.success(i)).add(
            lambda asi: asi.success(i * 10)),
        asi.add(lambda asi, r: got.append(r)))))
    await root.promise()
    assert got == [[0, 0], [1, 10]]


async def test_parallel_results_in_an_async_tool() -> None:
    got: list[Any] = []
    async with AsyncTool():
        root = AsyncSteps()
        root.add(lambda asi: asi.parallel(results="r").add(lambda asi: asi.success("x")))
        root.add(lambda asi, r: got.append(r))
        root.execute()
    assert got == [["x"]]


def test_parallel_results_must_be_a_key() -> None:
    root = AsyncSteps()
    with pytest.raises(TypeError, match="results must be a str"):
        root.parallel(results=1)  # type: ignore[arg-type]


async def test_promise_as_returns_the_typed_result() -> None:
    root = AsyncSteps()
    root.add(lambda asi: asi.success(41))
    value: int = await promise_as(root, int)
    assert value == 41


async def test_promise_as_rejects_another_type() -> None:
    root = AsyncSteps()
    root.add(lambda asi: asi.success("41"))
    with pytest.raises(TypeError, match="result is a str, expected int"):
        await promise_as(root, int)


async def test_promise_as_tuple_and_errors() -> None:
    root = AsyncSteps()
    root.add(lambda asi: asi.success(1, 2))
    pair: tuple[int, int] = await promise_as(root, tuple)
    assert pair == (1, 2)
    failing = AsyncSteps()
    failing.add(lambda asi: asi.error(Errors.Unauthorized))
    with pytest.raises(FutoInError, match="Unauthorized"):
        await promise_as(failing, int)


async def test_promise_as_needs_a_class() -> None:
    root = AsyncSteps()
    with pytest.raises(TypeError, match="must be a class"):
        await promise_as(root, "int")  # type: ignore[arg-type]


async def test_tool_inside_a_step_is_always_set() -> None:
    tools: list[AsyncTool] = []
    root = AsyncSteps()
    root.add(lambda asi: tools.append(asi.tool))
    await root.promise()
    assert isinstance(tools[0], AsyncTool)


async def test_tool_of_a_model_root() -> None:
    root = AsyncSteps()
    with pytest.raises(FutoInError, match="was given no tool="):
        _ = root.tool
    async with AsyncTool() as tool:
        assert AsyncSteps(tool=tool).tool is tool


async def test_error_and_loop_signals_never_return() -> None:
    """NoReturn is a promise to type checkers: each call raises, on every path."""
    seen: list[str] = []

    def step(asi: AsyncSteps) -> None:
        for which in range(3):
            try:
                if which == 0:
                    asi.error("E")
                elif which == 1:
                    asi.break_loop()
                else:
                    asi.continue_loop()
            except FutoInError as err:
                seen.append(err.code)

    root = AsyncSteps()
    root.add(step)
    await root.promise()
    assert seen == ["E", Errors.LoopBreak, Errors.LoopCont]
