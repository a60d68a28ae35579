"""Mutex: limits, queue, re-entrance, cancellation and errors, flows and plain AnyIO tasks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError
from futoin_anyio._mutex import Mutex, MutexStatistics
from futoin_anyio.testing import BACKENDS, backend

Step = Callable[..., Any]


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return backend(request.param, autojump_clock=True)


class Tracker:
    """Counts who is inside a critical section, and the most ever inside at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.max_inside = 0
        self.log: list[str] = []

    def enter(self, name: str) -> None:
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        self.log.append(name)

    def leave(self) -> None:
        self.inside -= 1


def section(tracker: Tracker, name: str, hold: anyio.Event | None = None,
            yields: int = 0) -> Step:
    """A critical section that records itself and stays inside until ``hold`` is set
    (or for ``yields`` event-loop turns)."""

    def crit(asi: AsyncSteps, *_: Any) -> None:
        tracker.enter(name)

        async def stay(asi: AsyncSteps, *_: Any) -> None:
            if hold is not None:
                await hold.wait()
            for _i in range(yields):
                await anyio.lowlevel.checkpoint()

        def out(asi: AsyncSteps, *_: Any) -> None:
            tracker.leave()

        if hold is not None or yields:
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


async def until(cond: Callable[[], bool]) -> None:
    """Let other tasks run until ``cond()`` holds (without waiting on the clock)."""
    for _ in range(1000):
        if cond():
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError("condition never met")


def idle(mutex: Mutex) -> None:
    stats = mutex.statistics()
    assert (stats.held, stats.waiting) == (0, 0)
    assert not mutex._owners


# -- construction and misuse -------------------------------------------------------------------


class TestConstruction:
    def test_defaults(self) -> None:
        stats = Mutex().statistics()
        assert stats == MutexStatistics(held=0, waiting=0, rejected=0, max=1, max_queue=None)

    @pytest.mark.parametrize(("args", "exc", "name"), [
        ((0,), ValueError, "max"),
        ((-1,), ValueError, "max"),
        ((1.5,), TypeError, "max"),
        ((True,), TypeError, "max"),
        (("2",), TypeError, "max"),
        ((1, -1), ValueError, "max_queue"),
        ((1, 1.0), TypeError, "max_queue"),
        ((1, False), TypeError, "max_queue"),
    ])
    def test_bad_arguments(self, args: tuple[Any, ...], exc: type[Exception], name: str) -> None:
        with pytest.raises(exc, match=rf"\b{name} must"):
            Mutex(*args)

    def test_cannot_be_subclassed(self) -> None:
        # Final in both builds: an extension type declared final (compiled), a class that
        # refuses subclasses (pure).
        with pytest.raises(TypeError, match="Mutex' is not an acceptable base type"):
            type("MyMutex", (Mutex,), {})

    def test_zero_queue_is_valid(self) -> None:
        assert Mutex(2, 0).statistics().max_queue == 0

    def test_statistics_are_frozen(self) -> None:
        stats = Mutex(3, 4).statistics()
        with pytest.raises(dataclasses.FrozenInstanceError):
            stats.held = 1  # type: ignore[misc]
        assert "max=3" in repr(Mutex(3, 4))

    def test_sync_with_non_callable_is_internal_error(self) -> None:
        asi = AsyncSteps()
        mutex = Mutex()
        with pytest.raises(FutoInError) as info:
            mutex.sync(asi, "not callable")  # type: ignore[arg-type]
        assert info.value.code == Errors.InternalError
        with pytest.raises(FutoInError) as info:
            mutex.sync(asi, lambda asi: None, 42)  # type: ignore[arg-type]
        assert info.value.code == Errors.InternalError
        with pytest.raises(FutoInError) as info:
            asi.sync(mutex, None)  # type: ignore[arg-type]
        assert info.value.code == Errors.InternalError

    def test_binary_delegates_to_bridge(self, monkeypatch: pytest.MonkeyPatch) -> None:
        bridge = pytest.importorskip("futoin_anyio.binary._bridge")
        seen: list[object] = []
        def fake(obj: object) -> str:
            seen.append(obj)
            return "ptr"

        monkeypatch.setattr(bridge, "sync_binary_of", fake, raising=False)
        mutex = Mutex()
        assert mutex.binary() == "ptr"
        assert seen == [mutex]


