"""Steps, levels, result passing, state, implicit success, cloning and misuse."""

from __future__ import annotations

import copy
from typing import Any

import anyio
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError, State
from futoin_anyio._hooks import on_exit

pytestmark = pytest.mark.anyio


async def test_promise_result_shapes() -> None:
    for args, expected in [((), None), ((1,), 1), ((1, 2), (1, 2))]:
        asi = AsyncSteps()
        asi.add(lambda asi, a=args: asi.success(*a))
        assert await asi.promise() == expected


async def test_implicit_success_passes_no_arguments() -> None:
    got: list[tuple[Any, ...]] = []
    asi = AsyncSteps()
    asi.add(lambda asi: asi.success(1))
    asi.add(lambda asi, v: None)  # implicit success()
    asi.add(lambda asi, *args: got.append(args))
    await asi.promise()
    assert got == [()]


async def test_last_inner_success_reaches_the_next_outer_step() -> None:
    asi = AsyncSteps()
    asi.add(lambda asi: asi.add(lambda asi: asi.success(1, 2)))
    asi.add(lambda asi, a, b: asi.success(a + b))
    assert await asi.promise() == 3


async def test_success_step_injects_result_after_inner_steps() -> None:
    order: list[str] = []

    def outer(asi: AsyncSteps) -> None:
        asi.add(lambda asi: order.append("inner"))
        asi.success_step(5, 6)

    asi = AsyncSteps()
    asi.add(outer)
    asi.add(lambda asi, *args: asi.success(args))
    assert await asi.promise() == (5, 6)
    assert order == ["inner"]
    assert AsyncSteps.__dict__["successStep"] is AsyncSteps.__dict__["success_step"]


async def test_state_is_shared_and_attribute_accessible() -> None:
    asi = AsyncSteps({"x": 1})
    seen: list[Any] = []

    def step(inner: AsyncSteps) -> None:
        inner.state.y = inner.state.x + 1
        seen.append(inner.state is asi.state)
        seen.append(inner.state() is inner.state)

    asi.add(step)
    asi.parallel().add(lambda b: seen.append(b.state is asi.state))
    await asi.promise()
    assert asi.state["y"] == 2
    assert seen == [True, True, True]
    assert isinstance(asi.state, State)
    assert asi.state.error_info is None
    assert asi.state.last_exception is None
    assert asi.state.async_stack == ()
    with pytest.raises(AttributeError, match="no variable 'missing'"):
        _ = asi.state.missing
    # One lookup for both spellings: a missing variable is a KeyError by item, an
    # AttributeError by attribute, and the usual probes of either kind work.
    with pytest.raises(KeyError, match="no variable 'missing'"):
        _ = asi.state["missing"]
    assert not hasattr(asi.state, "missing")
    assert getattr(asi.state, "missing", 7) == 7
    assert asi.state.get("missing") is None and "missing" not in asi.state
    with pytest.raises(AttributeError, match="no variable 'missing'"):
        del asi.state.missing


async def test_state_made_on_first_use_is_the_roots_at_every_depth() -> None:
    # A root nobody asked for its state has none until a step asks: the step, the steps made
    # before that (outer levels, a parallel branch after) and the root all see the same one.
    depth = 2000  # found iteratively, not by recursion
    outer: list[AsyncSteps] = []
    seen: list[bool] = []
    asi = AsyncSteps()

    def nest(inner: AsyncSteps, level: int) -> None:
        outer.append(inner)
        if level < depth:
            inner.add(lambda s: nest(s, level + 1))
        else:
            inner.state.found = level

    asi.add(lambda s: nest(s, 1))
    asi.add(lambda s: seen.extend(o.state is s.state for o in outer))
    asi.parallel().add(lambda b: seen.append(b.state.found == depth))
    asi.add(lambda s: s.success(s.state.found))
    assert await asi.promise() == depth
    assert asi.state.found == depth
    assert all(seen) and len(seen) == depth + 1


async def test_bool_tracks_service() -> None:
    kept: list[AsyncSteps] = []
    seen: list[bool] = []

    def step(asi: AsyncSteps) -> None:
        seen.append(bool(asi))
        kept.append(asi)

    root = AsyncSteps()
    assert root
    root.add(step)
    await root.promise()
    assert seen == [True]
    assert not kept[0]
    assert not root


