"""Cancel reasons and Timeout info: every cancel of the library says why (issue 26, part B)."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
import sniffio
from backend_support import first_branch_inline, own_tasks

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError
from futoin_anyio._alarm import TASK_NAME as ALARM_TASK
from futoin_anyio.testing import BACKENDS, backend

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return backend(request.param, autojump_clock=True)


def _reason(exc: BaseException) -> tuple[str | None, str | None]:
    """(source, reason) of the backend's cancellation, comparable across scopes."""
    if hasattr(exc, "source"):  # trio.Cancelled
        return exc.source, getattr(exc, "reason", None)
    text = str(exc.args[0]) if exc.args else ""  # AnyIO on asyncio: "...; reason: <reason>"
    return "asyncio", text.partition("; reason: ")[2] or None


async def _sleep_seeing(seen: list[BaseException], started: anyio.Event | None = None) -> None:
    """Sleep until cancelled (setting ``started`` first); the cancellation goes to ``seen``."""
    try:
        if started is not None:
            started.set()
        await anyio.sleep(10)
    except anyio.get_cancelled_exc_class() as exc:
        seen.append(exc)
        raise


async def _timed_out(path: str) -> tuple[tuple[str | None, str | None], FutoInError]:
    seen: list[BaseException] = []

    async def fetch_orders(asi: AsyncSteps) -> None:
        await _sleep_seeing(seen)

    def timed(asi: AsyncSteps) -> None:
        asi.set_timeout(100)
        asi.add(fetch_orders)

    async def timed_late(asi: AsyncSteps) -> None:
        # set_timeout() called while the coroutine is awaited inline: the alarm moves.
        asi.set_timeout(100)
        await fetch_orders(asi)

    root = AsyncSteps()
    if path == "branch":  # a branch's coroutine runs as a task of its own
        root.add(lambda asi: asi.parallel().add(timed).add(lambda asi: None))
    elif path == "inline":  # a lone flow's coroutine is awaited inline, in the caller's task
        root.add(timed)
    elif path == "inline, set while awaited":
        root.add(lambda asi: asi.set_timeout(10_000) or asi.add(timed_late))
    else:  # executed in an AsyncTool: its coroutine runs as a task of the tool
        errors: list[FutoInError] = []

        def failed(code: str) -> None:
            errors.append(FutoInError(code, root.state.error_info))

        async with AsyncTool():
            root.add(timed).execute(failed)
        assert len(seen) == 1 and len(errors) == 1
        return _reason(seen[0]), errors[0]
    with pytest.raises(FutoInError) as info:
        await root.promise()
    assert len(seen) == 1
    return _reason(seen[0]), info.value


@pytest.mark.parametrize("path", ["branch", "execute", "inline, set while awaited"])
async def test_timeout_same_story_inline_and_as_a_task(path: str) -> None:
    """The step's coroutine sees the same cancellation whether it is awaited inline or runs as
    a task: an explicit cancel of the library's whose reason names the limit and the step (the
    text of the Timeout error's info), never a bare deadline."""
    inline_reason, inline_error = await _timed_out("inline")
    other_reason, other_error = await _timed_out(path)
    source, reason = inline_reason
    if source == "asyncio":  # AnyIO: "Cancelled via cancel scope ...; reason: <reason>"
        assert other_reason[0] == "asyncio"
    else:
        assert source == other_reason[0] == "explicit"
    step = "timed_late" if path.startswith("inline") else "timed"
    assert reason == "set_timeout(100 ms) of step _timed_out.<locals>.timed"
    assert other_reason[1] == f"set_timeout(100 ms) of step _timed_out.<locals>.{step}"
    assert inline_error.code == other_error.code == Errors.Timeout
    assert inline_error.info == reason
    assert other_error.info == other_reason[1]


async def test_timeout_info_in_state() -> None:
    infos: list[Any] = []

    def timed(asi: AsyncSteps) -> None:
        asi.set_timeout(25.5)
        asi.wait_external()

    def on_error(asi: AsyncSteps, code: str) -> None:
        infos.append(asi.state.error_info)
        asi.success()

    root = AsyncSteps()
    root.add(lambda asi: asi.add(timed), on_error)
    await root.promise()
    assert infos == ["set_timeout(25.5 ms) of step test_timeout_info_in_state.<locals>.timed"]


