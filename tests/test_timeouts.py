"""set_timeout(): a deadline over a step and its sub-steps (exact under trio's MockClock)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from futoin_anyio import AsyncSteps, Errors, FutoInError
from futoin_anyio.testing import BACKENDS, backend

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """trio runs with an autojump MockClock: deadlines are exact and take no real time."""
    return backend(request.param, autojump_clock=True)


async def test_timeout_unwinds_from_innermost_step() -> None:
    log: list[str] = []

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.set_cancel(lambda asi: log.append("outer cancel"))
        asi.add(lambda asi: asi.set_cancel(lambda asi: log.append("inner cancel")),
                lambda asi, e: log.append(f"inner onerror {e}"))

    asi = AsyncSteps()
    asi.add(outer, lambda asi, e: log.append(f"outer onerror {e}"))
    start = anyio.current_time()
    with pytest.raises(FutoInError) as info:
        await asi.promise()
    elapsed = anyio.current_time() - start
    assert info.value.code == Errors.Timeout
    assert log == ["inner cancel", "inner onerror Timeout", "outer cancel", "outer onerror Timeout"]
    assert 0.05 <= elapsed < 1.0


async def test_success_before_timeout_cancels_the_timer() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.set_timeout(1000)
        asi.tool.deferred(10, lambda: asi.success("in time"))

    asi = AsyncSteps()
    asi.add(step)
    assert await asi.promise() == "in time"


async def test_set_timeout_again_replaces_the_limit() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.set_timeout(5)
        asi.set_timeout(100)
        asi.tool.deferred(20, lambda: asi.success("late but allowed"))

    asi = AsyncSteps()
    asi.add(step)
    assert await asi.promise() == "late but allowed"


async def test_external_success_after_timeout_is_out_of_service() -> None:
    kept: list[AsyncSteps] = []

    def step(asi: AsyncSteps) -> None:
        asi.set_timeout(10)
        kept.append(asi)

    asi = AsyncSteps()
    asi.add(step, lambda asi, e: asi.success(e))
    assert await asi.promise() == Errors.Timeout
    with pytest.raises(FutoInError, match="out of service"):
        kept[0].success()


async def test_timeout_handler_recovers_and_flow_goes_on() -> None:
    asi = AsyncSteps()
    asi.add(lambda asi: asi.set_timeout(10), lambda asi, e: asi.success("recovered"))
    asi.add(lambda asi, v: asi.success(v + "!"))
    assert await asi.promise() == "recovered!"


async def test_timeout_over_parallel_cancels_branches() -> None:
    log: list[str] = []

    def step(asi: AsyncSteps) -> None:
        asi.set_timeout(30)
        par = asi.parallel(lambda asi, e: log.append(f"par onerror {e}"))
        par.add(lambda b: b.set_cancel(lambda b: log.append("b0 cancel")))
        par.add(lambda b: b.set_cancel(lambda b: log.append("b1 cancel")))

    asi = AsyncSteps()
    asi.add(step, lambda asi, e: log.append(f"onerror {e}"))
    with pytest.raises(FutoInError, match="Timeout"):
        await asi.promise()
    assert log == ["b0 cancel", "b1 cancel", "par onerror Timeout", "onerror Timeout"]


async def test_timeout_on_coroutine_step_waits_for_its_cleanup() -> None:
    log: list[str] = []

    async def step(asi: AsyncSteps) -> None:
        asi.set_timeout(20)
        try:
            await anyio.sleep(10)
        finally:
            log.append("coroutine cleanup")

    asi = AsyncSteps()
    asi.add(step, lambda asi, e: log.append(f"onerror {e}"))
    with pytest.raises(FutoInError, match="Timeout"):
        await asi.promise()
    assert log == ["coroutine cleanup", "onerror Timeout"]


async def test_sub_steps_run_within_the_deadline() -> None:
    log: list[Any] = []

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(100)
        def wait_a_bit(asi: AsyncSteps) -> None:
            asi.wait_external()
            assert asi.tool is not None
            asi.tool.deferred(10, asi.success)

        asi.add(wait_a_bit)
        asi.add(lambda asi: log.append("second sub-step"))

    asi = AsyncSteps()
    asi.add(outer)
    asi.add(lambda asi: log.append("next"))
    await asi.promise()
    assert log == ["second sub-step", "next"]


async def test_zero_timeout_fires_at_once() -> None:
    asi = AsyncSteps()
    asi.add(lambda asi: asi.set_timeout(0), lambda asi, e: asi.success(e))
    assert await asi.promise() == Errors.Timeout


@pytest.mark.parametrize("then", ["waiting step", "async def step"])
async def test_recovering_from_an_outer_timeout_ends_that_deadline(then: str) -> None:
    """FTN12 and the JS reference: the timeout fires once, as an error at the innermost step; an
    inner handler that recovers ends it, and the outer step's later sub-steps may take longer
    (unlike ``fail_after``, whose scope stays cancelled until it exits)."""
    log: list[str] = []

    def inner(asi: AsyncSteps) -> None:
        asi.wait_external()

    def inner_onerror(asi: AsyncSteps, code: str) -> None:
        log.append(f"inner onerror {code}")
        asi.success()

    def wait_150ms(asi: AsyncSteps) -> None:
        asi.wait_external()
        asi.tool.deferred(150, lambda: asi.success("late"))

    async def sleep_150ms(asi: AsyncSteps) -> str:
        await anyio.sleep(0.15)
        return "late"

    def outer(asi: AsyncSteps) -> None:
        asi.set_timeout(50)
        asi.add(inner, inner_onerror)
        asi.add(wait_150ms if then == "waiting step" else sleep_150ms)

    asi = AsyncSteps()
    asi.add(outer, lambda asi, code: log.append(f"outer onerror {code}"))
    t0 = anyio.current_time()
    assert await asi.promise() == "late"
    assert log == ["inner onerror Timeout"]
    assert anyio.current_time() - t0 >= 0.2 - 1e-6  # the late step ran to its end
