"""The spec's printed outputs (§1.1, §1.2, §1.2.1) and every §3 example, compared exactly."""

from __future__ import annotations

from typing import Any

import pytest

from futoin_anyio import AsyncSteps, Errors, FutoInError

pytestmark = pytest.mark.anyio


async def test_levels_1_1() -> None:
    out: list[str] = []

    def step(name: str, *subs: Any) -> Any:
        def func(asi: AsyncSteps, *_: Any) -> None:
            out.append(name)
            for kind, sub in subs:
                if kind == "add":
                    asi.add(sub)
                else:
                    asi.parallel().add(sub)

        return func

    asi = AsyncSteps()
    asi.add(
        step(
            "Level 0 add #1",
            ("add", step(
                "Level 1 add #1",
                ("add", step("Level 2 add #1")),
                ("par", step("Level 2 parallel #2")),
                ("add", step("Level 2 add #3")),
            )),
            ("par", step("Level 1 parallel #2")),
            ("add", step("Level 1 add #3")),
        )
    )
    asi.parallel().add(step("Level 0 parallel #2"))
    asi.add(step("Level 0 add #3"))
    await asi.promise()
    assert out == [
        "Level 0 add #1",
        "Level 1 add #1",
        "Level 2 add #1",
        "Level 2 parallel #2",
        "Level 2 add #3",
        "Level 1 parallel #2",
        "Level 1 add #3",
        "Level 0 parallel #2",
        "Level 0 add #3",
    ]


async def test_error_handling_1_2() -> None:
    out: list[str] = []

    def l0(asi: AsyncSteps) -> None:
        out.append("Level 0 func")

        def l1(asi: AsyncSteps) -> None:
            out.append("Level 1 func")
            asi.error("myerror")

        def l1_err(asi: AsyncSteps, error: str) -> None:
            out.append("Level 1 onerror: " + error)
            asi.error("newerror")

        asi.add(l1, l1_err)

    def l0_err(asi: AsyncSteps, error: str) -> None:
        out.append("Level 0 onerror: " + error)
        asi.success("Prm")

    def l0_func2(asi: AsyncSteps, param: str) -> None:
        out.append("Level 0 func2: " + param)
        asi.success()

    asi = AsyncSteps()
    asi.add(l0, l0_err).add(l0_func2)
    await asi.promise()
    assert out == [
        "Level 0 func",
        "Level 1 func",
        "Level 1 onerror: myerror",
        "Level 0 onerror: newerror",
        "Level 0 func2: Prm",
    ]


async def test_steps_in_error_handler_1_2_1() -> None:
    out: list[str] = []

    def l0(asi: AsyncSteps) -> None:
        out.append("Level 0 func")

        def l1(asi: AsyncSteps) -> None:
            out.append("Level 1 func")
            asi.error("first")

        def l1_err(asi: AsyncSteps, error: str) -> None:
            out.append("Level 1 onerror: " + error)

            def l2(asi: AsyncSteps) -> None:
                out.append("Level 2 func")
                asi.error("second")

            def l2_err(asi: AsyncSteps, error: str) -> None:
                out.append("Level 2 onerror: " + error)

            asi.add(l2, l2_err)

        asi.add(l1, l1_err)

    def l0_err(asi: AsyncSteps, error: str) -> None:
        out.append("Level 0 onerror: " + error)

    asi = AsyncSteps()
    asi.add(l0, l0_err)
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == "second"
    assert out == [
        "Level 0 func",
        "Level 1 func",
        "Level 1 onerror: first",
        "Level 2 func",
        "Level 2 onerror: second",
        "Level 0 onerror: second",
    ]


@pytest.mark.parametrize("something", [True, False])
async def test_single_level_3_1(something: bool) -> None:
    out: list[Any] = []

    def first(asi: AsyncSteps) -> None:
        if something:
            asi.success(1, 2)
        else:
            asi.error(Errors.NotImplemented)

    asi = AsyncSteps()
    asi.add(first, lambda asi, error: out.append(("externalError", error)))
    asi.add(lambda asi, res1, res2: out.append(("externalSuccess", res1, res2)))
    if something:
        await asi.promise()
        assert out == [("externalSuccess", 1, 2)]
    else:
        with pytest.raises(FutoInError) as info:
            await asi.promise()
        assert info.value.code == Errors.NotImplemented
        assert out == [("externalError", Errors.NotImplemented)]


