"""The defects of issue 18's adversarial probe: nothing a user does breaks the tool.

One test (or two) per row of the issue's table, each on both backends. Row 4 (finished timers
holding memory) and row 7 (the binary bridge's schedule table) have their tests with issues 15
and 17.
"""

from __future__ import annotations

import copy
import gc
import logging
import pickle
import threading
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import anyio
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError, Limiter, Mutex, State, Throttle

pytestmark = pytest.mark.anyio


def _internal_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "futoin_anyio" and r.levelno >= logging.ERROR]


# -- row 1: a loop whose collection changes or whose generator raises --------------------------


async def test_for_each_over_a_dict_the_body_changes_fails_through_handlers() -> None:
    data = {"a": 1, "b": 2}
    handled: list[tuple[str, str]] = []

    def body(asi: AsyncSteps, key: str, value: int) -> None:
        data[key + "x"] = value

    asi = AsyncSteps()
    asi.add(lambda asi: asi.for_each(data, body),
            lambda asi, code: handled.append((code, asi.state.error_info)))
    with pytest.raises(FutoInError) as err:
        await asi.promise()
    assert err.value.code == Errors.InternalError
    assert handled == [(Errors.InternalError,
                        "RuntimeError: dictionary changed size during iteration")]


async def test_a_handler_recovering_from_a_broken_loop_lets_the_flow_go_on_after_it() -> None:
    # The iterator raises between iterations: the error unwinds from the loop's own frame, and
    # the handler's success() resumes the flow one level up, with the next step there.
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("generator broke")

    log: list[Any] = []

    def recover(asi: AsyncSteps, code: str) -> None:
        log.append(code)
        asi.success("recovered")

    def outer(asi: AsyncSteps) -> None:
        asi.add(lambda asi: asi.for_each(items(), lambda asi, i, v: log.append(v)), recover)
        asi.add(lambda asi, how: log.append(how))

    root = AsyncSteps()
    root.add(outer)
    root.add(lambda asi: log.append("after"))
    await root.promise()
    assert log == [1, Errors.InternalError, "recovered", "after"]


async def test_for_each_generator_raising_later_leaves_the_tool_and_other_roots_alone() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("generator broke")

    log: list[Any] = []
    async with AsyncTool():
        steps: list[AsyncSteps] = []

        def wait_step(asi: AsyncSteps) -> None:
            steps.append(asi)
            asi.wait_external()

        other = AsyncSteps()
        other.add(wait_step)
        other.add(lambda asi: log.append("other root went on"))
        other.execute()

        root = AsyncSteps()
        root.add(lambda asi: asi.for_each(items(), lambda asi, i, v: log.append(v)),
                 lambda asi, code: log.append((code, asi.state.error_info)))
        root.execute(lambda code: log.append(("unhandled", code)))
        await anyio.sleep(0.01)
        steps[0].success()
    assert log == [1, (Errors.InternalError, "ValueError: generator broke"),
                   ("unhandled", Errors.InternalError), "other root went on"]


# -- row 2: a worker thread schedules and cancels an immediate ---------------------------------


async def test_immediate_cancelled_on_a_worker_keeps_the_count_exact() -> None:
    ran: list[int] = []
    with anyio.fail_after(10):
        async with AsyncTool() as tool:
            def worker() -> None:
                for i in range(200):
                    handle = tool.immediate(partial(ran.append, i))
                    if i % 2:
                        handle.cancel()
                        assert not handle.is_valid()

            # The loop thread blocks meanwhile: every hand-over is still queued when the worker
            # cancels, so exactly the odd ones never run.
            thread = threading.Thread(target=worker)
            thread.start()
            thread.join()
            while tool.statistics().scheduled:
                assert tool.statistics().scheduled > 0
                await anyio.sleep(0.001)
    assert tool.statistics().scheduled == 0
    assert ran == list(range(0, 200, 2))


async def test_deferred_cancelled_on_a_worker_keeps_the_count_exact() -> None:
    with anyio.fail_after(10):
        async with AsyncTool() as tool:
            handle = tool.deferred(60_000, lambda: None)
            assert tool.statistics().scheduled == 1
            await anyio.to_thread.run_sync(handle.cancel)
            await anyio.to_thread.run_sync(tool.cancel, handle)  # a second cancel: no-op
    assert tool.statistics().scheduled == 0


