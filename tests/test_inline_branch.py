"""A ``promise()``'s first coroutine branch to start runs in the caller's task; the others in
tasks (``_Driver._start_coroutine``). The semantics stay a task group's: a branch that fails
cancels the others, an outer timeout cancels every branch, each cancel handler runs after its
own coroutine has ended, a branch's context is its own copy, and the plain steps that a task
branch's end makes ready run in the caller's context while the inline branch is awaited.

Virtual time on both backends (trio's MockClock, the fuzz's virtual-time asyncio loop).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from backend_support import first_branch_inline, own_tasks, virtual_time, waiting_branch

from futoin_anyio import AsyncSteps, Errors, FutoInError

pytestmark = pytest.mark.anyio

_var: ContextVar[str] = ContextVar("test_inline_branch", default="unset")

HELPER = "futoin_anyio driver helper"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return virtual_time(request.param)


def _assert_cleanups_then_cancels(log: list[str], names: list[str]) -> None:
    """Each branch's cancel handler ran once, after its own coroutine's cleanup."""
    assert sorted(log) == sorted([f"{n} cancel" for n in names] + [f"{n} cleanup" for n in names])
    for name in names:
        assert log.index(f"{name} cleanup") < log.index(f"{name} cancel")


async def test_one_branch_runs_in_the_callers_task() -> None:
    """Three coroutine branches: the first runs in the caller's task, each other one in a task
    of its own; none is left after."""
    ran_in: list[int] = []

    async def branch(asi: AsyncSteps) -> None:
        ran_in.append(anyio.get_current_task().id)
        await anyio.sleep(0.01)

    root = AsyncSteps()
    root.parallel().add(branch).add(branch).add(branch)
    before = own_tasks()
    await root.promise()
    caller = anyio.get_current_task().id
    assert len(ran_in) == 3 and len(set(ran_in)) == 3
    assert (ran_in[0] == caller) is first_branch_inline()
    assert caller not in ran_in[1:]
    assert own_tasks() == before


async def test_task_branch_ending_first_sets_the_callers_context() -> None:
    """The task branch ends while the first branch is awaited in the caller's task: its next
    plain step runs then, in the caller's context (what it sets is there after ``promise()``),
    served by the ending task itself: no helper task is started for it."""
    seen: list[Any] = []

    async def slow(asi: AsyncSteps) -> None:
        _var.set("set by the inline branch's coroutine")  # its own copy: not seen after
        await anyio.sleep(0.2)

    async def quick(asi: AsyncSteps) -> None:
        await anyio.sleep(0.1)

    def after_quick(asi: AsyncSteps) -> None:
        _var.set("set after the task branch")
        seen.append(HELPER in own_tasks())

    root = AsyncSteps()
    root.parallel().add(slow).add(lambda asi: asi.add(quick).add(after_quick))
    root.add(lambda asi: seen.append(_var.get()))
    _var.set("caller")
    await root.promise()
    assert seen == [False, "set after the task branch"]
    assert _var.get() == "set after the task branch"


async def test_an_outer_timeout_two_levels_up_cancels_the_inline_branch() -> None:
    """The inline branch is a branch of a branch: the ``set_timeout()`` of the step two levels
    up is its deadline. At it each coroutine ends, then its branch's cancel handler, then the
    error handler; no helper task serves the wait."""
    log: list[str] = []
    tasks: list[set[str | None]] = []

    def inner(asi: AsyncSteps) -> None:
        asi.parallel().add(waiting_branch("a", log, 10, tasks)) \
            .add(waiting_branch("b", log, 20, tasks))

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.parallel().add(inner)

    def handler(asi: AsyncSteps, code: str) -> None:
        log.append(f"error {code}")
        asi.success()

    root = AsyncSteps()
    root.add(outer, handler)
    start = anyio.current_time()
    await root.promise()
    assert anyio.current_time() - start == pytest.approx(0.05, abs=0.01)
    _assert_cleanups_then_cancels(log[:4], ["a", "b"])
    assert log[4:] == [f"error {Errors.Timeout}"]
    assert not any(HELPER in names for names in tasks)


@pytest.mark.parametrize("failing", ["inline", "task"])
async def test_a_failing_branch_cancels_the_other(failing: str) -> None:
    """Either branch fails (the inline one or the task one): the other one's coroutine ends
    cancelled, then its cancel handler runs, then the error handler sees the failure."""
    log: list[str] = []

    async def fails(asi: AsyncSteps) -> None:
        await anyio.sleep(0.01)
        asi.error("NotFound")

    def handler(asi: AsyncSteps, code: str) -> None:
        log.append(f"error {code}")
        asi.success()

    def both(asi: AsyncSteps) -> None:
        if failing == "inline":
            asi.parallel().add(fails).add(waiting_branch("task", log))
        else:
            asi.parallel().add(waiting_branch("inline", log)).add(fails)

    root = AsyncSteps()
    root.add(both, handler)
    before = own_tasks()
    start = anyio.current_time()
    await root.promise()
    assert anyio.current_time() - start == pytest.approx(0.01, abs=0.005)
    other = "task" if failing == "inline" else "inline"
    assert log == [f"{other} cleanup", f"{other} cancel", "error NotFound"]
    assert own_tasks() == before


async def test_a_halted_inline_branch_failing_on_its_own_lets_the_parallel_unwind() -> None:
    """The task branch wakes the inline one and fails in the same step: the inline branch is
    halted, but its coroutine (already woken) ends with an error of its own before the
    cancellation reaches it. The parallel step's unwinding, which waits for that coroutine,
    goes on: the task branch's error reaches the handler, the inline branch's cancel handler
    runs, nothing hangs."""
    go = anyio.Event()
    log: list[str] = []

    async def woken(asi: AsyncSteps) -> None:
        await go.wait()
        raise FutoInError("InlineFail")

    def inline(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("inline cancel"))
        asi.add(woken)

    async def fails(asi: AsyncSteps) -> None:
        await anyio.sleep(0.01)
        go.set()
        asi.error("TaskFail")

    def handler(asi: AsyncSteps, code: str) -> None:
        log.append(f"error {code}")
        asi.success()

    root = AsyncSteps()
    root.add(lambda asi: asi.parallel().add(inline).add(fails), handler)
    with anyio.fail_after(5):
        await root.promise()
    assert log == ["inline cancel", "error TaskFail"]


async def test_keyboard_interrupt_of_a_step_the_ending_task_serves() -> None:
    """A plain step that a task branch's end makes ready raises KeyboardInterrupt while the
    inline branch is awaited: the inline branch's coroutine is cancelled and the interrupt
    comes out of ``promise()`` bare, with no task left."""
    log: list[str] = []

    async def slow(asi: AsyncSteps) -> None:
        try:
            await anyio.sleep(10)
        finally:
            log.append("inline cleanup")

    async def quick(asi: AsyncSteps) -> None:
        await anyio.sleep(0.01)

    def interrupt(asi: AsyncSteps) -> None:
        raise KeyboardInterrupt

    root = AsyncSteps()
    root.parallel().add(slow).add(lambda asi: asi.add(quick).add(interrupt))
    before = own_tasks()
    with pytest.raises(KeyboardInterrupt):
        await root.promise()
    assert log == ["inline cleanup"]
    assert own_tasks() == before


async def test_root_cancel_while_the_inline_branch_waits() -> None:
    """``root.cancel()`` from another task while the inline branch and a task branch wait:
    both coroutines end, both cancel handlers run after them, ``promise()`` raises
    ``Cancelled``; the caller's own cancellation state is untouched."""
    log: list[str] = []
    root = AsyncSteps()
    root.parallel().add(waiting_branch("a", log)).add(waiting_branch("b", log))
    before = own_tasks()

    async def cancel_soon() -> None:
        await anyio.sleep(0.05)
        root.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_soon)
        with pytest.raises(FutoInError) as caught:
            await root.promise()
    assert caught.value.code == Errors.Cancelled
    _assert_cleanups_then_cancels(log, ["a", "b"])
    assert own_tasks() == before
    await anyio.lowlevel.checkpoint()  # not cancelled
