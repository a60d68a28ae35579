"""What an inline coroutine step ends with when the engine cancels its scope (a timeout, its
root's cancel) while the step shields itself, turns the cancellation into its own error, or
returns without a checkpoint. The run asks its scope whether it was cancelled only once the
engine has cancelled some scope since the scope was entered (``SWITCHES.cancels``, the number
``_reasons.cancel_scope`` gives each cancel, the one way the engine cancels): each case here
changes it, and ends as the semantics say.

Every test runs on asyncio and trio, in virtual time.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
from backend_support import virtual_time

from futoin_anyio import AsyncSteps, Errors, FutoInError
from futoin_anyio._frame import SWITCHES

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return virtual_time(request.param)


async def test_a_timeout_that_the_step_outlives_in_a_shield_still_times_it_out() -> None:
    """The timeout's alarm cancels the inline scope while the step sleeps shielded; the step then
    returns without a checkpoint: its result is dropped and the error handler sees Timeout."""
    seen: list[Any] = []

    async def slow(asi: AsyncSteps) -> str:
        asi.set_timeout(10)
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.05)
        return "late"

    def on_error(asi: AsyncSteps, code: str) -> None:
        seen.append(code)
        asi.success("handled")

    root = AsyncSteps()
    root.add(slow, on_error)
    root.add(lambda asi, v=None: seen.append(v))
    before = SWITCHES.cancels
    await root.promise()
    assert SWITCHES.cancels > before  # the alarm's cancel went through the counted path
    assert seen == [Errors.Timeout, "handled"]


async def test_an_error_raised_by_a_timed_out_step_wins_over_the_timeout() -> None:
    """The timeout cancels the inline scope; the step turns the cancellation into its own error.
    As in a task group the error wins: the handler sees it (InternalError), not Timeout."""
    seen: list[Any] = []

    async def step(asi: AsyncSteps) -> None:
        asi.set_timeout(10)
        try:
            await anyio.sleep(1)
        except anyio.get_cancelled_exc_class():
            raise ValueError("boom") from None

    def on_error(asi: AsyncSteps, code: str) -> None:
        seen.append((code, asi.state.error_info))
        asi.success()

    root = AsyncSteps()
    root.add(step, on_error)
    before = SWITCHES.cancels
    await root.promise()
    assert SWITCHES.cancels > before
    assert seen == [(Errors.InternalError, "ValueError: boom")]


async def test_a_root_cancelled_by_its_own_coroutine_step_ends_cancelled() -> None:
    """An inline coroutine step cancels its root and returns without a checkpoint: the cancel
    reached its scope (its number changed), so the step is interrupted, its result dropped, and
    the step after it never runs; the cancel handler of the step runs."""
    seen: list[Any] = []

    async def step(asi: AsyncSteps) -> str:
        asi.set_cancel(lambda asi: seen.append("cancel handler"))
        await anyio.lowlevel.checkpoint()
        asi.state.root.cancel("stop")
        return "value"

    root = AsyncSteps()
    root.state.root = root
    root.add(step)
    root.add(lambda asi, v=None: seen.append(("after", v)))
    before = SWITCHES.cancels
    with pytest.raises(FutoInError) as info:
        await root.promise()
    assert SWITCHES.cancels > before
    assert info.value.code == Errors.Cancelled
    assert seen == ["cancel handler"]