# -- row 3: root.cancel() from a worker thread -------------------------------------------------


async def test_root_cancel_from_a_worker_runs_handlers_on_the_loop_thread() -> None:
    on_loop: list[bool] = []
    outcome: list[str] = []
    with anyio.fail_after(10):
        async with AsyncTool() as tool:
            root = AsyncSteps()

            def step(asi: AsyncSteps) -> None:
                asi.set_cancel(lambda asi: on_loop.append(tool.is_same_thread()))

            root.add(step)
            root.execute(outcome.append)
            await anyio.sleep(0.01)
            await anyio.to_thread.run_sync(root.cancel)
    assert on_loop == [True]
    assert outcome == []  # Cancelled is not an unhandled error
    assert tool.statistics().roots == 0


async def test_root_cancel_from_a_worker_under_promise() -> None:
    on_loop: list[bool] = []
    root = AsyncSteps()
    loop_thread = threading.get_ident()

    def step(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: on_loop.append(threading.get_ident() == loop_thread))
        threading.Thread(target=root.cancel).start()

    root.add(step)
    with anyio.fail_after(10), pytest.raises(FutoInError) as err:
        await root.promise()
    assert err.value.code == Errors.Cancelled
    assert on_loop == [True]


# -- row 5: deeply nested single-branch parallel steps ---------------------------------------

DEPTH = 10_000


def _nested(cancels: list[int], errors: list[str], innermost: Any) -> AsyncSteps:
    def level(asi: AsyncSteps, depth: int) -> None:
        asi.set_cancel(lambda asi: cancels.append(depth))
        if depth == DEPTH:
            innermost(asi)
            return
        asi.parallel(lambda asi, code: errors.append(code)).add(
            lambda asi: level(asi, depth + 1))

    root = AsyncSteps()
    root.add(lambda asi: level(asi, 0))
    return root


async def test_deep_parallel_cancel() -> None:
    cancels: list[int] = []
    errors: list[str] = []
    reached = anyio.Event()

    def innermost(asi: AsyncSteps) -> None:
        asi.wait_external()
        reached.set()

    root = _nested(cancels, errors, innermost)
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            async def cancel_when_reached() -> None:
                await reached.wait()
                root.cancel()

            tg.start_soon(cancel_when_reached)
            with pytest.raises(FutoInError) as err:
                await root.promise()
    assert err.value.code == Errors.Cancelled
    assert cancels == list(range(DEPTH, -1, -1))  # every handler once, innermost first
    assert errors == []


async def test_deep_parallel_timeout_outside() -> None:
    """A sibling of the nesting times out once it is built: the whole nesting is cancelled."""
    cancels: list[int] = []
    errors: list[str] = []
    reached = anyio.Event()

    def innermost(asi: AsyncSteps) -> None:
        asi.wait_external()
        reached.set()

    nested = _nested(cancels, errors, innermost)
    outer: list[str] = []
    root = AsyncSteps()
    par = root.parallel(lambda asi, code: outer.append(code))
    par.add(lambda asi: asi.copy_from(nested))

    def sibling(asi: AsyncSteps) -> None:
        asi.await_(reached.wait())
        asi.add(lambda asi: asi.set_timeout(0))

    par.add(sibling)
    with anyio.fail_after(60), pytest.raises(FutoInError) as err:
        await root.promise()
    assert err.value.code == Errors.Timeout
    assert cancels == list(range(DEPTH, -1, -1))
    assert errors == []  # no error handler of the cancelled nesting runs
    assert outer == [Errors.Timeout]


async def test_deep_parallel_timeout_inside() -> None:
    cancels: list[int] = []
    errors: list[str] = []
    root = _nested(cancels, errors, lambda asi: asi.set_timeout(0))
    with anyio.fail_after(60), pytest.raises(FutoInError) as err:
        await root.promise()
    assert err.value.code == Errors.Timeout
    assert cancels == list(range(DEPTH, -1, -1))
    assert errors == [Errors.Timeout] * DEPTH  # every level's error handler, once