# -- flows ---------------------------------------------------------------------------------------


@pytest.mark.anyio
class TestFlows:
    async def test_arguments_pass_through(self) -> None:
        mutex = Mutex()
        seen: list[tuple[Any, ...]] = []

        def crit(asi: AsyncSteps, *args: Any) -> None:
            seen.append(args)
            asi.add(lambda asi, *a: asi.success("inner", *args))

        asi = AsyncSteps()
        asi.add(lambda asi: asi.success(1, 2))
        asi.sync(mutex, crit)
        asi.add(lambda asi, *args: asi.success(("after", *args)))
        assert await asi.promise() == ("after", "inner", 1, 2)
        assert seen == [(1, 2)]
        idle(mutex)

    async def test_arguments_pass_through_after_waiting(self) -> None:
        mutex = Mutex()
        tracker = Tracker()
        hold = anyio.Event()
        results: list[Any] = []

        async with AsyncTool():
            first = AsyncSteps()
            first.add(synced(mutex, section(tracker, "first", hold)))
            first.execute()

            second = AsyncSteps()
            second.add(lambda asi: asi.success("a", 2))
            second.sync(mutex, lambda asi, a, b: asi.success(b, a))
            second.add(lambda asi, *args: results.append(args))
            second.execute()
            await anyio.wait_all_tasks_blocked()
            assert mutex.statistics().waiting == 1
            hold.set()
        assert results == [(2, "a")]
        idle(mutex)

    async def test_async_section_result(self) -> None:
        mutex = Mutex()

        async def crit(asi: AsyncSteps, x: int) -> int:
            await anyio.lowlevel.checkpoint()
            return x * 10

        asi = AsyncSteps()
        asi.add(lambda asi: asi.success(4))
        asi.sync(mutex, crit)
        assert await asi.promise() == 40
        idle(mutex)

    async def test_cloned_model_entries_run_concurrently(self) -> None:
        # The clones share the step sync() added to the model: each run must be its own entry.
        mutex = Mutex()
        tracker = Tracker()
        hold = anyio.Event()
        done: list[int] = []
        model = AsyncSteps()
        model.sync(mutex, section(tracker, "clone", hold))
        model.add(lambda asi: done.append(asi.state.n))
        with anyio.fail_after(5):  # a shared entry would leave a clone queued for ever
            async with AsyncTool():
                for n in range(4):
                    clone = model.clone()
                    clone.state.n = n
                    clone.execute()
                await anyio.wait_all_tasks_blocked()
                assert mutex.statistics().waiting == 3
                hold.set()
        assert done == [0, 1, 2, 3]
        assert tracker.max_inside == 1
        assert tracker.log == ["clone"] * 4
        idle(mutex)

    @pytest.mark.parametrize("limit", [1, 3])
    async def test_max_concurrency_never_exceeded(self, limit: int) -> None:
        mutex = Mutex(limit)
        tracker = Tracker()
        asi = AsyncSteps()
        par = asi.parallel()
        for i in range(20):
            par.add(synced(mutex, section(tracker, f"b{i}", yields=1 + i % 3)))
        await asi.promise()
        assert tracker.max_inside == limit
        assert sorted(tracker.log) == sorted(f"b{i}" for i in range(20))
        idle(mutex)

    async def test_fifo_order(self) -> None:
        mutex = Mutex()
        tracker = Tracker()
        asi = AsyncSteps()
        par = asi.parallel()
        for i in range(8):
            par.add(synced(mutex, section(tracker, f"b{i}", yields=1)))
        await asi.promise()
        assert tracker.log == [f"b{i}" for i in range(8)]

    @pytest.mark.parametrize(("limit", "max_queue", "flows"), [(1, 0, 4), (1, 2, 6), (2, 3, 9)])
    async def test_defense_rejected_exactly_when_queue_full(
            self, limit: int, max_queue: int, flows: int) -> None:
        mutex = Mutex(limit, max_queue)
        tracker = Tracker()
        codes: list[str] = []
        asi = AsyncSteps()
        par = asi.parallel()
        for i in range(flows):
            par.add(synced(mutex, section(tracker, f"b{i}", yields=2)), record_error(codes))
        await asi.promise()
        admitted = limit + max_queue
        assert tracker.log == [f"b{i}" for i in range(admitted)]
        assert codes == [Errors.DefenseRejected] * (flows - admitted)
        assert mutex.statistics().rejected == flows - admitted
        idle(mutex)

    async def test_rejection_is_not_seen_by_section_onerror(self) -> None:
        mutex = Mutex(1, 0)
        hold = anyio.Event()
        inner: list[str] = []
        outer: list[str] = []
        async with AsyncTool():
            holder = AsyncSteps()
            holder.add(synced(mutex, section(Tracker(), "h", hold)))
            holder.execute()
            other = AsyncSteps()
            other.add(synced(mutex, lambda asi: None, record_error(inner)), record_error(outer))
            other.execute()
            await anyio.wait_all_tasks_blocked()
            hold.set()
        assert (inner, outer) == ([], [Errors.DefenseRejected])

    async def test_reentrance_is_counted(self) -> None:
        mutex = Mutex()
        log: list[str] = []

        def counts() -> str:
            return f"held={mutex.statistics().held} counts={list(mutex._owners.values())}"

        def level2(asi: AsyncSteps) -> None:
            log.append(f"in2 {counts()}")
            asi.success("deep")

        def level1(asi: AsyncSteps) -> None:
            log.append(f"in1 {counts()}")
            asi.sync(mutex, level2)
            asi.add(lambda asi, r: log.append(f"out2 {r} {counts()}"))

        asi = AsyncSteps()
        asi.sync(mutex, level1)
        asi.add(lambda asi: log.append(f"left {counts()}"))
        await asi.promise()
        assert log == ["in1 held=1 counts=[1]", "in2 held=1 counts=[2]",
                       "out2 deep held=1 counts=[1]", "left held=0 counts=[]"]
        idle(mutex)

    async def test_reentrance_lets_others_in_only_after_outermost(self) -> None:
        mutex = Mutex()
        log: list[str] = []

        def inner(asi: AsyncSteps) -> None:
            log.append("a-inner")

        def outer(asi: AsyncSteps) -> None:
            log.append("a-outer")

            async def later(asi: AsyncSteps) -> None:
                await anyio.lowlevel.checkpoint()
                log.append("a-after-inner")

            asi.sync(mutex, inner)
            asi.add(later)

        async with AsyncTool():
            AsyncSteps().sync(mutex, outer).execute()
            AsyncSteps().sync(mutex, lambda asi: log.append("b")).execute()
        assert log == ["a-outer", "a-inner", "a-after-inner", "b"]
        idle(mutex)

    async def test_parallel_branches_inherit_no_lock(self) -> None:
        mutex = Mutex(1, max_queue=0)
        codes: list[str] = []

        def crit(asi: AsyncSteps) -> None:
            par = asi.parallel()
            for _ in range(2):
                par.add(synced(mutex, lambda asi: codes.append("entered")), record_error(codes))

        asi = AsyncSteps()
        asi.sync(mutex, crit)
        await asi.promise()
        assert codes == [Errors.DefenseRejected, Errors.DefenseRejected]
        idle(mutex)

    async def test_parallel_branches_are_separate_holders(self) -> None:
        mutex = Mutex(2)
        tracker = Tracker()
        held: list[int] = []

        def crit(asi: AsyncSteps) -> None:
            par = asi.parallel()
            for i in range(3):
                par.add(synced(mutex, section(tracker, f"b{i}", yields=2)))
                par.add(lambda asi: held.append(mutex.statistics().held))

        asi = AsyncSteps()
        asi.sync(mutex, crit)
        await asi.promise()
        assert tracker.max_inside == 1  # the parent holds one of the two places
        assert max(held) == 2
        assert tracker.log == ["b0", "b1", "b2"]
        idle(mutex)

    async def test_error_inside_releases(self) -> None:
        mutex = Mutex()
        tracker = Tracker()

        def crit(asi: AsyncSteps) -> None:
            asi.error("Boom", "inside")

        codes: list[str] = []
        async with AsyncTool():
            failing = AsyncSteps()
            failing.add(synced(mutex, crit), record_error(codes))
            failing.execute()
            AsyncSteps().add(synced(mutex, section(tracker, "next"))).execute()
        assert codes == ["Boom"]
        assert tracker.log == ["next"]
        idle(mutex)

    async def test_exception_in_nested_substep_releases(self) -> None:
        mutex = Mutex()

        def crit(asi: AsyncSteps) -> None:
            asi.add(lambda asi: asi.add(lambda asi: 1 / 0))

        asi = AsyncSteps()
        asi.sync(mutex, crit)
        with pytest.raises(FutoInError) as info:
            await asi.promise()
        assert info.value.code == Errors.InternalError
        idle(mutex)

    async def test_section_onerror_recovers_and_forwards(self) -> None:
        mutex = Mutex()

        def onerror(asi: AsyncSteps, code: str) -> None:
            assert mutex.statistics().held == 1  # still inside while handling
            asi.success("recovered", code)

        asi = AsyncSteps()
        asi.sync(mutex, lambda asi: asi.error("Oops"), onerror)
        asi.add(lambda asi, *args: asi.success(args))
        assert await asi.promise() == ("recovered", "Oops")
        idle(mutex)

    async def test_timeout_while_queued_leaves_queue(self) -> None:
        mutex = Mutex()
        hold = anyio.Event()
        tracker = Tracker()
        codes: list[str] = []

        def timed(asi: AsyncSteps) -> None:
            asi.set_timeout(20)
            asi.sync(mutex, section(tracker, "late"))

        async with AsyncTool():
            AsyncSteps().add(synced(mutex, section(tracker, "holder", hold))).execute()
            AsyncSteps().add(timed, record_error(codes)).execute()
            await until(lambda: mutex.statistics().waiting == 1)
            await anyio.sleep(0.05)
            assert codes == [Errors.Timeout]
            assert mutex.statistics().waiting == 0
            hold.set()
        assert tracker.log == ["holder"]
        idle(mutex)

    async def test_timeout_while_inside_releases(self) -> None:
        mutex = Mutex()
        tracker = Tracker()
        codes: list[str] = []

        def timed(asi: AsyncSteps) -> None:
            asi.set_timeout(20)
            asi.sync(mutex, section(tracker, "stuck", anyio.Event()))

        async with AsyncTool():
            AsyncSteps().add(timed, record_error(codes)).execute()
            AsyncSteps().add(synced(mutex, section(tracker, "next"))).execute()
        assert codes == [Errors.Timeout]
        assert tracker.log == ["stuck", "next"]
        idle(mutex)

    async def test_root_cancel_while_queued_and_inside(self) -> None:
        mutex = Mutex()
        tracker = Tracker()
        async with AsyncTool():
            holder = AsyncSteps().add(synced(mutex, section(tracker, "holder", anyio.Event())))
            holder.execute()
            queued = AsyncSteps().add(synced(mutex, section(tracker, "queued")))
            queued.execute()
            last = AsyncSteps().add(synced(mutex, section(tracker, "last")))
            last.execute()
            await anyio.wait_all_tasks_blocked()
            assert mutex.statistics().waiting == 2
            queued.cancel()
            assert mutex.statistics().waiting == 1
            holder.cancel()
        assert tracker.log == ["holder", "last"]
        idle(mutex)

    async def test_cancel_after_grant_before_resuming(self) -> None:
        mutex = Mutex()
        hold = anyio.Event()
        tracker = Tracker()
        async with AsyncTool():
            second = AsyncSteps().add(synced(mutex, section(tracker, "second")))
            first = AsyncSteps()
            first.add(synced(mutex, section(tracker, "first", hold)))
            # Runs right after the release granted the Mutex to ``second``.
            first.add(lambda asi: second.cancel())
            first.execute()
            second.execute()
            third = AsyncSteps().add(synced(mutex, section(tracker, "third")))
            third.execute()
            await anyio.wait_all_tasks_blocked()
            hold.set()
        assert tracker.log == ["first", "third"]
        idle(mutex)

    async def test_outer_cancel_scope(self) -> None:
        mutex = Mutex()
        tracker = Tracker()
        scopes: dict[str, anyio.CancelScope] = {}
        cancels: list[str] = []

        async def run(name: str, event: anyio.Event | None) -> None:
            asi = AsyncSteps()
            asi.add(lambda asi: asi.set_cancel(lambda asi: cancels.append(name)) or
                    asi.sync(mutex, section(tracker, name, event)))
            with anyio.CancelScope() as scopes[name]:
                await asi.promise()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "inside", anyio.Event())
            await until(lambda: mutex.statistics().held == 1)
            tg.start_soon(run, "queued", None)
            await until(lambda: mutex.statistics().waiting == 1)
            assert mutex.statistics() == MutexStatistics(1, 1, 0, 1, None)
            scopes["queued"].cancel()
            await until(lambda: mutex.statistics().waiting == 0)
            assert mutex.statistics().held == 1
            scopes["inside"].cancel()
            await until(lambda: mutex.statistics().held == 0)
        assert cancels == ["queued", "inside"]
        assert tracker.log == ["inside"]
        idle(mutex)

    async def test_outer_timeout_while_queued(self) -> None:
        mutex = Mutex()
        async with mutex:
            asi = AsyncSteps().add(synced(mutex, lambda asi: None))
            with anyio.move_on_after(0.02) as scope:
                await asi.promise()
            assert scope.cancelled_caught
            assert mutex.statistics().waiting == 0
        idle(mutex)

    async def test_failed_sibling_cancels_queued_and_inside(self) -> None:
        mutex = Mutex()
        tracker = Tracker()
        cancels: list[str] = []

        async def boom(asi: AsyncSteps) -> None:
            await anyio.sleep(0.01)
            raise RuntimeError("boom")

        def branch(name: str) -> Step:
            def step(asi: AsyncSteps) -> None:
                asi.set_cancel(lambda asi: cancels.append(name))
                asi.sync(mutex, section(tracker, name, anyio.Event()))

            return step

        asi = AsyncSteps()
        asi.parallel().add(branch("inside")).add(branch("queued")).add(boom)
        with pytest.raises(FutoInError) as info:
            await asi.promise()
        assert info.value.code == Errors.InternalError
        assert sorted(cancels) == ["inside", "queued"]
        assert tracker.log == ["inside"]
        idle(mutex)

    async def test_loop_break_inside_releases(self) -> None:
        mutex = Mutex()

        def body(asi: AsyncSteps, i: int) -> None:
            def crit(asi: AsyncSteps, *_: Any) -> None:
                if i == 2:
                    asi.break_loop()

            asi.sync(mutex, crit)

        asi = AsyncSteps()
        asi.repeat(5, body)
        asi.add(lambda asi: asi.success(mutex.statistics().held))
        assert await asi.promise() == 0
        idle(mutex)


