"""Randomised stress of Mutex, Throttle and Limiter: many flows and tasks, random holds,
re-entrance, parallel branches, errors, timeouts and cancellations (root ``cancel()``, outer
cancel scopes, parallel siblings). Invariants are checked at every entry; at the end every
primitive must be back to zero held and zero waiting, with no timer left.

Seeded: a failure names its seed and replays exactly under trio's MockClock.
"""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, FutoInError
from futoin_anyio._limiter import Limiter
from futoin_anyio._mutex import Mutex
from futoin_anyio._throttle import Throttle
from futoin_anyio.testing import BACKENDS, backend

pytestmark = pytest.mark.anyio

Sync = Mutex | Throttle | Limiter


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return backend(request.param, autojump_clock=True)


class Checker:
    """Who is inside, at most how many at once, and when each entry happened."""

    def __init__(self, obj: Sync, limit: int | None) -> None:
        self.obj = obj
        self.limit = limit
        self.inside = 0
        self.max_inside = 0
        self.entries: list[tuple[float, float | None]] = []  # (time, period end)
        self.outcomes: Counter[str] = Counter()

    def enter(self) -> None:
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        if self.limit is not None:
            assert self.inside <= self.limit
        throttle = self.throttle
        end = throttle._period_end if throttle is not None else None
        self.entries.append((anyio.current_time(), end))

    def leave(self, _: object = None) -> None:
        self.inside -= 1

    @property
    def throttle(self) -> Throttle | None:
        obj = self.obj
        if isinstance(obj, Throttle):
            return obj
        if isinstance(obj, Limiter):
            return obj._throttle
        return None

    def check_periods(self) -> None:
        """Entries grouped by the period they were let in: never more than ``max`` per period,
        each inside its period, and periods never overlap."""
        throttle = self.throttle
        if throttle is None or not self.entries:
            return
        period = throttle._period
        groups: dict[float, list[float]] = {}
        for when, end in self.entries:
            assert end is not None
            groups.setdefault(end, []).append(when)
        ends = sorted(groups)
        for end in ends:
            times = groups[end]
            assert len(times) <= throttle._max
            assert all(end - period - 1e-6 <= t < end + 1e-6 for t in times)
        for a, b in pairwise(ends):
            assert b - a >= period - 1e-6


def build_flow(rng: random.Random, obj: Sync, check: Checker, depth: int = 0) -> AsyncSteps:
    """A root with a random shape around one ``sync()``."""
    hold = rng.choice([0.0, 0.0, 0.0005, 0.001, 0.003])
    fail = rng.random() < 0.15
    reenter = isinstance(obj, Mutex) and rng.random() < 0.2
    timeout = rng.choice([None, None, None, 1, 4])
    branches = depth == 0 and rng.random() < 0.15

    def section(asi: AsyncSteps, *_: Any) -> None:
        check.enter()
        # Called exactly once when this step ends: success, error or cancellation.
        asi.stack(lambda: None, check.leave)
        if hold:
            def stay(asi: AsyncSteps, *_: Any) -> None:
                # Held until a timer of the step's AsyncTool fires (a cancelled or timed-out
                # step is out of service by then: ``bool(asi)`` is False).
                asi.wait_external()
                tool = asi.tool
                assert tool is not None
                tool.deferred(hold * 1000, lambda: asi.success() if asi else None)

            asi.add(stay)
        if reenter:
            asi.sync(obj, lambda asi, *_: asi.success("inner"))
        if fail:
            def boom(asi: AsyncSteps, *_: Any) -> None:
                asi.error("Boom")

            asi.add(boom)

    def enter(asi: AsyncSteps) -> None:
        if timeout is not None:
            asi.set_timeout(timeout)
        if branches:
            par = asi.parallel()
            for _ in range(rng.randint(2, 3)):
                par.add(lambda asi: asi.sync(obj, section))
        else:
            asi.sync(obj, section)

    def onerror(asi: AsyncSteps, code: str) -> None:
        check.outcomes[code] += 1
        asi.success()

    root = AsyncSteps()
    root.add(enter, onerror)
    root.add(lambda asi, *_: check.outcomes.update(["ok"]))
    return root