async def _cancelled_root(branch: bool, user_reason: str | None
                          ) -> tuple[BaseException, FutoInError]:
    seen: list[BaseException] = []
    started = anyio.Event()

    async def waiting(asi: AsyncSteps) -> None:
        await _sleep_seeing(seen, started)

    root = AsyncSteps()
    if branch:
        root.add(lambda asi: asi.parallel().add(waiting))
    else:
        root.add(waiting)
    errors: list[FutoInError] = []

    async def run() -> None:
        try:
            await root.promise()
        except FutoInError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await started.wait()
        root.cancel(user_reason)
    return seen[0], errors[0]


async def test_root_cancel_reason() -> None:
    for user_reason, expected in ((None, "root.cancel()"), ("shutting down", "shutting down")):
        for branch in (False, True):
            cancelled, error = await _cancelled_root(branch, user_reason)
            assert _reason(cancelled)[1] == expected, (branch, cancelled)
            assert error.code == Errors.Cancelled
            info = "the root was cancelled" + ("" if user_reason is None else f": {user_reason}")
            assert error.info == info


async def test_sibling_failure_reason() -> None:
    seen: list[BaseException] = []

    async def waiting(asi: AsyncSteps) -> None:
        await _sleep_seeing(seen)

    async def failing(asi: AsyncSteps) -> None:
        await anyio.sleep(0.01)
        asi.error("NotFound")

    root = AsyncSteps()
    root.add(lambda asi: asi.parallel().add(waiting).add(failing))
    with pytest.raises(FutoInError, match="NotFound"):
        await root.promise()
    assert _reason(seen[0])[1] == "sibling branch failed with NotFound"


async def test_outer_error_unwinding_a_parallel_step_reason() -> None:
    seen: list[BaseException] = []

    async def waiting(asi: AsyncSteps) -> None:
        await _sleep_seeing(seen)

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.parallel().add(waiting)

    root = AsyncSteps()
    root.add(outer)
    with pytest.raises(FutoInError, match="Timeout"):
        await root.promise()
    assert _reason(seen[0])[1] == "parallel step unwound by Timeout"


async def test_outer_cancellation_passes_through_unchanged() -> None:
    seen: list[BaseException] = []

    async def waiting(asi: AsyncSteps) -> None:
        await _sleep_seeing(seen)

    for branch in (False, True):
        seen.clear()
        root = AsyncSteps()
        if branch:
            root.add(lambda asi: asi.parallel().add(waiting))
        else:
            root.add(lambda asi: (asi.set_timeout(5000), asi.add(waiting)))
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(root.promise)
                await anyio.sleep(0.01)
                scope.cancel("the user's own reason")
        assert scope.cancelled_caught
        if not branch:
            # Inline: the coroutine runs in the caller's task and sees the caller's reason.
            assert _reason(seen[0])[1] == "the user's own reason", seen[0]
        else:
            assert seen  # its task was cancelled as promise() was left


async def test_callers_cancellation_reaches_a_branch_task_as_promise_is_left() -> None:
    """Under ``promise()`` a branch's task belongs to no task group (on trio a system task): the
    caller's cancellation reaches the branch awaited in the caller's task unchanged, and the
    branch's task as ``promise()`` is left, with the reason ``promise() is left by an
    exception``; the task's cleanup is done before ``promise()`` raises, and no task is left."""
    seen: dict[str, BaseException] = {}
    log: list[str] = []
    parents: dict[str, Any] = {}

    def branch(name: str) -> Any:
        async def step(asi: AsyncSteps) -> None:
            if sniffio.current_async_library() == "trio":
                import trio

                parents[name] = trio.lowlevel.current_task().parent_nursery
            try:
                await anyio.sleep(10)
            except anyio.get_cancelled_exc_class() as exc:
                seen[name] = exc
                raise
            finally:
                log.append(f"{name} cleanup")
        return step

    async def run() -> None:
        try:
            await root.promise()
        finally:
            log.append("promise() left")

    root = AsyncSteps()
    root.parallel().add(branch("first")).add(branch("second"))
    before = own_tasks()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.sleep(0.01)
            scope.cancel("the user's own reason")
    assert scope.cancelled_caught
    assert sorted(log[:2]) == ["first cleanup", "second cleanup"]
    assert log[2:] == ["promise() left"]
    assert _reason(seen["second"])[1] == "promise() is left by an exception"
    if first_branch_inline():
        assert _reason(seen["first"])[1] == "the user's own reason"
    else:
        assert _reason(seen["first"])[1] == "promise() is left by an exception"
    if parents:  # trio: the branch's task is a system task, in the run's system nursery
        import trio

        assert parents["second"].parent_task is trio.lowlevel.current_root_task()
    assert own_tasks() == before


