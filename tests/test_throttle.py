"""Throttle: entries per period, queue limit, timers, cancellation, flows and plain AnyIO tasks.

Timing tests run under trio with ``MockClock(autojump_threshold=0)``: periods are exact and take
no real time. One tolerant real-time test runs on asyncio.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError
from futoin_anyio._throttle import Throttle, ThrottleStatistics
from futoin_anyio.testing import BACKENDS, backend

Step = Callable[..., Any]


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return backend(request.param, autojump_clock=True)


@pytest.fixture
def mock_trio() -> Any:
    return backend("trio", autojump_clock=True)


def synced(obj: Any, func: Step, onerror: Any = None) -> Step:
    def step(asi: AsyncSteps, *_: Any) -> None:
        asi.sync(obj, func, onerror)

    return step


def record_error(codes: list[str]) -> Callable[[AsyncSteps, str], None]:
    def onerror(asi: AsyncSteps, code: str) -> None:
        codes.append(code)
        asi.success()

    return onerror


def stamp(times: list[float], name: str = "", names: list[str] | None = None) -> Step:
    def enter(asi: AsyncSteps, *_: Any) -> None:
        times.append(anyio.current_time())
        if names is not None:
            names.append(name)

    return enter


def per_window(times: list[float], period: float) -> list[int]:
    """Entries per period window, windows anchored at the first entry."""
    t0 = times[0]
    counts = Counter(math.floor((t - t0) / period + 1e-9) for t in times)
    return [counts[k] for k in range(max(counts) + 1)]


async def until(cond: Callable[[], bool]) -> None:
    for _ in range(1000):
        if cond():
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError("condition never met")


def idle(throttle: Throttle) -> None:
    assert throttle.statistics().waiting == 0
    assert throttle._timer is None and throttle._timer_host is None


# -- construction and misuse -------------------------------------------------------------------


class TestConstruction:
    def test_defaults(self) -> None:
        assert Throttle(3).statistics() == ThrottleStatistics(
            entries=0, waiting=0, rejected=0, max=3, period_ms=1000.0, max_queue=None)

    @pytest.mark.parametrize(("args", "exc", "name"), [
        ((0,), ValueError, "max"),
        ((1.0,), TypeError, "max"),
        ((True,), TypeError, "max"),
        ((1, 0), ValueError, "period_ms"),
        ((1, -10), ValueError, "period_ms"),
        ((1, math.inf), ValueError, "period_ms"),
        ((1, math.nan), ValueError, "period_ms"),
        ((1, "100"), TypeError, "period_ms"),
        ((1, 100, -1), ValueError, "max_queue"),
        ((1, 100, 2.0), TypeError, "max_queue"),
    ])
    def test_bad_arguments(self, args: tuple[Any, ...], exc: type[Exception], name: str) -> None:
        with pytest.raises(exc, match=rf"\b{name} must"):
            Throttle(*args)

    def test_max_is_required(self) -> None:
        with pytest.raises(TypeError):
            Throttle()  # type: ignore[call-arg]

    def test_fractional_period(self) -> None:
        assert Throttle(1, 0.5).statistics().period_ms == 0.5

    def test_statistics_frozen_and_repr(self) -> None:
        throttle = Throttle(2, 50, 1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            throttle.statistics().entries = 3  # type: ignore[misc]
        assert "period_ms=50" in repr(throttle)

    def test_sync_with_non_callable_is_internal_error(self) -> None:
        with pytest.raises(FutoInError) as info:
            Throttle(1).sync(AsyncSteps(), 3)  # type: ignore[arg-type]
        assert info.value.code == Errors.InternalError


# -- timing, under trio's MockClock ------------------------------------------------------------


@pytest.mark.anyio
class TestTiming:
    @pytest.fixture
    def anyio_backend(self, mock_trio: Any) -> Any:
        return mock_trio

    @pytest.mark.parametrize(("limit", "period_ms", "flows"), [(1, 100, 5), (3, 100, 20),
                                                               (4, 250, 9)])
    async def test_entries_per_period_never_exceeded(
            self, limit: int, period_ms: int, flows: int) -> None:
        throttle = Throttle(limit, period_ms)
        times: list[float] = []
        asi = AsyncSteps()
        par = asi.parallel()
        for _ in range(flows):
            par.add(synced(throttle, stamp(times)))
        start = anyio.current_time()
        await asi.promise()
        period = period_ms / 1000
        windows = per_window(times, period)
        assert windows == [limit] * (flows // limit) + ([flows % limit] if flows % limit else [])
        # Back to back: the k-th window starts exactly k periods after the first entry.
        assert times == pytest.approx(
            [start + (i // limit) * period for i in range(flows)], abs=1e-9)
        idle(throttle)

    async def test_fifo_order(self) -> None:
        throttle = Throttle(2, 10)
        names: list[str] = []
        asi = AsyncSteps()
        par = asi.parallel()
        for i in range(7):
            par.add(synced(throttle, stamp([], f"b{i}", names)))
        await asi.promise()
        assert names == [f"b{i}" for i in range(7)]

    async def test_period_restarts_after_idle_time(self) -> None:
        throttle = Throttle(2, 100)
        times: list[float] = []
        start = anyio.current_time()
        for delay in (0.0, 0.03, 0.03, 0.5, 0.01, 0.01):
            await anyio.sleep(delay)
            asi = AsyncSteps()
            asi.sync(throttle, stamp(times))
            await asi.promise()
            assert throttle.statistics().entries in (1, 2)
        rel = [round(t - start, 6) for t in times]
        # 0 and 0.03 in the first period, the third waits for 0.1; after an idle time 0.6 opens
        # a new period with 0.61, the sixth waits for 0.7.
        assert rel == [0.0, 0.03, 0.1, 0.6, 0.61, 0.7]

    async def test_entries_statistic_expires_with_the_period(self) -> None:
        throttle = Throttle(5, 100)
        asi = AsyncSteps()
        asi.sync(throttle, lambda asi: None)
        asi.sync(throttle, lambda asi: None)
        await asi.promise()
        assert throttle.statistics().entries == 2
        await anyio.sleep(0.1)
        assert throttle.statistics().entries == 0

    async def test_no_timer_while_nothing_waits(self) -> None:
        throttle = Throttle(1, 100)
        timers: list[int] = []
        async with AsyncTool() as tool:
            def probe(asi: AsyncSteps) -> None:
                timers.append(tool.statistics().scheduled)

            for _ in range(3):
                AsyncSteps().sync(throttle, probe).execute()
            await until(lambda: throttle.statistics().waiting == 2)
            assert throttle._timer is not None
            assert tool.statistics().scheduled == 1
        # While someone waited: one timer; the last one in left no timer behind.
        assert timers == [0, 1, 0]
        idle(throttle)

    async def test_arguments_pass_through_after_waiting(self) -> None:
        throttle = Throttle(1, 100)
        results: list[Any] = []
        asi = AsyncSteps()
        par = asi.parallel()
        for i in range(3):
            def branch(asi: AsyncSteps, i: int = i) -> None:
                asi.add(lambda asi: asi.success(i, "x"))
                asi.sync(throttle, lambda asi, n, s: asi.success(n * 2, s))
                asi.add(lambda asi, *args: results.append(args))

            par.add(branch)
        await asi.promise()
        assert results == [(0, "x"), (2, "x"), (4, "x")]

    async def test_timeout_while_queued_leaves_queue(self) -> None:
        throttle = Throttle(1, 1000)
        times: list[float] = []
        codes: list[str] = []

        def timed(asi: AsyncSteps) -> None:
            asi.set_timeout(500)
            asi.sync(throttle, stamp(times))

        asi = AsyncSteps()
        par = asi.parallel()
        par.add(synced(throttle, stamp(times)))
        par.add(timed, record_error(codes))
        par.add(synced(throttle, stamp(times)))
        start = anyio.current_time()
        await asi.promise()
        assert codes == [Errors.Timeout]
        assert [round(t - start, 6) for t in times] == [0.0, 1.0]
        idle(throttle)

    async def test_timer_moves_when_its_host_is_cancelled(self) -> None:
        """The period timer runs in a waiting flow's driver; if that flow goes, it moves."""
        from futoin_anyio._hooks import root_id

        throttle = Throttle(1, 100)
        times: list[float] = []
        scopes: dict[int, anyio.CancelScope] = {}

        async def run() -> None:
            asi = AsyncSteps()
            asi.sync(throttle, stamp(times))
            with anyio.CancelScope() as scopes[id(asi)]:
                await asi.promise()  # each promise() has a driver of its own

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(run)
            await until(lambda: throttle.statistics().waiting == 2)
            host = throttle._timer_host
            assert host is not None and host.asi is not None
            scopes[root_id(host.asi)].cancel()  # the waiter whose driver runs the timer
            await until(lambda: throttle.statistics().waiting == 1)
            assert throttle._timer_host is not host and throttle._timer is not None
        assert [round(t - start, 6) for t in times] == [0.0, 0.1]
        idle(throttle)

    async def test_root_cancel_while_queued(self) -> None:
        throttle = Throttle(1, 100)
        times: list[float] = []
        async with AsyncTool():
            first = AsyncSteps().sync(throttle, stamp(times))
            second = AsyncSteps().sync(throttle, stamp(times))
            first.execute()
            second.execute()
            await until(lambda: throttle.statistics().waiting == 1)
            second.cancel()
            assert throttle.statistics().waiting == 0
            assert throttle._timer is None  # nothing waits: no timer
        assert len(times) == 1
        idle(throttle)

    async def test_queue_limit(self) -> None:
        throttle = Throttle(2, 100, max_queue=3)
        times: list[float] = []
        codes: list[str] = []
        asi = AsyncSteps()
        par = asi.parallel()
        for _ in range(8):
            par.add(synced(throttle, stamp(times)), record_error(codes))
        await asi.promise()
        assert len(times) == 5
        assert per_window(times, 0.1) == [2, 2, 1]
        assert codes == [Errors.DefenseRejected] * 3
        assert throttle.statistics().rejected == 3
        idle(throttle)

    async def test_zero_queue_rejects_beyond_max(self) -> None:
        throttle = Throttle(1, 100, max_queue=0)
        codes: list[str] = []
        asi = AsyncSteps()
        asi.parallel().add(synced(throttle, lambda asi: None), record_error(codes)) \
            .add(synced(throttle, lambda asi: None), record_error(codes))
        await asi.promise()
        assert codes == [Errors.DefenseRejected]
        await anyio.sleep(0.1)
        asi = AsyncSteps()
        asi.sync(throttle, lambda asi: asi.success("next period"))
        assert await asi.promise() == "next period"

    async def test_error_in_section_goes_to_its_handler(self) -> None:
        throttle = Throttle(1, 100)
        codes: list[str] = []

        def onerror(asi: AsyncSteps, code: str) -> None:
            codes.append(code)
            asi.success("handled")

        asi = AsyncSteps()
        asi.sync(throttle, lambda asi: asi.error("Oops"), onerror)
        asi.sync(throttle, lambda asi, r: asi.success(r, anyio.current_time()))
        start = anyio.current_time()
        result, when = await asi.promise()
        assert (result, codes) == ("handled", ["Oops"])
        assert when - start == pytest.approx(0.1)  # the failed entry still counted

    async def test_tasks_and_flows_share_periods(self) -> None:
        throttle = Throttle(2, 100)
        times: list[float] = []
        names: list[str] = []

        async def task(name: str) -> None:
            async with throttle:
                times.append(anyio.current_time())
                names.append(name)

        def arrived() -> int:
            return len(names) + throttle.statistics().waiting

        async with AsyncTool(), anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(task, f"t{i}")
                await until(lambda i=i: arrived() == 2 * i + 1)  # type: ignore[misc]
                AsyncSteps().sync(throttle, stamp(times, f"f{i}", names)).execute()
                await until(lambda i=i: arrived() == 2 * i + 2)  # type: ignore[misc]
        assert per_window(times, 0.1) == [2, 2, 2, 2, 2]
        # Both of a period are let in together: either may run first.
        assert [sorted(names[i:i + 2]) for i in range(0, 10, 2)] == [
            [f"f{i}", f"t{i}"] for i in range(5)]
        idle(throttle)

    async def test_tasks_only_tick_periods_themselves(self) -> None:
        throttle = Throttle(1, 100)
        times: list[float] = []

        async def task() -> None:
            async with throttle:
                times.append(anyio.current_time())

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(task)
        assert [round(t - start, 6) for t in times] == [0.0, 0.1, 0.2, 0.3]
        idle(throttle)

    async def test_task_cancelled_after_grant_gives_entry_back(self) -> None:
        throttle = Throttle(1, 100)
        entered: list[str] = []
        scopes: dict[str, anyio.CancelScope] = {}

        async def task(name: str) -> None:
            with anyio.CancelScope() as scopes[name]:
                async with throttle:
                    entered.append(f"{name}@{round(anyio.current_time() - start, 6)}")

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(task, "a")
            await until(lambda: entered == ["a@0.0"])
            tg.start_soon(task, "b")
            await until(lambda: throttle.statistics().waiting == 1)
            tg.start_soon(task, "c")
            await until(lambda: throttle.statistics().waiting == 2)
            # Just before the waiters' own wake-up at 0.1: "b" is cancelled, and before it can
            # resume, the next period starts (as the timer of a waiting flow would start it)
            # and lets "b" in.
            await anyio.sleep(0.1 - 0.5e-6)
            scopes["b"].cancel()
            throttle._refresh(anyio.current_time())
            assert throttle.statistics() == ThrottleStatistics(1, 1, 0, 1, 100.0, None)
        # "b" gave its entry back: "c" took it in the same period.
        assert entered == ["a@0.0", "c@0.1"]
        assert scopes["b"].cancelled_caught
        idle(throttle)

    async def test_task_cancel_while_waiting_and_queue_full(self) -> None:
        throttle = Throttle(1, 100, max_queue=1)
        outcomes: list[str] = []
        scopes: dict[str, anyio.CancelScope] = {}

        async def task(name: str) -> None:
            with anyio.CancelScope() as scopes[name]:
                try:
                    async with throttle:
                        outcomes.append(f"{name}@{round(anyio.current_time() - start, 6)}")
                except FutoInError as exc:
                    outcomes.append(f"{name}:{exc.code}")

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(task, "a")
            await until(lambda: len(outcomes) == 1)
            tg.start_soon(task, "b")
            await until(lambda: throttle.statistics().waiting == 1)
            tg.start_soon(task, "c")
            await until(lambda: len(outcomes) == 2)
            scopes["b"].cancel()
            await until(lambda: throttle.statistics().waiting == 0)
            tg.start_soon(task, "d")
        assert outcomes == ["a@0.0", "c:DefenseRejected", "d@0.1"]
        assert scopes["b"].cancelled_caught
        idle(throttle)