@pytest.mark.parametrize("something", [True, False])
async def test_sub_steps_3_2(something: bool) -> None:
    out: list[Any] = []

    def outer(asi: AsyncSteps) -> None:
        def inner(asi: AsyncSteps) -> None:
            if something:
                asi.success(1)
            else:
                asi.error(Errors.NotImplemented)

        asi.add(inner, lambda asi, error: out.append("Spotted error " + error))
        asi.add(lambda asi, res1: asi.success(res1, 2))

    asi = AsyncSteps()
    asi.add(outer, lambda asi, error: out.append(("externalError", error)))
    asi.add(lambda asi, res1, res2: out.append(("externalSuccess", res1, res2)))
    if something:
        await asi.promise()
        assert out == [("externalSuccess", 1, 2)]
    else:
        with pytest.raises(FutoInError):
            await asi.promise()
        assert out == ["Spotted error NotImplemented", ("externalError", "NotImplemented")]


async def test_parallel_and_state_3_3() -> None:
    out: list[Any] = []

    def outer(asi: AsyncSteps) -> None:
        def p1(asi: AsyncSteps) -> None:
            asi.state().parallel_1 = 1

        def p2(asi: AsyncSteps) -> None:
            asi.state().parallel_2 = 2

        def p2_err(asi: AsyncSteps, error: str) -> None:
            asi.state().parallel_2 = 0

        asi.parallel().add(p1, lambda asi, e: out.append("Spotted error " + e)).add(p2, p2_err)

    asi = AsyncSteps()
    asi.add(outer, lambda asi, error: out.append(("externalError", error)))
    asi.add(lambda asi: out.append(("externalSuccess", asi.state.parallel_1,
                                    asi.state.parallel_2)))
    await asi.promise()
    assert out == [("externalSuccess", 1, 2)]


async def test_loops_3_4() -> None:
    out: list[str] = []

    def body(asi: AsyncSteps) -> None:
        asi.repeat(3, lambda asi, i: out.append(str(i)))
        asi.forEach([1, 3, 3], lambda asi, k, v: out.append(f"{k}={v}"))
        asi.forEach(asi.state(), lambda asi, k, v: out.append(f"{k}={v}"))

    asi = AsyncSteps({"a": 1})
    asi.add(body)
    await asi.promise()
    assert out[:6] == ["0", "1", "2", "0=1", "1=3", "2=3"]
    assert "a=1" in out[6:]
    assert "error_info=None" in out[6:]


@pytest.mark.parametrize("err", [None, "SomeError"])
async def test_external_event_wait_3_5(err: str | None) -> None:
    out: list[str] = []

    def call_some_external(callback: Any) -> None:
        asi_tool.immediate(lambda: callback(err))

    def step(asi: AsyncSteps) -> None:
        asi.waitExternal()

        def done(error: str | None) -> None:
            if error:
                try:
                    asi.error(error)
                except FutoInError:
                    out.append("ignored")
            else:
                asi.success()

        call_some_external(done)

    asi = AsyncSteps()
    asi.add(lambda asi: _remember_tool(asi))
    asi.add(step)
    if err is None:
        await asi.promise()
        assert out == []
    else:
        with pytest.raises(FutoInError) as info:
            await asi.promise()
        assert info.value.code == err
        assert out == ["ignored"]


asi_tool: Any = None


def _remember_tool(asi: AsyncSteps) -> None:
    global asi_tool
    asi_tool = asi.tool


async def test_synchronization_3_6() -> None:
    inside = 0
    max_inside = 0
    entered = 0

    def critical(asi: AsyncSteps) -> None:
        nonlocal inside, max_inside, entered
        inside += 1
        entered += 1
        max_inside = max(max_inside, inside)

        def leave(asi: AsyncSteps) -> None:
            nonlocal inside
            inside -= 1

        def hold(asi: AsyncSteps) -> None:
            asi.wait_external()
            assert asi.tool is not None
            asi.tool.immediate(asi.success)  # stay inside across a loop round-trip

        asi.add(hold)
        asi.add(leave)

    from futoin_anyio import Mutex

    mutex = Mutex(10)
    asi = AsyncSteps()
    par = asi.parallel()
    for _ in range(30):
        par.add(lambda asi: asi.sync(mutex, critical))
    await asi.promise()
    assert entered == 30
    assert max_inside == 10
    assert inside == 0