async def test_a_branch_task_that_starts_after_promise_is_left_gets_the_same_reason() -> None:
    """The branch the caller awaits raises ``KeyboardInterrupt`` before the other branch's task
    has run (no schedule point in between): that task's coroutine still runs, in a scope
    already cancelled with the reason ``promise() is left by an exception``, and it ends before
    ``promise()`` raises."""
    seen: list[BaseException] = []

    async def first(asi: AsyncSteps) -> None:
        raise KeyboardInterrupt

    async def second(asi: AsyncSteps) -> None:
        await _sleep_seeing(seen)

    root = AsyncSteps()
    root.parallel().add(first).add(second)
    before = own_tasks()
    with pytest.raises(KeyboardInterrupt):
        await root.promise()
    assert len(seen) == 1
    assert _reason(seen[0])[1] == "promise() is left by an exception"
    assert own_tasks() == before


async def test_an_async_tool_root_cancel_reason() -> None:
    seen: list[BaseException] = []
    started = anyio.Event()

    async def waiting(asi: AsyncSteps) -> None:
        await _sleep_seeing(seen, started)

    codes: list[str] = []
    async with AsyncTool():
        root = AsyncSteps()
        root.add(waiting)
        root.execute(codes.append)
        await started.wait()
        root.cancel("client went away")
    assert _reason(seen[0])[1] == "client went away"
    assert codes == []  # Cancelled is not an unhandled error


def test_cancel_reason_must_be_a_str() -> None:
    with pytest.raises(TypeError, match="reason must be a str"):
        AsyncSteps().cancel(1)  # type: ignore[arg-type]


async def test_a_callers_nearer_deadline_keeps_its_own_story() -> None:
    """A deadline of the caller's that comes before the root's set_timeout() is the caller's:
    the inline coroutine sees the backend's own deadline cancellation, not our reason, and
    promise() lets it through (no Timeout)."""
    seen: list[BaseException] = []

    async def waiting(asi: AsyncSteps) -> None:
        await _sleep_seeing(seen)

    root = AsyncSteps()
    root.add(lambda asi: (asi.set_timeout(5000), asi.add(waiting)))
    with anyio.move_on_after(1) as scope:
        await root.promise()
    assert scope.cancelled_caught
    source, reason = _reason(seen[0])
    if source == "asyncio":
        assert reason == "deadline exceeded"
    else:
        assert (source, reason) == ("deadline", None)


async def test_an_inline_timeout_that_does_not_fire_leaves_nothing_awake(
        anyio_backend_name: str) -> None:
    """The alarm of a set_timeout() over an inline step is disarmed when the step ends early:
    on trio its task wakes once at the stale deadline (the deadline is left where it was: moving
    it at every disarm would cost more than one wake for all the stale alarms of that moment),
    finds nothing due, fires nothing and sleeps on; on asyncio no timer of it is left in the
    loop."""
    async def quick(asi: AsyncSteps) -> None:
        await anyio.lowlevel.checkpoint()

    def timed(asi: AsyncSteps) -> None:
        asi.set_timeout(10_000)
        asi.add(quick)

    if anyio_backend_name == "trio":
        import trio

        steps: list[float] = []

        class Steps(trio.abc.Instrument):
            def before_task_step(self, task: trio.lowlevel.Task) -> None:
                if task.name == ALARM_TASK:
                    steps.append(trio.current_time())

        trio.lowlevel.add_instrument(Steps())
        start = trio.current_time()
        for _ in range(3):
            await AsyncSteps().add(timed).promise()
        await trio.sleep(30)  # long past the timeouts: the alarms were disarmed
        # The task's first step (it goes to sleep), then one wake at the three alarms' stale
        # deadline, and none since.
        woken = [t for t in steps if t != start]
        assert woken == [start + 10], steps
        assert trio.current_time() == start + 30
    else:
        import asyncio

        loop = asyncio.get_running_loop()
        for _ in range(3):
            await AsyncSteps().add(timed).promise()
        live = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert not [h for h in live if "Alarm" in repr(h)]