async def test_new_instance_shares_tool_and_runs_standalone() -> None:
    done: list[str] = []
    async with AsyncTool() as tool:
        root = AsyncSteps(tool=tool)

        def spawn(asi: AsyncSteps) -> None:
            other = asi.new_instance()
            assert other.tool is tool
            other.add(lambda o: done.append("other"))
            other.execute()

        root.add(spawn)
        await root.promise()
    assert done == ["other"]


async def test_clone_and_copy_from() -> None:
    log: list[str] = []
    model = AsyncSteps({"k": "model"})
    model.add(lambda asi: log.append(f"model step {asi.state.k}"))

    clone = copy.copy(model)
    clone.state.k = "clone"
    await clone.promise()
    await model.clone().promise()
    assert log == ["model step clone", "model step model"]

    log.clear()
    business = AsyncSteps({"extra": 1, "k": "ignored"})
    business.add(lambda asi: log.append("business"))
    common = AsyncSteps({"k": "common"})

    def frame(asi: AsyncSteps) -> None:
        asi.add(lambda asi: log.append("before"))
        asi.copy_from(asi.state.business_logic)
        asi.add(lambda asi: log.append(f"after {asi.state.k} {asi.state.extra}"))

    common.add(frame)
    actual = common.clone()
    actual.state.business_logic = business
    await actual.promise()
    assert log == ["before", "business", "after common 1"]


async def test_error_info_last_exception_and_async_stack() -> None:
    seen: list[Any] = []

    def failing(asi: AsyncSteps) -> None:
        asi.error("MyError", "details")

    def handler(asi: AsyncSteps, code: str) -> None:
        exc = asi.state.last_exception
        seen.append((code, asi.state.error_info, type(exc), exc.code))
        seen.append(failing in asi.state.async_stack)
        asi.success()

    asi = AsyncSteps()
    asi.add(lambda asi: asi.add(failing), handler)
    await asi.promise()
    assert seen == [("MyError", "details", FutoInError, "MyError"), True]


async def test_python_exception_becomes_internal_error() -> None:
    seen: list[Any] = []

    def failing(asi: AsyncSteps) -> None:
        raise ValueError("bad value")

    asi = AsyncSteps()
    asi.add(failing, lambda asi, code: seen.append((code, asi.state.error_info)))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert seen == [(Errors.InternalError, "ValueError: bad value")]
    assert info.value.code == Errors.InternalError
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.__suppress_context__  # as ``raise ... from``: the cause is the story
    assert info.value.__cause__ is asi.state.last_exception
    assert str(info.value).startswith("InternalError")


async def test_an_error_outside_a_steps_call_is_no_steps_error() -> None:
    """The flow runner's one ``try`` spans its whole run (``_flow._Flow.run``): what raises in
    it other than a step's function (here a frame's exit hook, as a Redis section's release
    would) propagates out of ``promise()``, and no error handler takes it for a step's."""

    class Boom(Exception):
        pass

    def hook(arg: object) -> None:
        raise Boom(arg)

    seen: list[object] = []

    def inner(asi: AsyncSteps) -> None:
        on_exit(asi, hook, "released")

    def outer(asi: AsyncSteps) -> None:
        asi.add(inner, lambda asi, code: seen.append(("inner handler", code)))

    root = AsyncSteps()
    root.add(outer, lambda asi, code: seen.append(("outer handler", code)))
    root.add(lambda asi: seen.append("next step"))
    with pytest.raises(Boom, match="released"):
        await root.promise()
    assert seen == []


async def test_error_handler_add_runs_steps_at_failed_level_and_succeeds() -> None:
    asi = AsyncSteps()
    asi.add(lambda asi: asi.error("X"), lambda asi, e: asi.add(lambda asi: asi.success("S")))
    asi.add(lambda asi, v: asi.success(v + "!"))
    assert await asi.promise() == "S!"


async def test_error_handler_raising_python_exception_replaces_error() -> None:
    asi = AsyncSteps()
    asi.add(lambda asi: asi.error("X"), lambda asi, e: _raise(RuntimeError("handler")))
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    assert info.value.code == Errors.InternalError
    assert asi.state.error_info == "RuntimeError: handler"


async def test_call_operator_is_success() -> None:
    asi = AsyncSteps()
    asi.add(lambda asi: asi("called"))
    assert await asi.promise() == "called"