# -- row 6: root.cancel() from a handler while a Timeout unwinds -------------------------------


@pytest.mark.parametrize("where", ["cancel handler", "error handler", "error handler, success"])
async def test_cancel_from_a_handler_while_a_timeout_unwinds(
        where: str, caplog: pytest.LogCaptureFixture) -> None:
    log: list[Any] = []
    async with AsyncTool():
        root = AsyncSteps()

        def on_cancel(asi: AsyncSteps) -> None:
            log.append("cancel handler")
            if where == "cancel handler":
                root.cancel()

        def on_error(asi: AsyncSteps, code: str) -> None:
            log.append(("error handler", code))
            if where != "cancel handler":
                root.cancel()
            if where == "error handler, success":
                asi.success()

        def inner(asi: AsyncSteps) -> None:
            asi.set_cancel(on_cancel)
            asi.set_timeout(1)

        def outer(asi: AsyncSteps) -> None:
            asi.set_cancel(lambda asi: log.append("outer cancel handler"))
            asi.add(inner, on_error)

        root.add(outer, lambda asi, code: log.append(("outer error handler", code)))
        root.add(lambda asi: log.append("next step"))
        root.execute(lambda code: log.append(("unhandled", code)))
    expected: list[Any] = ["cancel handler"]
    if where != "cancel handler":
        expected.append(("error handler", Errors.Timeout))
    assert log == [*expected, "outer cancel handler"]
    assert _internal_records(caplog) == []


async def test_cancel_from_an_error_handler_under_promise() -> None:
    log: list[Any] = []
    root = AsyncSteps()

    def on_error(asi: AsyncSteps, code: str) -> None:
        log.append(code)
        root.cancel()

    root.add(lambda asi: asi.add(lambda asi: asi.set_timeout(1), on_error),
             lambda asi, code: log.append(("outer", code)))
    with pytest.raises(FutoInError) as err:
        await root.promise()
    assert err.value.code == Errors.Cancelled
    assert log == [Errors.Timeout]