# -- real time, on asyncio ---------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_real_time_rate(anyio_backend: str) -> None:
    throttle = Throttle(5, 50)
    times: list[float] = []
    asi = AsyncSteps()
    par = asi.parallel()
    for _ in range(15):
        par.add(synced(throttle, stamp(times)))
    start = anyio.current_time()
    await asi.promise()
    elapsed = anyio.current_time() - start
    assert len(times) == 15
    assert 0.095 <= elapsed < 1.0
    for k in range(3):  # each group of five entered at least one period after the previous
        assert times[5 * k + 4] - times[5 * k] < 0.05
        if k:
            # (a period starts a little before its first stamp, on a busy machine)
            assert times[5 * k] - times[5 * (k - 1)] >= 0.04
    idle(throttle)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [backend("trio", autojump_clock=True)])
async def test_timer_dropped_when_a_task_starts_the_period(anyio_backend: Any) -> None:
    """A task that starts the next period lets the timer's host in: the timer goes too."""
    throttle = Throttle(2, 100)
    async with AsyncTool() as tool:
        AsyncSteps().sync(throttle, lambda asi: None).execute()
        AsyncSteps().sync(throttle, lambda asi: None).execute()
        AsyncSteps().sync(throttle, lambda asi: None).execute()
        await until(lambda: throttle.statistics().waiting == 1)
        assert tool.statistics().scheduled == 1
        await anyio.sleep(0.1 - 0.5e-6)  # before the timer, within the boundary's tolerance
        async with throttle:  # starts the next period: the flow and this task get in
            assert throttle.statistics().waiting == 0
            assert throttle._timer is None
            assert tool.statistics().scheduled == 0
    idle(throttle)