async def test_stack_objects_live_as_long_as_their_step() -> None:
    log: list[str] = []

    def step(asi: AsyncSteps) -> None:
        buf = asi.stack(16, lambda obj: log.append(f"cleanup {len(obj)}"))
        assert buf == bytearray(16)
        made = asi.stack(lambda: ["obj"], lambda obj: log.append(f"cleanup {obj[0]}"))
        assert made == ["obj"]
        asi.add(lambda asi: log.append("sub-step"))

    asi = AsyncSteps()
    asi.add(step)
    asi.add(lambda asi: asi.stack(1, lambda o: log.append("failed cleanup")) and asi.error("E"),
            lambda asi, e: asi.success())
    await asi.promise()
    assert log == ["sub-step", "cleanup obj", "cleanup 16", "failed cleanup"]


@pytest.mark.parametrize("outcome", ["success", "add", "pass on", "raise"])
async def test_stack_objects_of_an_error_handler_are_cleaned_up(outcome: str) -> None:
    log: list[str] = []

    def onerror(asi: AsyncSteps, code: str) -> None:
        asi.stack(lambda: code, lambda obj: log.append(f"cleanup {obj}"))
        if outcome == "success":
            asi.success()
        elif outcome == "add":
            asi.add(lambda asi: log.append("added"))
        elif outcome == "raise":
            asi.error("Other")

    asi = AsyncSteps()
    asi.add(lambda asi: asi.error("E"), onerror)
    asi.add(lambda asi: log.append("next"))
    if outcome in ("success", "add"):
        await asi.promise()
    else:
        with pytest.raises(FutoInError):
            await asi.promise()
    assert log == {
        "success": ["cleanup E", "next"],
        "add": ["added", "cleanup E", "next"],
        "pass on": ["cleanup E"],
        "raise": ["cleanup E"],
    }[outcome]


# -- misuse: every one is a clear error, never a hang or a silent drop -------------------------


async def test_success_after_add_is_internal_error() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.add(lambda asi: None)
        asi.success()

    asi = AsyncSteps()
    asi.add(step)
    with pytest.raises(FutoInError, match="success\\(\\) after sub-steps"):
        await asi.promise()


async def test_out_of_service_step_object_raises() -> None:
    kept: list[AsyncSteps] = []
    asi = AsyncSteps()
    asi.add(lambda asi: kept.append(asi))
    await asi.promise()
    for call in (lambda: kept[0].success(), lambda: kept[0].add(lambda a: None),
                 lambda: kept[0].set_timeout(1), lambda: kept[0].error("X")):
        with pytest.raises(FutoInError, match="out of service") as info:
            call()
        assert info.value.code == Errors.InternalError


async def test_non_callable_step_is_internal_error() -> None:
    with pytest.raises(FutoInError, match="must be callable") as info:
        AsyncSteps().add(42)  # type: ignore[arg-type]
    assert info.value.code == Errors.InternalError
    with pytest.raises(FutoInError, match="onerror must be callable"):
        AsyncSteps().add(lambda asi: None, "nope")  # type: ignore[arg-type]


async def test_error_with_non_str_code_is_type_error() -> None:
    seen: list[str] = []
    asi = AsyncSteps()
    asi.add(lambda asi: asi.error(42), lambda asi, e: seen.append(asi.state.error_info))
    with pytest.raises(FutoInError):
        await asi.promise()
    assert seen == ["TypeError: error(): the code must be a str, got int"]


@pytest.mark.parametrize(("value", "exc"), [(-1, ValueError), ("10", TypeError),
                                            (float("nan"), ValueError), (True, TypeError)])
async def test_bad_timeout(value: Any, exc: type[Exception]) -> None:
    seen: list[Any] = []
    asi = AsyncSteps()
    asi.add(lambda asi: asi.set_timeout(value), lambda asi, e: seen.append(asi.state.error_info))
    with pytest.raises(FutoInError):
        await asi.promise()
    assert seen and seen[0].startswith(exc.__name__ + ": set_timeout()")


async def test_promise_twice_and_execute_without_tool() -> None:
    asi = AsyncSteps()
    await asi.promise()
    with pytest.raises(FutoInError, match="already started"):
        await asi.promise()
    with pytest.raises(FutoInError, match="needs a running AsyncTool"):
        AsyncSteps().execute()


async def test_execute_twice() -> None:
    async with AsyncTool():
        asi = AsyncSteps()
        asi.add(lambda asi: None)
        asi.execute()
        with pytest.raises(FutoInError, match="already started"):
            asi.execute()


