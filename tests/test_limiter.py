"""Limiter: concurrency and rate limits together, for flows and plain AnyIO tasks.

Timing tests run under trio with ``MockClock(autojump_threshold=0)``; one tolerant real-time
test runs on asyncio.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import traceback
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from futoin_anyio import COMPILED, AsyncSteps, AsyncTool, Errors, FutoInError
from futoin_anyio._limiter import Limiter, LimiterStatistics
from futoin_anyio._mutex import Mutex
from futoin_anyio._throttle import Throttle
from futoin_anyio.testing import BACKENDS, backend

Step = Callable[..., Any]


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return backend(request.param, autojump_clock=True)


class Tracker:
    def __init__(self) -> None:
        self.inside = 0
        self.max_inside = 0
        self.times: list[float] = []

    def section(self, hold: float = 0.0) -> Step:
        def crit(asi: AsyncSteps, *_: Any) -> None:
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
            self.times.append(anyio.current_time())

            async def stay(asi: AsyncSteps, *_: Any) -> None:
                await anyio.sleep(hold)

            def out(asi: AsyncSteps, *_: Any) -> None:
                self.inside -= 1

            asi.add(stay)
            asi.add(out)

        return crit


def synced(obj: Any, func: Step, onerror: Any = None) -> Step:
    def step(asi: AsyncSteps, *_: Any) -> None:
        asi.sync(obj, func, onerror)

    return step


def record_error(codes: list[str]) -> Callable[[AsyncSteps, str], None]:
    def onerror(asi: AsyncSteps, code: str) -> None:
        codes.append(code)
        asi.success()

    return onerror


def per_window(times: list[float], period: float) -> list[int]:
    t0 = times[0]
    counts = Counter(math.floor((t - t0) / period + 1e-9) for t in times)
    return [counts[k] for k in range(max(counts) + 1)]


async def until(cond: Callable[[], bool]) -> None:
    for _ in range(1000):
        if cond():
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError("condition never met")


def idle(limiter: Limiter) -> None:
    stats = limiter.statistics()
    assert (stats.held, stats.waiting, stats.rate_waiting) == (0, 0, 0)
    assert limiter._throttle._timer is None


def run_parallel(limiter: Limiter, count: int, func: Step,
                 onerror: Any = None) -> AsyncSteps:
    asi = AsyncSteps()
    par = asi.parallel()
    for _ in range(count):
        par.add(synced(limiter, func), onerror)
    return asi


# -- construction --------------------------------------------------------------------------------


class TestConstruction:
    def test_defaults(self) -> None:
        limiter = Limiter()
        assert limiter.statistics() == LimiterStatistics(0, 0, 0, 0, 0)
        assert limiter._mutex.statistics().max == 1
        assert limiter._mutex.statistics().max_queue == 0
        stats = limiter._throttle.statistics()
        assert (stats.max, stats.period_ms, stats.max_queue) == (1, 1000.0, 0)

    @pytest.mark.parametrize(("kwargs", "exc", "name"), [
        ({"concurrent": 0}, ValueError, "concurrent"),
        ({"concurrent": 1.5}, TypeError, "concurrent"),
        ({"max_queue": -1}, ValueError, "max_queue"),
        ({"max_queue": "3"}, TypeError, "max_queue"),
        ({"rate": 0}, ValueError, "rate"),
        ({"rate": True}, TypeError, "rate"),
        ({"period_ms": 0}, ValueError, "period_ms"),
        ({"period_ms": -1.5}, ValueError, "period_ms"),
        ({"period_ms": None}, TypeError, "period_ms"),
        ({"burst": -2}, ValueError, "burst"),
        ({"burst": 1.0}, TypeError, "burst"),
    ])
    def test_bad_arguments(self, kwargs: dict[str, Any], exc: type[Exception], name: str) -> None:
        with pytest.raises(exc, match=rf"Limiter: {name} must"):
            Limiter(**kwargs)

    def test_unlimited_queues(self) -> None:
        limiter = Limiter(concurrent=2, max_queue=None, burst=None)
        assert limiter._mutex.statistics().max_queue is None
        assert limiter._throttle.statistics().max_queue is None

    def test_statistics_frozen_repr_and_misuse(self) -> None:
        limiter = Limiter(3, 4, 5, 60, 7)
        with pytest.raises(dataclasses.FrozenInstanceError):
            limiter.statistics().held = 1  # type: ignore[misc]
        assert "Mutex max=3" in repr(limiter) and "Throttle max=5" in repr(limiter)
        with pytest.raises(FutoInError) as info:
            limiter.sync(AsyncSteps(), object())  # type: ignore[arg-type]
        assert info.value.code == Errors.InternalError


# -- flows ---------------------------------------------------------------------------------------


@pytest.mark.anyio
class TestFlows:
    async def test_defaults_reject_concurrent_and_second_entry(self) -> None:
        limiter = Limiter()
        codes: list[str] = []
        tracker = Tracker()
        # Two at once: the second finds the only place taken and no queue.
        await run_parallel(limiter, 2, tracker.section(0.01), record_error(codes)).promise()
        assert codes == [Errors.DefenseRejected]
        # One after the other, in the same second: the rate (1/s, no burst) rejects it.
        asi = AsyncSteps()
        asi.sync(limiter, lambda asi: None)
        with pytest.raises(FutoInError) as info:
            await asi.promise()
        assert info.value.code == Errors.DefenseRejected
        assert limiter.statistics().rejected == 2
        idle(limiter)

    async def test_arguments_pass_through(self) -> None:
        limiter = Limiter(rate=10)
        asi = AsyncSteps()
        asi.add(lambda asi: asi.success(3, 4))
        asi.sync(limiter, lambda asi, a, b: asi.add(lambda asi, *_: asi.success(a * b, "x")))
        asi.add(lambda asi, *args: asi.success(args))
        assert await asi.promise() == (12, "x")
        idle(limiter)

    async def test_concurrency_limit(self) -> None:
        limiter = Limiter(concurrent=3, max_queue=None, rate=1000, burst=None)
        tracker = Tracker()
        await run_parallel(limiter, 12, tracker.section()).promise()
        assert tracker.max_inside == 3
        assert len(tracker.times) == 12
        idle(limiter)

    async def test_error_inside_releases_place(self) -> None:
        limiter = Limiter(concurrent=1, max_queue=5, rate=100)
        codes: list[str] = []
        tracker = Tracker()
        asi = AsyncSteps()
        par = asi.parallel()
        par.add(synced(limiter, lambda asi: asi.error("Boom")), record_error(codes))
        par.add(synced(limiter, tracker.section()))
        await asi.promise()
        assert codes == ["Boom"]
        assert len(tracker.times) == 1
        idle(limiter)


@pytest.mark.anyio
class TestTiming:
    @pytest.fixture
    def anyio_backend(self) -> Any:
        return backend("trio", autojump_clock=True)

    async def test_rate_limit(self) -> None:
        limiter = Limiter(concurrent=10, max_queue=None, rate=2, period_ms=100, burst=None)
        tracker = Tracker()
        await run_parallel(limiter, 9, tracker.section()).promise()
        assert per_window(tracker.times, 0.1) == [2, 2, 2, 2, 1]
        idle(limiter)

    async def test_both_limits(self) -> None:
        """3 places, 4 entries per 100 ms, each flow inside 250 ms."""
        limiter = Limiter(concurrent=3, max_queue=None, rate=4, period_ms=100, burst=None)
        tracker = Tracker()
        start = anyio.current_time()
        await run_parallel(limiter, 7, tracker.section(0.25)).promise()
        assert tracker.max_inside == 3
        rel = [round(t - start, 6) for t in tracker.times]
        assert rel == [0.0, 0.0, 0.0, 0.25, 0.25, 0.25, 0.5]
        idle(limiter)

    async def test_waiting_for_rate_holds_the_place(self) -> None:
        limiter = Limiter(concurrent=2, max_queue=5, rate=1, period_ms=100, burst=5)
        tracker = Tracker()
        stats: list[LimiterStatistics] = []
        # The first holder stays a little: the probe sees the queue before it leaves, whichever
        # of the probe and the caller's task (the first branch runs in it) trio runs first.
        asi = run_parallel(limiter, 3, tracker.section(0.01))

        async def probe() -> None:
            await until(lambda: limiter.statistics().rate_waiting == 1)
            stats.append(limiter.statistics())

        async with anyio.create_task_group() as tg:
            tg.start_soon(probe)
            await asi.promise()
        assert stats == [LimiterStatistics(held=2, waiting=1, rate_waiting=1, entries=1,
                                           rejected=0)]
        assert per_window(tracker.times, 0.1) == [1, 1, 1]
        idle(limiter)

    async def test_place_queue_rejections(self) -> None:
        # One place, two may wait for it, the rate is no constraint.
        limiter = Limiter(concurrent=1, max_queue=2, rate=10, period_ms=100, burst=0)
        tracker = Tracker()
        codes: list[str] = []
        start = anyio.current_time()
        await run_parallel(limiter, 5, tracker.section(0.05), record_error(codes)).promise()
        assert codes == [Errors.DefenseRejected] * 2
        assert [round(t - start, 6) for t in tracker.times] == [0.0, 0.05, 0.1]
        assert limiter.statistics().rejected == 2
        idle(limiter)

    async def test_burst_rejections(self) -> None:
        # Places for all, but one entry per period and nobody may wait for the rate: each
        # rejected flow gives its place back at once.
        limiter = Limiter(concurrent=3, max_queue=2, rate=1, period_ms=100, burst=0)
        tracker = Tracker()
        codes: list[str] = []
        await run_parallel(limiter, 6, tracker.section(0.05), record_error(codes)).promise()
        assert len(tracker.times) == 1
        assert codes == [Errors.DefenseRejected] * 5
        assert limiter.statistics().rejected == 5
        idle(limiter)

    async def test_cancel_while_waiting_for_rate_releases_place(self) -> None:
        limiter = Limiter(concurrent=2, max_queue=5, rate=1, period_ms=100, burst=5)
        tracker = Tracker()
        async with AsyncTool():
            first = AsyncSteps().add(synced(limiter, tracker.section(0.3)))
            second = AsyncSteps().add(synced(limiter, tracker.section()))
            third = AsyncSteps().add(synced(limiter, tracker.section()))
            for root in (first, second, third):
                root.execute()
            await until(lambda: limiter.statistics().waiting == 1)
            assert limiter.statistics().rate_waiting == 1
            second.cancel()  # holds a place, waits for the rate
            # Its place goes to the third, which then waits for the rate in its stead.
            assert limiter.statistics() == LimiterStatistics(2, 0, 0, 1, 0)
            await until(lambda: limiter.statistics().rate_waiting == 1)
            assert limiter.statistics() == LimiterStatistics(2, 0, 1, 1, 0)
        start = tracker.times[0]
        assert [round(t - start, 6) for t in tracker.times] == [0.0, 0.1]
        idle(limiter)

    async def test_timeout_while_inside_releases_place(self) -> None:
        limiter = Limiter(concurrent=1, max_queue=5, rate=10, period_ms=100, burst=0)
        tracker = Tracker()
        codes: list[str] = []

        def timed(asi: AsyncSteps) -> None:
            asi.set_timeout(50)
            asi.sync(limiter, tracker.section(10))

        asi = AsyncSteps()
        asi.parallel().add(timed, record_error(codes)).add(synced(limiter, tracker.section()))
        start = anyio.current_time()
        await asi.promise()
        assert codes == [Errors.Timeout]
        assert [round(t - start, 6) for t in tracker.times] == [0.0, 0.05]
        idle(limiter)

    async def test_tasks_and_flows_together(self) -> None:
        limiter = Limiter(concurrent=2, max_queue=None, rate=3, period_ms=100, burst=None)
        tracker = Tracker()

        async def task() -> None:
            async with limiter:
                tracker.inside += 1
                tracker.max_inside = max(tracker.max_inside, tracker.inside)
                tracker.times.append(anyio.current_time())
                await anyio.sleep(0.03)
                tracker.inside -= 1

        async with AsyncTool(), anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(task)
                AsyncSteps().add(synced(limiter, tracker.section(0.03))).execute()
        assert tracker.max_inside == 2
        assert len(tracker.times) == 12
        assert max(per_window(tracker.times, 0.1)) <= 3
        idle(limiter)

    async def test_task_cancelled_while_waiting_for_rate(self) -> None:
        limiter = Limiter(concurrent=2, max_queue=0, rate=1, period_ms=100, burst=1)
        entered: list[str] = []
        scopes: dict[str, anyio.CancelScope] = {}

        async def task(name: str) -> None:
            with anyio.CancelScope() as scopes[name]:
                async with limiter:
                    entered.append(name)
                    await anyio.sleep(1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(task, "a")
            await until(lambda: entered == ["a"])
            tg.start_soon(task, "b")
            await until(lambda: limiter.statistics().rate_waiting == 1)
            assert limiter.statistics().held == 2
            scopes["b"].cancel()
            await until(lambda: limiter.statistics().held == 1)
            assert limiter.statistics().rate_waiting == 0
            scopes["a"].cancel()
        assert entered == ["a"]
        idle(limiter)

    async def test_task_rejected_by_queue_and_by_burst(self) -> None:
        limiter = Limiter(concurrent=1, max_queue=0, rate=1, period_ms=100, burst=0)
        codes: list[str] = []

        async def task() -> None:
            try:
                async with limiter:
                    await anyio.sleep(0.01)
            except FutoInError as exc:
                codes.append(exc.code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(task)
            await until(lambda: limiter.statistics().held == 1)
            tg.start_soon(task)  # no place, no queue
        await task()  # a place, but the rate is used up in this period
        assert codes == [Errors.DefenseRejected] * 2
        assert limiter.statistics().rejected == 2
        idle(limiter)

    async def test_rejections_name_the_limit(self) -> None:
        """Each refusal's ``error_info`` names the limit that refused it, for flows and tasks:
        the Limiter's own two limits, and a plain Mutex's or Throttle's ``max_queue``."""
        infos: list[str] = []

        def onerror(asi: AsyncSteps, code: str) -> None:
            assert code == Errors.DefenseRejected
            infos.append(asi.state.error_info)
            asi.success()

        async def task(obj: Any) -> None:
            try:
                async with obj:
                    await anyio.sleep(0.01)
            except FutoInError as exc:
                infos.append(exc.info)

        limiter = Limiter(concurrent=1, max_queue=0, rate=1, period_ms=100, burst=0)
        await run_parallel(limiter, 2, Tracker().section(0.01), onerror).promise()
        await run_parallel(limiter, 1, Tracker().section(0.01), onerror).promise()  # rate
        await anyio.sleep(0.1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(task, limiter)
            await until(lambda: limiter.statistics().held == 1)
            tg.start_soon(task, limiter)
        mutex, throttle = Mutex(1, max_queue=0), Throttle(1, 100, max_queue=0)
        for obj in (mutex, throttle):
            await run_parallel(obj, 2, Tracker().section(0.01), onerror).promise()  # type: ignore[arg-type]
            await anyio.sleep(0.1)
            async with anyio.create_task_group() as tg:
                tg.start_soon(task, obj)
                await anyio.lowlevel.checkpoint()
                tg.start_soon(task, obj)
        assert infos == [
            "Limiter queue limit (max_queue) reached",
            "Limiter rate queue limit (burst) reached",
            "Limiter queue limit (max_queue) reached",
        ] + ["Mutex queue limit (max_queue) reached"] * 2 + [
            "Throttle queue limit (max_queue) reached"] * 2
        assert limiter.statistics().rejected == 3
        assert mutex.statistics().rejected == throttle.statistics().rejected == 2
        idle(limiter)

    async def test_exit_without_holding(self) -> None:
        with pytest.raises(RuntimeError, match="not held"):
            await Limiter().__aexit__(None, None, None)


# -- real time, on asyncio ---------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_real_time_limits(anyio_backend: str) -> None:
    limiter = Limiter(concurrent=2, max_queue=None, rate=4, period_ms=50, burst=None)
    tracker = Tracker()
    start = anyio.current_time()
    await run_parallel(limiter, 12, tracker.section(0.005)).promise()
    elapsed = anyio.current_time() - start
    assert tracker.max_inside <= 2
    assert len(tracker.times) == 12
    assert 0.095 <= elapsed < 1.5  # 12 entries at 4 per 50 ms: three periods at least
    for k in range(1, 3):
        # (a period starts a little before its first stamp, on a busy machine)
        assert tracker.times[4 * k] - tracker.times[4 * (k - 1)] >= 0.04
    idle(limiter)


@pytest.mark.parametrize("factory", [Limiter, lambda: Throttle(1)])
def test_binary_delegates_to_bridge(factory: Callable[[], Any],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bridge = pytest.importorskip("futoin_anyio.binary._bridge")
    seen: list[object] = []

    def fake(obj: object) -> str:
        seen.append(obj)
        return "ptr"

    monkeypatch.setattr(bridge, "sync_binary_of", fake, raising=False)
    obj = factory()
    assert obj.binary() == "ptr"
    assert seen == [obj]


def test_throttle_statistics_outside_event_loop() -> None:
    async def use(throttle: Throttle) -> None:
        asi = AsyncSteps()
        asi.sync(throttle, lambda asi: None)
        await asi.promise()

    throttle = Throttle(2, 10_000)
    anyio.run(use, throttle)
    assert throttle.statistics().entries == 1  # the last known count, no loop to ask the time


@pytest.mark.anyio
@pytest.mark.parametrize("refused_by", ["place", "rate"])
async def test_a_refused_root_frees_its_flow_and_driver_at_once(refused_by: str) -> None:
    # A failed root's error keeps this frame (its traceback) and this frame keeps the root,
    # whose state keeps the error and the steps' functions (async_stack): a cycle the contract
    # makes. The refused entry is one of those functions; it must not keep its flow, whose
    # driver and stack would then wait for the cyclic collector too (the collector is off
    # here: what is freed before the collect() below, reference counting freed).
    limiter = Limiter(concurrent=1, max_queue=0, rate=1, period_ms=10**9, burst=0)
    if refused_by == "rate":  # the one entry of this period
        first = AsyncSteps()
        first.sync(limiter, lambda asi: None)
        await first.promise()
    drivers: list[weakref.ref[Any]] = []

    def look(asi: AsyncSteps) -> None:
        drivers.append(weakref.ref(asi._flow.driver))  # type: ignore[union-attr]

    root = AsyncSteps()
    root.add(look)
    root.sync(limiter, lambda asi: None)
    gc.disable()
    try:
        async with contextlib.AsyncExitStack() as held:
            if refused_by == "place":
                await held.enter_async_context(limiter)
            with pytest.raises(FutoInError) as info:
                await root.promise()
        assert info.value.code == Errors.DefenseRejected
        assert info.value is root.state.last_exception
        assert root.state.async_stack  # the refused entry is named there
        # It is over, holding no place and waiting for none (a refusal leaves no exit hook).
        assert repr(root.state.async_stack[-1]).endswith(" done>")
        assert limiter.statistics().held == 0
        assert drivers
        if COMPILED:  # the compiled frames of the error's traceback keep no locals
            assert drivers[0]() is None
        # The pure build's keep theirs, the driver among them: it goes with the traceback's
        # cycle, to the collector. In both, nothing else keeps it.
        root.state.last_exception = None
        del info
        gc.collect()
        assert drivers[0]() is None
    finally:
        gc.enable()


@pytest.mark.anyio
@pytest.mark.parametrize("refused_by", ["limiter place", "limiter rate", "mutex queue",
                                        "throttle queue"])
async def test_a_refusal_unwinds_with_no_engine_frame_in_its_traceback(refused_by: str) -> None:
    # A primitive's entry step hands its DefenseRejected to the flow instead of raising it:
    # the flow unwinds it as a raised error (handlers, state), and the traceback promise()
    # raises it with starts at promise(), with none of the engine's frames (each an object).
    obj: Any
    if refused_by.startswith("limiter"):
        obj = Limiter(concurrent=1, max_queue=0, rate=1, period_ms=10**9, burst=0)
    elif refused_by == "mutex queue":
        obj = Mutex(1, max_queue=0)
    else:
        obj = Throttle(1, 10**9, max_queue=0)
    if refused_by.endswith("rate") or refused_by == "throttle queue":  # the period's one entry
        first = AsyncSteps()
        first.sync(obj, lambda asi: None)
        await first.promise()
    seen: list[tuple[str, Any]] = []

    def outer(asi: AsyncSteps) -> None:
        asi.sync(obj, lambda asi: seen.append(("entered", None)))

    def onerror(asi: AsyncSteps, code: str) -> None:
        seen.append((code, asi.state.error_info))

    root = AsyncSteps()
    root.add(outer, onerror)
    root.add(lambda asi: seen.append(("next step", None)))
    async with contextlib.AsyncExitStack() as held:
        if refused_by in ("limiter place", "mutex queue"):
            await held.enter_async_context(obj)
        with pytest.raises(FutoInError) as info:
            await root.promise()
    assert info.value.code == Errors.DefenseRejected
    assert info.value is root.state.last_exception
    assert seen == [(Errors.DefenseRejected, info.value.info)]  # the handler, nothing more
    assert info.value.info == root.state.error_info
    # (The compiled build's frames name their file relative to the package's parent.)
    frames = [frame.f_code.co_name for frame, _ in traceback.walk_tb(info.value.__traceback__)
              if os.path.basename(os.path.dirname(frame.f_code.co_filename)) == "futoin_anyio"]
    assert frames == ["promise"]
    assert obj.statistics().rejected == 1
