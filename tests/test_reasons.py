"""Cancel reasons and Timeout info: every cancel of the library says why (issue 26, part B)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError
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


async def _timed_out(in_branch: bool) -> tuple[tuple[str | None, str | None], FutoInError]:
    seen: list[BaseException] = []

    async def fetch_orders(asi: AsyncSteps) -> None:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class() as exc:
            seen.append(exc)
            raise

    def timed(asi: AsyncSteps) -> None:
        asi.set_timeout(100)
        asi.add(fetch_orders)

    root = AsyncSteps()
    if in_branch:  # a branch's coroutine runs as a task of its own
        root.add(lambda asi: asi.parallel().add(timed).add(lambda asi: None))
    else:  # a lone flow's coroutine is awaited inline, under the shared scope's deadline
        root.add(timed)
    with pytest.raises(FutoInError) as info:
        await root.promise()
    assert len(seen) == 1
    return _reason(seen[0]), info.value


async def test_timeout_same_story_inline_and_in_a_branch() -> None:
    inline_reason, inline_error = await _timed_out(False)
    branch_reason, branch_error = await _timed_out(True)
    assert inline_reason == branch_reason
    source, reason = inline_reason
    assert source in ("deadline", "asyncio")
    if source == "asyncio":
        assert reason == "deadline exceeded"
    assert inline_error.code == branch_error.code == Errors.Timeout
    assert inline_error.info == branch_error.info == (
        "set_timeout(100 ms) of step _timed_out.<locals>.timed")


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
        try:
            started.set()
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class() as exc:
            seen.append(exc)
            raise

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
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class() as exc:
            seen.append(exc)
            raise

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
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class() as exc:
            seen.append(exc)
            raise

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
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class() as exc:
            seen.append(exc)
            raise

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


async def test_an_async_tool_root_cancel_reason() -> None:
    seen: list[BaseException] = []
    started = anyio.Event()

    async def waiting(asi: AsyncSteps) -> None:
        try:
            started.set()
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class() as exc:
            seen.append(exc)
            raise

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