async def test_control_api_only_on_roots() -> None:
    seen: list[str] = []

    def step(asi: AsyncSteps) -> None:
        for call in (asi.cancel, asi.execute):
            try:
                call()
            except FutoInError as exc:
                seen.append(str(exc))

    asi = AsyncSteps()
    asi.add(step)
    await asi.promise()
    assert seen == [
        "InternalError: cancel() can only be called on a root AsyncSteps, not on a step",
        "InternalError: execute() can only be called on a root AsyncSteps, not on a step",
    ]


async def test_execution_api_outside_a_step() -> None:
    with pytest.raises(FutoInError, match="only be called inside an executing step"):
        AsyncSteps().success()
    with pytest.raises(FutoInError, match="only be called inside an executing step"):
        AsyncSteps().set_cancel(lambda asi: None)


async def test_parent_object_is_not_usable_while_its_sub_steps_run() -> None:
    seen: list[Any] = []

    def outer(asi: AsyncSteps) -> None:
        def inner(inner_asi: AsyncSteps) -> None:
            seen.append(bool(asi))
            try:
                asi.success()
            except FutoInError as exc:
                seen.append(exc.code)

        asi.add(inner)

    root = AsyncSteps()
    root.add(outer)
    await root.promise()
    assert seen == [False, Errors.InternalError]


def test_state_must_be_a_mapping() -> None:
    with pytest.raises(TypeError, match="state must be a mapping"):
        AsyncSteps(state=[1, 2])  # type: ignore[arg-type]


def _raise(exc: BaseException) -> None:
    raise exc


async def test_step_objects_someone_kept_are_never_reused() -> None:
    """The engine reuses a completed step object only when nothing else references it."""
    kept: list[AsyncSteps] = []

    def body(asi: AsyncSteps, i: int) -> None:
        if i % 3 == 0:
            kept.append(asi)

    asi = AsyncSteps()
    asi.add(lambda asi: asi.repeat(30, body))
    await asi.promise()
    assert len({id(k) for k in kept}) == len(kept) == 10
    assert not any(kept)
    with pytest.raises(TypeError):
        import weakref

        weakref.ref(kept[0])  # steps cannot be weakly referenced: a weak ref is not counted


@pytest.mark.parametrize("then", ["set_cancel", "set_timeout", "stack", "wait_external"])
async def test_waiting_steps_keep_their_handlers_apart(then: str) -> None:
    # Steps that only wait share their rarely used parts; one that then adds a handler, a
    # timeout or a clean-up must get its own, leaving the other waiting steps untouched.
    calls: list[str] = []
    plain: list[AsyncSteps] = []

    def only_waits(asi: AsyncSteps) -> None:
        asi.wait_external()
        plain.append(asi)

    def waits_then(asi: AsyncSteps) -> None:
        asi.wait_external()
        if then == "set_cancel":
            asi.set_cancel(lambda asi: calls.append("cancel"))
        elif then == "set_timeout":
            asi.set_timeout(10)
        elif then == "stack":
            asi.stack(lambda: "obj", lambda obj: calls.append(f"cleanup {obj}"))
        else:
            asi.wait_external()
        tool = asi.tool
        assert tool is not None
        tool.immediate(lambda: asi.success("done") if asi else None)

    async with AsyncTool():
        other = AsyncSteps()
        other.add(only_waits)
        other.execute()
        root = AsyncSteps()
        root.add(lambda asi: asi.add(waits_then, lambda asi, code: calls.append(code)))
        root.add(lambda asi, *args: calls.append(f"after {args}"))
        root.execute()
        await anyio.wait_all_tasks_blocked()
        assert len(plain) == 1 and plain[0]  # still waiting: nothing reached it
        other.cancel()
    assert not plain[0]
    assert calls == {
        "set_cancel": ["after ('done',)"],
        "set_timeout": ["after ('done',)"],
        "stack": ["cleanup obj", "after ('done',)"],
        "wait_external": ["after ('done',)"],
    }[then]


async def test_step_object_is_callable_as_success() -> None:
    """``asi(...)`` is ``asi.success(...)``, in both builds (an extension type needs a real
    ``__call__``), and misused it says so as ``success()`` does."""
    asi = AsyncSteps()
    asi.add(lambda asi: asi(1, 2))
    asi.add(lambda asi, a, b: asi(a + b))
    assert await asi.promise() == 3
    with pytest.raises(FutoInError, match=r"success\(\)"):
        AsyncSteps()()