async def task_user(rng: random.Random, obj: Sync, check: Checker) -> None:
    hold = rng.choice([0.0, 0.001, 0.002])
    try:
        with anyio.move_on_after(rng.choice([0.5, 0.5, 0.002])):
            async with obj:
                check.enter()
                try:
                    await anyio.sleep(hold)
                    if rng.random() < 0.1:
                        raise ValueError("task failure")
                finally:
                    check.leave()
            check.outcomes["task ok"] += 1
    except FutoInError as exc:
        check.outcomes[f"task {exc.code}"] += 1
    except ValueError:
        check.outcomes["task failed"] += 1


async def exercise(rng: random.Random, obj: Sync, check: Checker, count: int) -> None:
    scopes: list[anyio.CancelScope] = []
    executed: list[AsyncSteps] = []

    async def promised(root: AsyncSteps) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            try:
                await root.promise()
            except FutoInError as exc:
                check.outcomes[f"promise {exc.code}"] += 1

    async with AsyncTool(), anyio.create_task_group() as tg:
        for _ in range(count):
            kind = rng.random()
            if kind < 0.5:
                root = build_flow(rng, obj, check)
                root.execute(lambda code: check.outcomes.update([f"unhandled {code}"]))
                executed.append(root)
            elif kind < 0.75:
                tg.start_soon(promised, build_flow(rng, obj, check))
            else:
                tg.start_soon(task_user, rng, obj, check)
            action = rng.random()
            if action < 0.08 and executed:
                rng.choice(executed).cancel()
            elif action < 0.14 and scopes:
                rng.choice(scopes).cancel()
            elif action < 0.4:
                await anyio.sleep(rng.choice([0.0, 0.0005, 0.001]))
        # Some late cancellations, while many are still queued or inside.
        for root in rng.sample(executed, k=min(5, len(executed))):
            root.cancel()
        for scope in rng.sample(scopes, k=min(3, len(scopes))):
            scope.cancel()


def assert_idle(obj: Sync, check: Checker) -> None:
    allowed = {"ok", "Timeout", "Boom", "DefenseRejected", "task ok", "task failed",
               "task DefenseRejected"}
    assert set(check.outcomes) <= allowed, check.outcomes
    assert obj.statistics().waiting == 0
    if isinstance(obj, Mutex):
        assert obj.statistics().held == 0
        assert not obj._owners
    if isinstance(obj, Limiter):
        stats = obj.statistics()
        assert (stats.held, stats.rate_waiting) == (0, 0)
        assert not obj._mutex._owners
    throttle = check.throttle
    if throttle is not None:
        assert throttle._timer is None and throttle._timer_host is None
    assert check.inside == 0


SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
async def test_mutex_stress(seed: int, anyio_backend_name: str) -> None:
    rng = random.Random(seed)
    limit = rng.randint(1, 3)
    mutex = Mutex(limit, rng.choice([None, 4, 30]))
    check = Checker(mutex, limit)
    await exercise(rng, mutex, check, 150)
    assert_idle(mutex, check)
    assert 1 <= check.max_inside <= limit
    assert check.outcomes["ok"] + check.outcomes["task ok"] > 0


@pytest.mark.parametrize("seed", SEEDS)
async def test_throttle_stress(seed: int, anyio_backend_name: str) -> None:
    rng = random.Random(seed)
    throttle = Throttle(rng.randint(1, 4), rng.choice([2, 5, 10]), rng.choice([None, 5, 40]))
    check = Checker(throttle, None)
    await exercise(rng, throttle, check, 120)
    assert_idle(throttle, check)
    if anyio_backend_name == "trio":  # the MockClock makes the accounting exact
        check.check_periods()
    assert len(check.entries) > 0


@pytest.mark.parametrize("seed", SEEDS)
async def test_limiter_stress(seed: int, anyio_backend_name: str) -> None:
    rng = random.Random(seed)
    concurrent = rng.randint(1, 3)
    limiter = Limiter(concurrent, rng.choice([None, 10, 40]), rng.randint(2, 5),
                      rng.choice([2, 5]), rng.choice([None, 5, 40]))
    check = Checker(limiter, concurrent)
    await exercise(rng, limiter, check, 120)
    assert_idle(limiter, check)
    if anyio_backend_name == "trio":
        check.check_periods()
    assert 1 <= check.max_inside <= concurrent


def test_checker_catches_overlapping_periods() -> None:
    """The period check itself can fail."""
    throttle = Throttle(1, 100)
    check = Checker(throttle, None)
    check.entries = [(0.0, 0.1), (0.05, 0.1)]
    with pytest.raises(AssertionError):
        check.check_periods()
    check.entries = [(0.0, 0.1), (0.15, 0.15)]
    with pytest.raises(AssertionError):
        check.check_periods()

