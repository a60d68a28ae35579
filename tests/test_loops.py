"""Loops (§1.8): loop, repeat, for_each, break/continue with labels, termination, scale."""

from __future__ import annotations

from typing import Any

import pytest

from futoin_anyio import AsyncSteps, Errors, FutoInError

pytestmark = pytest.mark.anyio


async def test_repeat_passes_index_and_ends_with_no_args() -> None:
    seen: list[Any] = []
    asi = AsyncSteps()
    def body(asi: AsyncSteps, i: int) -> None:
        seen.append(i)
        asi.success(i, "x")

    asi.add(lambda asi: asi.repeat(3, body))
    asi.add(lambda asi, *args: seen.append(args))
    await asi.promise()
    assert seen == [0, 1, 2, ()]


async def test_repeat_calls_each_iteration_with_its_index_alone() -> None:
    """An iteration's one argument is its index, whatever the body declares, in every kind of
    step; the sub-steps an iteration adds start with no arguments, as after any step."""
    seen: list[Any] = []

    def varargs(asi: AsyncSteps, *args: Any) -> None:
        seen.append(("varargs", args))

    async def coroutine(asi: AsyncSteps, i: int) -> None:
        seen.append(("coroutine", i))

    def adds(asi: AsyncSteps, i: int) -> None:
        seen.append(("adds", i))
        asi.add(lambda asi, *args: seen.append(("sub-step", args)))

    asi = AsyncSteps()
    asi.add(lambda asi: asi.repeat(2, varargs))
    asi.add(lambda asi: asi.repeat(2, coroutine))
    asi.add(lambda asi: asi.repeat(2, adds))
    await asi.promise()
    assert seen == [("varargs", (0,)), ("varargs", (1,)), ("coroutine", 0), ("coroutine", 1),
                    ("adds", 0), ("sub-step", ()), ("adds", 1), ("sub-step", ())]


async def test_for_each_over_list_and_mapping() -> None:
    seen: list[Any] = []

    def step(asi: AsyncSteps) -> None:
        asi.for_each({"a": 1, "b": 2}, lambda asi, k, v: seen.append((k, v)))
        asi.forEach([5, 6], lambda asi, k, v: seen.append((k, v)))
        asi.loopForEach((), lambda asi, k, v: seen.append("never"))

    asi = AsyncSteps()
    asi.add(step)
    await asi.promise()
    assert seen == [("a", 1), ("b", 2), (0, 5), (1, 6)]


async def test_loop_break_and_continue() -> None:
    seen: list[int] = []
    counter = iter(range(100))

    def body(asi: AsyncSteps) -> None:
        i = next(counter)
        if i == 1:
            asi.continue_loop()
        if i == 4:
            asi.break_loop()
        seen.append(i)

    asi = AsyncSteps()
    asi.add(lambda asi: asi.loop(body))
    await asi.promise()
    assert seen == [0, 2, 3]


async def test_labelled_break_unwinds_through_handlers_as_in_reference() -> None:
    log: list[Any] = []

    def outer_body(asi: AsyncSteps) -> None:
        def inner_body(asi: AsyncSteps) -> None:
            def deep(asi: AsyncSteps) -> None:
                asi.add(lambda asi: asi.breakLoop("OUT"),
                        lambda asi, e: log.append(("deep onerror", e, asi.state.error_info)))

            asi.add(deep, lambda asi, e: log.append(("mid onerror", e)))

        asi.loop(inner_body)

    asi = AsyncSteps()
    asi.add(lambda asi: (asi.loop(outer_body, "OUT"),
                         asi.add(lambda asi, *a: log.append(("after loop", a)))))
    await asi.promise()
    assert log == [("deep onerror", "LoopBreak", None), ("mid onerror", "LoopBreak"),
                   ("after loop", ())]


async def test_labelled_continue_goes_to_outer_loop() -> None:
    log: list[Any] = []

    def outer(asi: AsyncSteps, i: int) -> None:
        def inner(asi: AsyncSteps, j: int) -> None:
            if j == 1:
                asi.continueLoop("OUTER")
            log.append((i, j))

        asi.repeat(3, inner)
        asi.add(lambda asi: log.append(f"end {i}"))

    asi = AsyncSteps()
    asi.add(lambda asi: asi.repeat(2, outer, "OUTER"))
    await asi.promise()
    assert log == [(0, 0), (1, 0)]