async def test_cancel_from_an_error_handler_of_a_raising_step() -> None:
    """The step raised in the driver's burst: cancel() is deferred, yet no handler runs after."""
    log: list[Any] = []
    root = AsyncSteps()

    def on_error(asi: AsyncSteps, code: str) -> None:
        log.append(code)
        root.cancel()

    def failing(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancel handler"))
        asi.add(lambda asi: asi.error("Boom"), on_error)

    root.add(failing, lambda asi, code: log.append(("outer", code)))
    with pytest.raises(FutoInError) as err:
        await root.promise()
    assert err.value.code == Errors.Cancelled
    assert log == ["Boom", "cancel handler"]


# -- row 8: scheduling on an AsyncTool that has exited -----------------------------------------


async def test_scheduling_after_the_tool_exited() -> None:
    async with AsyncTool() as tool:
        pass
    calls: list[Callable[[], object]] = [lambda: tool.immediate(lambda: None),
                                         lambda: tool.deferred(1, lambda: None)]
    for call in calls:
        with pytest.raises(FutoInError, match="has already exited") as err:
            call()
        assert err.value.code == Errors.InternalError

    def from_thread() -> None:
        with pytest.raises(FutoInError, match="has already exited"):
            tool.immediate(lambda: None)

    await anyio.to_thread.run_sync(from_thread)
    assert tool.statistics().scheduled == 0


async def test_scheduling_on_a_promise_driver_after_it_ended() -> None:
    tools: list[AsyncTool] = []
    root = AsyncSteps()

    def step(asi: AsyncSteps) -> None:
        assert asi.tool is not None
        tools.append(asi.tool)

    root.add(step)
    await root.promise()
    with pytest.raises(FutoInError, match="has already exited"):
        tools[0].immediate(lambda: None)


# -- row 9: state variables named like dict methods --------------------------------------------


@pytest.mark.parametrize("name", ["items", "values", "keys", "get", "pop", "update", "copy"])
def test_state_attribute_named_like_a_dict_method(name: str) -> None:
    state = State()
    with pytest.raises(AttributeError, match=rf"use state\['{name}'\]"):
        setattr(state, name, [1])
    assert name not in state
    with pytest.raises(AttributeError, match=rf"use state\['{name}'\]"):
        delattr(state, name)
    state[name] = [1]  # the documented way
    assert state[name] == [1]
    state.other = 2
    assert state.other is state["other"]


_PREDEFINED_KEYS = ("error_info", "last_exception", "async_stack")


def test_state_reads_copies_and_pickles_as_the_dict_it_is() -> None:
    # The compiled build's State is an extension type with an attribute read of its own: a
    # dict method still reads back as the method, and copy and pickle keep the class and items.
    state = State(x=1)
    assert state.get("x") == 1 and state.keys() == {"x", *_PREDEFINED_KEYS}
    pickled = [pickle.loads(pickle.dumps(state, protocol))
               for protocol in range(pickle.HIGHEST_PROTOCOL + 1)]
    for made in (copy.copy(state), copy.deepcopy(state), *pickled):
        assert type(made) is State
        assert made == state and made.x == 1

    class Named(State):
        kind = "named"

        @property
        def double(self) -> int:
            return int(self["x"]) * 2

    named = Named(x=2)
    # A subclass's own attributes read as attributes; variables as variables.
    assert (named.kind, named.double, named.x) == ("named", 4, 2)
    with pytest.raises(AttributeError, match="no variable 'missing'"):
        _ = named.missing


async def test_state_dict_method_name_inside_a_step() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.state.items = [1, 2]  # type: ignore[method-assign,assignment]

    asi = AsyncSteps()
    asi.add(step)
    with pytest.raises(FutoInError) as err:
        await asi.promise()
    assert err.value.code == Errors.InternalError
    assert "state['items']" in str(asi.state.error_info)


# -- row 10: await_() of a branch that never runs ----------------------------------------------


def _never_running_await(order: str) -> AsyncSteps:
    async def work() -> int:
        return 1

    root = AsyncSteps()
    if order == "sequential":
        root.add(lambda asi: asi.error("Boom"))
        root.await_(work())
        return root
    par = root.parallel()
    if order == "failing first":
        par.add(lambda asi: asi.error("Boom"))
    par.add(lambda asi: asi.await_(work()))
    if order == "failing second":
        par.add(lambda asi: asi.error("Boom"))
    return root


@pytest.mark.parametrize("order", ["failing first", "failing second", "sequential"])
async def test_await_of_a_step_that_never_runs_is_closed(order: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        root = _never_running_await(order)
        with pytest.raises(FutoInError) as err:
            await root.promise()
        del root
        gc.collect()
    assert err.value.code == "Boom"
    assert [str(w.message) for w in caught] == []


# -- found by the chaos driver: a worker's immediate() on its way as the block exits ------------


async def test_immediate_on_its_way_from_a_worker_runs_before_the_block_exits() -> None:
    ran: list[int] = []
    async with AsyncTool() as tool:
        # The loop thread blocks while the worker schedules: every hand-over is still on its
        # way when the block ends, and the block waits for them.
        thread = threading.Thread(target=lambda: [tool.immediate(partial(ran.append, i))
                                                  for i in range(50)])
        thread.start()
        thread.join()
    assert ran == list(range(50))
    assert tool.statistics() == type(tool.statistics())(roots=0, ready=0, scheduled=0, tasks=0)


# -- item 3: from which threads each public method may be called -------------------------------

#: Step methods for the loop thread only; each is tried from a worker while the step executes.
LOOP_ONLY: dict[str, Callable[[AsyncSteps], object]] = {
    "add()": lambda asi: asi.add(lambda asi: None),
    "parallel()": lambda asi: asi.parallel(),
    "success_step()": lambda asi: asi.success_step(1),
    "repeat()": lambda asi: asi.repeat(1, lambda asi, i: None),
    "copy_from()": lambda asi: asi.copy_from(AsyncSteps()),
    "set_timeout()": lambda asi: asi.set_timeout(10),
    "set_cancel()": lambda asi: asi.set_cancel(lambda asi: None),
    "wait_external()": lambda asi: asi.wait_external(),
    "stack()": lambda asi: asi.stack(4),
    "break_loop()": lambda asi: asi.break_loop(),
    "success()": lambda asi: asi.success(),
    "error()": lambda asi: asi.error("E"),
}


@pytest.mark.parametrize("what", list(LOOP_ONLY))
async def test_step_method_from_another_thread_raises_at_the_call(what: str) -> None:
    raised: list[BaseException] = []

    def step(asi: AsyncSteps) -> None:
        def worker() -> None:
            try:
                LOOP_ONLY[what](asi)
            except BaseException as exc:
                raised.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()  # the step is still executing on the loop thread

    asi = AsyncSteps()
    asi.add(step)
    asi.add(lambda asi: asi.success("went on"))
    assert await asi.promise() == "went on"  # the misuse did not touch the flow
    assert len(raised) == 1 and type(raised[0]) is RuntimeError
    assert "must be called on the event loop's thread" in str(raised[0])


async def test_model_root_may_be_built_on_any_thread() -> None:
    def build() -> AsyncSteps:
        root = AsyncSteps()
        root.add(lambda asi: asi.success(1))
        root.add(lambda asi, value: asi.success(value + 1))
        return root.clone()

    root = await anyio.to_thread.run_sync(build)
    assert await root.promise() == 2


@pytest.mark.parametrize("kind", ["Mutex", "Throttle", "Limiter"])
async def test_primitive_refuses_a_second_thread_while_in_use(kind: str) -> None:
    prim: Any
    if kind == "Mutex":
        prim = Mutex()
    elif kind == "Throttle":
        prim = Throttle(1, 60_000)
    else:
        prim = Limiter(max_queue=None, period_ms=60_000)
    async with prim:
        async def contend() -> None:
            async with prim:
                pass  # pragma: no cover - never let in

        async with anyio.create_task_group() as tg:
            tg.start_soon(contend)  # a waiter: the primitive is in use
            await anyio.sleep(0.01)

            def other_loop() -> None:
                anyio.run(contend_elsewhere)

            async def contend_elsewhere() -> None:
                async with prim:
                    pass  # pragma: no cover - refused

            with pytest.raises(RuntimeError, match="from another thread while in use"):
                await anyio.to_thread.run_sync(other_loop)
            tg.cancel_scope.cancel()
    # Idle again: another event loop on another thread may take it over.
    if kind == "Mutex":
        def reuse() -> None:
            async def enter() -> None:
                async with prim:
                    pass
            anyio.run(enter)

        await anyio.to_thread.run_sync(reuse)
        assert prim.statistics().held == 0


# -- found by the chaos driver: handlers after a hand-over from a worker run inside a task -----


@pytest.mark.parametrize("what", ["cancel", "error"])
async def test_handlers_reached_from_a_worker_can_use_anyio(what: str) -> None:
    """On asyncio a loop callback has no current task, and AnyIO calls fail there: the hand-over
    runs in the driver's task (a Throttle's cancel handler reads the clock, for one)."""
    times: list[float] = []
    async with AsyncTool():
        root = AsyncSteps()
        steps: list[AsyncSteps] = []

        def step(asi: AsyncSteps) -> None:
            asi.set_cancel(lambda asi: times.append(anyio.current_time()))
            steps.append(asi)

        root.add(step, lambda asi, code: times.append(anyio.current_time()))
        root.execute()
        await anyio.sleep(0.01)
        if what == "cancel":
            await anyio.to_thread.run_sync(root.cancel)
        else:
            def fail() -> None:
                with pytest.raises(FutoInError):
                    steps[0].error("E")

            await anyio.to_thread.run_sync(fail)
    assert len(times) == (1 if what == "cancel" else 2)


async def test_parallel_add_from_another_thread_raises() -> None:
    raised: list[BaseException] = []

    def step(asi: AsyncSteps) -> None:
        par = asi.parallel()
        par.add(lambda asi: None)

        def worker() -> None:
            try:
                par.add(lambda asi: None)
            except BaseException as exc:
                raised.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()

    asi = AsyncSteps()
    asi.add(step)
    await asi.promise()
    assert len(raised) == 1 and "parallel add() must be called" in str(raised[0])
