"""AsyncTool (§2.6): immediate, deferred, cancel, is_valid, is_same_thread, threads, execute."""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError
from futoin_anyio.testing import BACKENDS, backend

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """trio runs with an autojump MockClock: deadlines are exact and take no real time."""
    return backend(request.param, autojump_clock=True)


async def test_immediate_and_deferred_order_and_cancel() -> None:
    log: list[str] = []
    async with AsyncTool() as tool:
        late = tool.deferred(20, lambda: log.append("deferred 20"))
        tool.deferred(10, lambda: log.append("deferred 10"))
        dropped = tool.deferred(5, lambda: log.append("never"))
        tool.immediate(lambda: log.append("immediate"))
        assert tool.is_valid(dropped)
        tool.cancel(dropped)
        assert not tool.is_valid(dropped)
        assert tool.is_valid(late)
        assert tool.is_same_thread()
    assert log == ["immediate", "deferred 10", "deferred 20"]
    assert not late.is_valid()
    assert tool.statistics().scheduled == 0


async def test_deferred_uses_the_event_loop_clock() -> None:
    async with AsyncTool() as tool:
        start = anyio.current_time()
        fired: list[float] = []
        tool.deferred(250, lambda: fired.append(anyio.current_time() - start))
    assert len(fired) == 1
    assert 0.25 <= fired[0] < 1.0


async def test_execute_runs_roots_and_reports_unhandled_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Any] = []
    async with AsyncTool() as tool:
        ok = AsyncSteps()
        ok.add(lambda asi: seen.append("ok"))
        ok.execute()
        bad = AsyncSteps()
        bad.add(lambda asi: asi.error("Bad", "why"))
        bad.execute(seen.append)
        logged = AsyncSteps()
        logged.add(lambda asi: asi.error("Logged", "details"))
        logged.execute()
        assert tool.statistics().roots == 3
    assert seen == ["ok", "Bad"]
    assert "Logged" in caplog.text
    assert tool.statistics().roots == 0


async def test_tool_callback_error_is_logged_and_tool_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, "futoin_anyio")
    log: list[str] = []
    async with AsyncTool() as tool:
        tool.immediate(lambda: 1 / 0)
        tool.immediate(lambda: log.append("still running"))
    assert log == ["still running"]
    assert "ZeroDivisionError" in caplog.text


async def test_execute_after_tool_exited_and_bad_arguments() -> None:
    async with AsyncTool() as tool:
        pass
    asi = AsyncSteps(tool=tool)
    with pytest.raises(FutoInError, match="already exited"):
        asi.execute()
    with pytest.raises(TypeError, match="needs a callable"):
        tool.immediate(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tool must be an AsyncTool"):
        AsyncSteps(tool=object())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="only once"):
        async with tool:
            pass


async def test_tool_waits_for_its_roots() -> None:
    log: list[str] = []
    async with AsyncTool() as tool:
        asi = AsyncSteps()

        def step(inner: AsyncSteps) -> None:
            inner.wait_external()
            def external() -> None:
                log.append("external")
                inner.success()

            tool.deferred(50, external)

        asi.add(step)
        asi.add(lambda inner: log.append("done"))
        asi.execute()
    assert log == ["external", "done"]


async def test_cancelled_root_does_not_call_unhandled_error() -> None:
    seen: list[str] = []
    async with AsyncTool():
        asi = AsyncSteps()
        asi.add(lambda inner: inner.set_cancel(lambda _: seen.append("cancel handler")))
        asi.execute(seen.append)
        await anyio.sleep(0.01)
        asi.cancel()
        asi.cancel()  # idempotent
    assert seen == ["cancel handler"]
    assert not asi


async def test_promise_root_cancelled_before_start() -> None:
    asi = AsyncSteps()
    asi.add(lambda inner: None)
    asi.cancel()
    with pytest.raises(FutoInError, match="cancelled before it started"):
        await asi.promise()
    assert Errors.Cancelled == "Cancelled"


async def test_body_exceptions_leave_the_tool_block_unwrapped() -> None:
    with pytest.raises(ValueError, match="from the body") as info:
        async with AsyncTool():
            raise ValueError("from the body")
    assert not isinstance(info.value, BaseExceptionGroup)

    group = ExceptionGroup("the user's own", [KeyError(1), KeyError(2)])
    with pytest.raises(ExceptionGroup) as caught:
        async with AsyncTool():
            raise group
    # The user's own group comes out whole (trio may hand back a derived copy of it).
    assert caught.value.message == "the user's own"
    assert caught.value.exceptions == group.exceptions