# -- plain AnyIO ---------------------------------------------------------------------------------


@pytest.mark.anyio
class TestPlainAnyIO:
    async def test_tasks_and_flows_share_the_limit(self) -> None:
        mutex = Mutex(2)
        tracker = Tracker()

        async def task(name: str) -> None:
            async with mutex:
                tracker.enter(name)
                for _ in range(3):
                    await anyio.lowlevel.checkpoint()
                tracker.leave()

        async with AsyncTool(), anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(task, f"t{i}")
                AsyncSteps().add(synced(mutex, section(tracker, f"f{i}", yields=2))).execute()
        assert tracker.max_inside == 2
        assert sorted(tracker.log) == sorted([f"t{i}" for i in range(10)]
                                             + [f"f{i}" for i in range(10)])
        idle(mutex)

    async def test_fifo_across_tasks_and_flows(self) -> None:
        mutex = Mutex()
        tracker = Tracker()
        hold = anyio.Event()

        async def task(name: str, event: anyio.Event | None = None) -> None:
            async with mutex:
                tracker.enter(name)
                if event is not None:
                    await event.wait()
                tracker.leave()

        async with AsyncTool(), anyio.create_task_group() as tg:
            tg.start_soon(task, "t0", hold)
            await anyio.wait_all_tasks_blocked()
            AsyncSteps().add(synced(mutex, section(tracker, "f1", yields=1))).execute()
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(task, "t2")
            await anyio.wait_all_tasks_blocked()
            AsyncSteps().add(synced(mutex, section(tracker, "f3"))).execute()
            await anyio.wait_all_tasks_blocked()
            assert mutex.statistics().waiting == 3
            hold.set()
        assert tracker.log == ["t0", "f1", "t2", "f3"]
        idle(mutex)

    async def test_queue_full_raises_defense_rejected(self) -> None:
        mutex = Mutex(1, max_queue=1)
        hold = anyio.Event()
        outcomes: list[str] = []

        async def task() -> None:
            try:
                async with mutex:
                    await hold.wait()
                outcomes.append("ok")
            except FutoInError as exc:
                outcomes.append(exc.code)

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(task)
                await anyio.wait_all_tasks_blocked()
            hold.set()
        assert sorted(outcomes) == ["DefenseRejected", "DefenseRejected", "ok", "ok"]
        assert mutex.statistics().rejected == 2
        idle(mutex)

    async def test_cancel_while_waiting_leaves_queue(self) -> None:
        mutex = Mutex()
        hold = anyio.Event()
        entered: list[str] = []

        async def holder() -> None:
            async with mutex:
                entered.append("holder")
                await hold.wait()

        async def waiter() -> None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                async with mutex:
                    entered.append("waiter")

        scopes: list[anyio.CancelScope] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert mutex.statistics().waiting == 1
            scopes[0].cancel()
            await anyio.wait_all_tasks_blocked()
            assert mutex.statistics().waiting == 0
            hold.set()
        assert entered == ["holder"]
        idle(mutex)

    async def test_cancel_after_grant_gives_the_place_back(self) -> None:
        mutex = Mutex()
        entered: list[str] = []
        scopes: list[anyio.CancelScope] = []
        go = anyio.Event()

        async def holder() -> None:
            async with mutex:
                entered.append("holder")
                await go.wait()
                # Cancelled now, then let in by the release below, before it could resume.
                scopes[0].cancel()

        async def waiter() -> None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                async with mutex:
                    entered.append("waiter")

        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert mutex.statistics().waiting == 1
            go.set()
        assert entered == ["holder"]
        assert scopes[0].cancelled_caught
        idle(mutex)

    async def test_reentrant_task(self) -> None:
        mutex = Mutex(1, max_queue=0)
        async with mutex:
            async with mutex:
                assert mutex.statistics().held == 1
            assert mutex.statistics().held == 1
            assert len(mutex._owners) == 1
        idle(mutex)

    async def test_child_task_inherits_no_lock(self) -> None:
        mutex = Mutex(1, max_queue=0)
        codes: list[str] = []

        async def child() -> None:
            try:
                async with mutex:
                    codes.append("entered")
            except FutoInError as exc:
                codes.append(exc.code)

        async with mutex, anyio.create_task_group() as tg:
            tg.start_soon(child)
        assert codes == [Errors.DefenseRejected]
        idle(mutex)

    async def test_exit_without_holding(self) -> None:
        mutex = Mutex()
        with pytest.raises(RuntimeError, match="not held"):
            await mutex.__aexit__(None, None, None)

    async def test_exception_inside_releases(self) -> None:
        mutex = Mutex()
        with pytest.raises(ZeroDivisionError):
            async with mutex:
                1 / 0  # noqa: B018
        idle(mutex)