async def test_unknown_label_is_an_error_handlers_see() -> None:
    log: list[Any] = []
    asi = AsyncSteps()
    asi.add(lambda asi: asi.loop(lambda asi: asi.break_loop("NOPE")),
            lambda asi, e: log.append(e))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert log == [Errors.LoopBreak]
    assert info.value.code == Errors.LoopBreak


async def test_break_resets_error_info() -> None:
    seen: list[Any] = []

    def step(asi: AsyncSteps) -> None:
        asi.add(lambda asi: asi.error("E", "info"), lambda asi, e: asi.success())
        asi.add(lambda asi: seen.append(asi.state.error_info))
        asi.add(lambda asi: asi.loop(lambda asi: asi.break_loop()))
        asi.add(lambda asi: seen.append(asi.state.error_info))

    asi = AsyncSteps()
    asi.add(step)
    await asi.promise()
    assert seen == ["info", None]


async def test_error_inside_loop_terminates_it_as_error() -> None:
    log: list[Any] = []

    def body(asi: AsyncSteps, i: int) -> None:
        log.append(i)
        if i == 2:
            asi.error("Stop")

    asi = AsyncSteps()
    def recover(asi: AsyncSteps, code: str) -> None:
        log.append(code)
        asi.success()

    asi.add(lambda asi: asi.repeat(10, body), recover)
    await asi.promise()
    assert log == [0, 1, 2, "Stop"]


async def test_break_from_parallel_branch_reaches_named_loop() -> None:
    log: list[Any] = []

    def outer(asi: AsyncSteps, i: int) -> None:
        log.append(("outer", i))

        def inner(asi: AsyncSteps, j: int) -> None:
            log.append(("inner", j))
            asi.parallel().add(lambda b: b.break_loop("OUTER"))

        asi.repeat(2, inner)

    asi = AsyncSteps()
    asi.repeat(2, outer, "OUTER")
    asi.add(lambda a: log.append("after"))
    await asi.promise()
    assert log == [("outer", 0), ("inner", 0), "after"]


async def test_million_iterations() -> None:
    count = 0

    def body(asi: AsyncSteps, i: int) -> None:
        nonlocal count
        count += 1

    asi = AsyncSteps()
    asi.add(lambda asi: asi.repeat(1_000_000, body))
    await asi.promise()
    assert count == 1_000_000


async def test_ten_thousand_nested_levels_without_recursion() -> None:
    depth = 10_000
    reached: list[int] = []

    def level(asi: AsyncSteps, n: int = 0) -> None:
        if n == depth:
            reached.append(n)
            asi.error("Deep")
        asi.add(lambda asi: level(asi, n + 1))

    handled: list[str] = []
    asi = AsyncSteps()
    def recover(asi: AsyncSteps, code: str) -> None:
        handled.append(code)
        asi.success("ok")

    asi.add(level, recover)
    assert await asi.promise() == "ok"
    assert reached == [depth]
    assert handled == ["Deep"]


@pytest.mark.parametrize(("call", "exc"), [
    (lambda asi: asi.repeat(-1, lambda a, i: None), ValueError),
    (lambda asi: asi.repeat("3", lambda a, i: None), TypeError),
    (lambda asi: asi.for_each(5, lambda a, k, v: None), TypeError),
    (lambda asi: asi.loop(lambda a: None, 5), TypeError),
])
async def test_bad_loop_arguments(call: Any, exc: type[Exception]) -> None:
    seen: list[Any] = []
    asi = AsyncSteps()
    asi.add(call, lambda asi, e: seen.append(asi.state.error_info))
    with pytest.raises(FutoInError):
        await asi.promise()
    assert seen[0].startswith(exc.__name__)


async def test_unknown_label_names_the_label_in_the_final_error() -> None:
    asi = AsyncSteps()
    asi.add(lambda asi: asi.loop(lambda asi: asi.continue_loop("TYPO")))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == Errors.LoopCont
    assert info.value.info == "continue_loop('TYPO'): no enclosing loop has that label"
