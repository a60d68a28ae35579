"""A ``promise()`` whose coroutine branches run as tasks (of no task group): the caller's task
waits for them parked, and the driver's work is served in the caller's context (by the caller's
task, or by a branch task that ends while the caller awaits the first branch).

Every test runs on asyncio and trio, in virtual time (trio's ``MockClock``, the fuzzer's
:class:`fuzz.interp.VirtualTimeLoop` for asyncio); only the scheduling count is trio's alone.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import trio
from backend_support import own_tasks, virtual_time, waiting_branch

from futoin_anyio import AsyncSteps, Errors, FutoInError, _alarm
from futoin_anyio._alarm import TASK_NAME as ALARM_TASK

pytestmark = pytest.mark.anyio

_a: ContextVar[str] = ContextVar("test_group_exit_a", default="unset")
_b: ContextVar[str] = ContextVar("test_group_exit_b", default="unset")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return virtual_time(request.param)


class _Wakes(trio.abc.Instrument):
    """Counts the tasks spawned, and how often the caller's task and the tasks spawned are
    scheduled to run (the alarm's system task aside)."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.tasks = {task}
        self.spawned = 0
        self.caller = task
        self.caller_count = 0
        self.count = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.name != ALARM_TASK:
            self.tasks.add(task)
            self.spawned += 1

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if task in self.tasks:
            self.count += 1
            if task is self.caller:
                self.caller_count += 1


async def test_branches_end_with_one_wake_of_the_caller(anyio_backend_name: str) -> None:
    """Two coroutine branches of one checkpoint each: one task is spawned (the first branch
    runs in the caller's task), and the tasks are scheduled four times in all: each branch's
    checkpoint, the task's start, and the caller's task once more, when the last branch has
    ended, not once more to leave a nursery after its tasks had ended (no nursery is opened).
    (Two tasks, five times, with both branches in tasks; six, with a wake of the driver before
    it left a nursery.)"""

    async def one(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        asi.state.total += 1

    async def two(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()
        asi.state.total += 2

    root = AsyncSteps({"total": 0})
    root.parallel().add(one).add(two)
    before = own_tasks()
    wakes = None
    if anyio_backend_name == "trio":
        wakes = _Wakes(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(wakes)
    try:
        await root.promise()
    finally:
        if wakes is not None:
            trio.lowlevel.remove_instrument(wakes)
    assert root.state.total == 3
    assert own_tasks() == before
    if wakes is not None:
        assert (wakes.spawned, wakes.count, wakes.caller_count) == (1, 4, 2)


async def test_branch_steps_set_the_callers_context() -> None:
    """A plain step after a branch's coroutine, and the step after the parallel, run in the
    caller's context, as they would had the caller's task run them (docs/trio.rst)."""
    seen: list[str] = []

    def branch(var: ContextVar[str], delay: float) -> Any:
        async def wait(asi: AsyncSteps) -> None:
            await anyio.sleep(delay)

        def set_var(asi: AsyncSteps) -> None:
            var.set(f"set after {delay}")

        def steps(asi: AsyncSteps) -> None:
            asi.add(wait).add(set_var)
        return steps

    root = AsyncSteps()
    root.parallel().add(branch(_a, 0.1)).add(branch(_b, 0.2))
    root.add(lambda asi: seen.extend([_a.get(), _b.get()]))
    await root.promise()
    assert seen == ["set after 0.1", "set after 0.2"]
    assert (_a.get(), _b.get()) == ("set after 0.1", "set after 0.2")


async def test_timeout_while_the_branches_run() -> None:
    """The flow's timeout is due while its coroutine branches run: each branch's cancel handler
    runs once its coroutine has ended, then the error handler, and the flow goes on."""
    log: list[str] = []

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.parallel().add(waiting_branch("a", log)).add(waiting_branch("b", log))

    def handler(asi: AsyncSteps, code: str) -> None:
        log.append(f"error {code}")
        asi.success("recovered")

    root = AsyncSteps()
    root.add(outer, handler)
    start = anyio.current_time()
    assert await root.promise() == "recovered"
    assert anyio.current_time() - start == pytest.approx(0.05, abs=0.01)
    # Each branch's cancel handler runs once its own coroutine has ended; the error handler
    # after both.
    assert sorted(log[:4]) == ["a cancel", "a cleanup", "b cancel", "b cleanup"]
    assert log.index("a cleanup") < log.index("a cancel")
    assert log.index("b cleanup") < log.index("b cancel")
    assert log[4:] == [f"error {Errors.Timeout}"]


def _alarms_armed(anyio_backend_name: str) -> int:
    """Alarms armed and neither fired nor disarmed: trio's sleeper counts them; asyncio's are
    timer handles of the loop (its own, not cancelled)."""
    if anyio_backend_name == "trio":
        sleeper = _alarm._last
        return 0 if sleeper is None else sleeper.live
    loop: Any = asyncio.get_running_loop()
    return sum(not handle.cancelled() for handle in loop._scheduled)


async def test_timeout_after_the_inline_branch_ended(anyio_backend_name: str) -> None:
    """The branch the caller's task awaited ends at once, the other waits past the flow's
    timeout: the timeout comes due while the caller waits for that branch, on time, with its
    reason, and no alarm is left armed."""
    log: list[str] = []

    async def quick(asi: AsyncSteps) -> None:
        log.append("quick")

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.parallel().add(quick).add(waiting_branch("slow", log))

    def handler(asi: AsyncSteps, code: str) -> None:
        log.append(f"error {code}: {asi.state.error_info}")
        asi.success("recovered")

    root = AsyncSteps()
    root.add(outer, handler)
    start = anyio.current_time()
    assert await root.promise() == "recovered"
    assert anyio.current_time() - start == pytest.approx(0.05, abs=0.01)
    assert log == ["quick", "slow cleanup", "slow cancel",
                   f"error {Errors.Timeout}: set_timeout(50 ms) of step "
                   "test_timeout_after_the_inline_branch_ended.<locals>.outer"]
    assert _alarms_armed(anyio_backend_name) == 0


async def test_other_branch_ends_before_the_timeout_after_the_inline_one(
        anyio_backend_name: str) -> None:
    """As above, but the other branch ends before the timeout: the root completes then, the
    timeout never fires (not even later), and no alarm is left armed."""
    log: list[str] = []

    async def quick(asi: AsyncSteps) -> None:
        log.append("quick")

    async def slower(asi: AsyncSteps) -> None:
        await anyio.sleep(0.02)
        log.append("slower")

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.parallel().add(quick).add(slower)

    root = AsyncSteps()
    root.add(outer, lambda asi, code: log.append(f"error {code}"))
    root.add(lambda asi: asi.success("done"))
    start = anyio.current_time()
    assert await root.promise() == "done"
    assert anyio.current_time() - start == pytest.approx(0.02, abs=0.005)
    assert _alarms_armed(anyio_backend_name) == 0
    await anyio.sleep(0.1)  # past the deadline: nothing fires
    assert log == ["quick", "slower"]


async def test_no_alarm_is_left_by_an_inline_step_under_a_timeout(
        anyio_backend_name: str) -> None:
    """A root whose timed step's coroutine was awaited inline and that then ends without waiting
    (its alarm is left for a wait that does not come), or is left by the caller's cancellation:
    no alarm outlives the ``promise()``."""
    async def quick(asi: AsyncSteps) -> str:
        await anyio.lowlevel.checkpoint()
        return "quick"

    def timed(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.add(quick)

    root = AsyncSteps()
    root.add(timed)
    assert await root.promise() == "quick"
    assert _alarms_armed(anyio_backend_name) == 0

    async def forever(asi: AsyncSteps) -> None:
        await anyio.sleep_forever()

    def timed_forever(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.add(forever)

    root = AsyncSteps()
    root.add(timed_forever)
    with anyio.move_on_after(0.01) as scope:
        await root.promise()
    assert scope.cancelled_caught
    assert _alarms_armed(anyio_backend_name) == 0


async def test_outer_cancellation_with_slow_cleanups_and_a_due_timeout() -> None:
    """The caller is cancelled while its branches take time to end and the flow's timeout
    comes due meanwhile: nothing runs the flow on (no handler but the cancel handlers), nothing
    spins, the cancellation comes out unchanged and no task is left."""
    log: list[str] = []

    async def slow(asi: AsyncSteps) -> None:
        try:
            await anyio.sleep(10)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(1)  # the cleanup outlasts the timeout below
            log.append("cleanup")

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(500)
        asi.set_cancel(lambda asi: log.append("cancel"))
        asi.parallel().add(slow).add(slow)

    root = AsyncSteps()
    root.add(outer, lambda asi, code: log.append(f"error {code}"))
    before = own_tasks()
    with anyio.move_on_after(0.1) as scope:
        await root.promise()
    assert scope.cancelled_caught
    assert log == ["cleanup", "cleanup", "cancel"]
    assert own_tasks() == before


async def _cancel_as_the_last_branch_ends() -> list[str]:
    go = anyio.Event()
    log: list[str] = []

    async def branch(asi: AsyncSteps) -> None:
        await go.wait()

    def wait(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append("cancelled while waiting"))
        asi.wait_external()

    root = AsyncSteps()
    root.parallel().add(branch)
    root.add(wait)

    async def canceller() -> None:
        await go.wait()
        root.cancel()

    async def run() -> None:
        with pytest.raises(FutoInError) as caught:
            await root.promise()
        log.append(caught.value.code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        tg.start_soon(canceller)
        await anyio.sleep(0.01)
        go.set()
    return log


async def test_root_cancel_as_the_last_branch_ends() -> None:
    """``root.cancel()`` from another task just after the last branch has ended (its task gone,
    the caller's task not yet back), the flow waiting in the step after the parallel:
    the root ends Cancelled and nothing is raised elsewhere. Both orders of the two wake-ups
    are tried (trio runs a batch of tasks in either order)."""
    for _ in range(20):
        log = await _cancel_as_the_last_branch_ends()
        assert log in (["cancelled while waiting", Errors.Cancelled], [Errors.Cancelled])


async def test_keyboard_interrupt_of_a_branch_step_while_the_caller_waits() -> None:
    """A branch's plain step raises KeyboardInterrupt while the caller waits for the branches:
    the other branch is cancelled, the interrupt comes out of ``promise()`` bare."""
    log: list[str] = []

    async def quick(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()

    async def slow(asi: AsyncSteps) -> None:
        try:
            await anyio.sleep(10)
        finally:
            log.append("slow cleanup")

    def interrupt(asi: AsyncSteps) -> None:
        raise KeyboardInterrupt

    def interrupting(asi: AsyncSteps) -> None:
        asi.add(quick).add(interrupt)

    root = AsyncSteps()
    root.parallel().add(interrupting).add(slow)
    before = own_tasks()
    with pytest.raises(KeyboardInterrupt):
        await root.promise()
    assert log == ["slow cleanup"]
    assert own_tasks() == before
