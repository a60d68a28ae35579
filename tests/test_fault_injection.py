"""Fault injection: handlers that raise, completions that race, threads, interrupts, cancels.

Every test runs on asyncio and trio, in virtual time (trio's ``MockClock``, and the fuzzer's
:class:`fuzz.interp.VirtualTimeLoop` for asyncio) unless it needs real threads.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import anyio
import pytest
from backend_support import virtual_time

from futoin_anyio import AsyncSteps, AsyncTool, Errors, FutoInError, Limiter

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return virtual_time(request.param)


class Boom(Exception):
    pass


def _wait(asi: AsyncSteps, log: list[Any], name: str) -> None:
    asi.set_cancel(lambda _: log.append(("cancel", name)))


# -- handlers that raise ------------------------------------------------------------------------


@pytest.mark.parametrize("exc", [Boom("cancel"), FutoInError("E9", "from cancel")],
                         ids=["plain", "futoin"])
async def test_cancel_handler_raising_while_unwinding(exc: Exception) -> None:
    """An exception in a cancel handler during error unwinding becomes InternalError; outer
    handlers still run, innermost first."""
    log: list[Any] = []

    def inner(asi: AsyncSteps) -> None:
        def oncancel(_: AsyncSteps) -> None:
            log.append("inner cancel")
            raise exc
        asi.set_cancel(oncancel)
        asi.set_timeout(10)

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda _: log.append("outer cancel"))
        asi.add(inner, lambda a, code: log.append(("inner onerror", code)))

    root = AsyncSteps()
    root.add(outer, lambda a, code: log.append(("outer onerror", code, a.state.error_info)))
    with pytest.raises(FutoInError) as info:
        await root.promise()
    assert info.value.code == Errors.InternalError
    assert info.value.__cause__ is exc
    assert log == ["inner cancel", ("inner onerror", Errors.InternalError), "outer cancel",
                   ("outer onerror", Errors.InternalError, f"{type(exc).__name__}: {exc}")]


@pytest.mark.parametrize("exc", [Boom("cancel"), FutoInError("E9")], ids=["plain", "futoin"])
async def test_cancel_handler_raising_while_cancelling(
        exc: Exception, caplog: pytest.LogCaptureFixture) -> None:
    """During ``cancel()`` a raising cancel handler is logged; the others still run, no error
    handler runs, and the root ends Cancelled."""
    log: list[Any] = []

    def inner(asi: AsyncSteps) -> None:
        def oncancel(_: AsyncSteps) -> None:
            log.append("inner cancel")
            raise exc
        asi.set_cancel(oncancel)

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda _: log.append("outer cancel"))
        asi.add(inner, lambda a, code: log.append("inner onerror"))

    root = AsyncSteps()
    root.add(outer, lambda a, code: log.append("outer onerror"))
    async with anyio.create_task_group() as tg:
        async def run() -> None:
            with pytest.raises(FutoInError) as info:
                await root.promise()
            assert info.value.code == Errors.Cancelled

        tg.start_soon(run)
        await anyio.sleep(1)
        with caplog.at_level(logging.ERROR, "futoin_anyio"):
            root.cancel()
    assert log == ["inner cancel", "outer cancel"]
    assert any("cancel handler" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", ["plain", "futoin"])
async def test_error_handler_raising(kind: str) -> None:
    """A raising error handler passes its error outwards: a plain exception as InternalError
    (``error_info`` names it), a FutoInError with its own code and info."""
    seen: list[Any] = []

    def handler(asi: AsyncSteps, code: str) -> None:
        seen.append(("inner", code))
        if kind == "plain":
            raise Boom("in handler")
        raise FutoInError("E2", "replaced")

    def outer(asi: AsyncSteps) -> None:
        asi.add(lambda a: a.error("E1", "first"), handler)

    root = AsyncSteps()
    root.add(outer, lambda a, code: seen.append(("outer", code, a.state.error_info)))
    with pytest.raises(FutoInError) as info:
        await root.promise()
    if kind == "plain":
        assert seen == [("inner", "E1"), ("outer", Errors.InternalError, "Boom: in handler")]
        assert info.value.code == Errors.InternalError
        assert isinstance(info.value.__cause__, Boom)
    else:
        assert seen == [("inner", "E1"), ("outer", "E2", "replaced")]
        assert (info.value.code, info.value.info) == ("E2", "replaced")


# -- races --------------------------------------------------------------------------------------


@pytest.mark.parametrize("success_first", [True, False])
async def test_external_success_racing_timeout(success_first: bool) -> None:
    """success() and a timeout due at the same instant: exactly one wins. The timer scheduled
    first fires first; the loser's success() is a misuse (InternalError), never a second
    completion."""
    log: list[Any] = []
    loser: list[BaseException] = []

    def step(asi: AsyncSteps) -> None:
        tool = asi.tool
        assert tool is not None

        def complete() -> None:
            try:
                asi.success("ext")
            except FutoInError as e:
                loser.append(e)

        if success_first:
            tool.deferred(100, complete)
            asi.set_timeout(100)
        else:
            asi.set_timeout(100)
            tool.deferred(100, complete)

    def onerror(asi: AsyncSteps, code: str) -> None:
        log.append(("onerror", code))
        asi.success()

    root = AsyncSteps()
    root.add(step, onerror)
    root.add(lambda a, *args: log.append(("next", args)))
    await root.promise()
    if success_first:
        assert log == [("next", ("ext",))] and not loser
    else:
        assert log == [("onerror", Errors.Timeout), ("next", ())]
        assert len(loser) == 1 and isinstance(loser[0], FutoInError)
        assert loser[0].code == Errors.InternalError and "out of service" in str(loser[0])


@pytest.mark.parametrize("success_first", [True, False])
async def test_external_success_racing_cancel(success_first: bool) -> None:
    """success() and root.cancel() at the same instant, in both orders: either the step
    completes and the root is then cancelled at its next wait, or the cancel wins and the late
    success() is a misuse. Never both, never a completion after the cancel handler."""
    log: list[Any] = []
    results: list[Any] = []
    root = AsyncSteps()

    def step(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda _: log.append("cancel 1"))
        tool = asi.tool
        assert tool is not None

        def complete() -> None:
            try:
                asi.success()
                results.append("ok")
            except FutoInError as e:
                results.append(e.code)

        def cancel() -> None:
            log.append("root.cancel")
            root.cancel()

        for func in ((complete, cancel) if success_first else (cancel, complete)):
            tool.deferred(50, func)

    def second(asi: AsyncSteps) -> None:
        log.append("step 2")
        asi.set_cancel(lambda _: log.append("cancel 2"))

    root.add(step, lambda a, code: log.append(("onerror", code)))
    root.add(second)
    with pytest.raises(FutoInError) as info:
        await root.promise()
    assert info.value.code == Errors.Cancelled
    if success_first:
        assert results == ["ok"]
        # step 2 had not started when cancel() came: nothing of it ran.
        assert log == ["root.cancel"] or log == ["root.cancel", "step 2", "cancel 2"]
    else:
        assert results == [Errors.InternalError]
        assert log == ["root.cancel", "cancel 1"]


async def test_double_completion_is_refused() -> None:
    """A second success() or error() on a step that already completed raises InternalError and
    changes nothing."""
    got: list[Any] = []
    errors: list[str] = []

    def step(asi: AsyncSteps) -> None:
        tool = asi.tool
        assert tool is not None

        def twice() -> None:
            asi.success(1)
            try:
                asi.success(2)
            except FutoInError as e:
                errors.append(e.code)
            try:
                asi.error("E1")
            except FutoInError as e:
                errors.append(e.code)

        tool.deferred(10, twice)
        asi.wait_external()

    root = AsyncSteps()
    root.add(step, lambda a, code: got.append(("onerror", code)))
    root.add(lambda a, *args: got.append(args))
    await root.promise()
    assert got == [(1,)]
    assert errors == [Errors.InternalError, Errors.InternalError]


# -- threads ------------------------------------------------------------------------------------


def _shutdown_round(backend: str, round_: int) -> tuple[list[str], list[Any]]:
    """One round of the test below: what happened in the loop, and what the thread got."""
    outcome: list[str] = []
    thread_result: list[Any] = []
    ready = threading.Event()
    kept: list[AsyncSteps] = []

    def step(asi: AsyncSteps) -> None:
        kept.append(asi)
        asi.set_cancel(lambda _: outcome.append("cancelled"))
        ready.set()

    def worker(delay: float) -> None:
        ready.wait(5)
        if not kept:  # cancelled before its step started
            thread_result.append("not started")
            return
        threading.Event().wait(delay)
        try:
            kept[0].success()
            thread_result.append("returned")
        except FutoInError as e:
            thread_result.append(e.code)

    async def main() -> None:
        root = AsyncSteps()
        root.add(step)
        root.add(lambda a: outcome.append("completed"))
        async with AsyncTool():
            root.execute()
            await anyio.sleep(0.001 * (round_ % 3))
            root.cancel()

    t = threading.Thread(target=worker, args=(0.0005 * (round_ % 4),))
    t.start()
    anyio.run(main, backend=backend)
    ready.set()
    t.join(5)
    assert not t.is_alive()
    return outcome, thread_result


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_success_from_thread_while_loop_shuts_down(backend: str) -> None:
    """A thread completes a waiting step while the AsyncTool exits and the loop closes.

    Each round, at most one of "the next step ran" and "the step's cancel handler ran" happens
    (neither, when the success was taken and the root cancelled before the next step started),
    and the thread's success() either returns (from another thread a lost race is ignored, as
    the engine documents) or raises FutoInError(InternalError) once the loop is gone.
    """
    seen: set[tuple[str, str]] = set()
    for round_ in range(30):
        outcome, thread_result = _shutdown_round(backend, round_)
        if thread_result == ["not started"]:
            assert outcome == []
            continue
        assert outcome in ([], ["completed"], ["cancelled"]), (round_, outcome, thread_result)
        assert thread_result in (["returned"], [Errors.InternalError]), thread_result
        seen.add(((outcome or ["taken"])[0], thread_result[0]))
    # Both ways of losing the race were seen (the test is not vacuous).
    assert ("cancelled", Errors.InternalError) in seen


# -- BaseExceptions pass through ------------------------------------------------------------------


@pytest.mark.parametrize("async_step", [False, True], ids=["sync", "async"])
async def test_keyboard_interrupt_passes_through(async_step: bool) -> None:
    """KeyboardInterrupt from a step is never a FutoIn error: no error handler sees it, the
    cancel handlers of the active steps run, and the very same exception propagates."""
    log: list[Any] = []
    kbi = KeyboardInterrupt()

    def raise_sync(asi: AsyncSteps) -> None:
        raise kbi

    async def raise_async(asi: AsyncSteps) -> None:
        raise kbi

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda _: log.append("outer cancel"))
        asi.add(raise_async if async_step else raise_sync, lambda a, c: log.append(("inner", c)))

    root = AsyncSteps()
    root.add(outer, lambda a, code: log.append(("outer onerror", code)))
    with pytest.raises(KeyboardInterrupt) as info:
        await root.promise()
    assert info.value is kbi
    assert log == ["outer cancel"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_keyboard_interrupt_leaves_async_tool(backend: str) -> None:
    """Under execute(), a KeyboardInterrupt from a step leaves ``async with AsyncTool()`` (and
    the event loop) unchanged, and the other roots' cancel handlers run on the way out.

    Run in its own event loop: on asyncio a KeyboardInterrupt raised in a task (the tool's
    driver) stops the loop itself, so it surfaces from ``anyio.run()``.
    """
    log: list[str] = []
    kbi = KeyboardInterrupt()

    def waiting(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda _: log.append("other cancelled"))

    def raising(asi: AsyncSteps) -> None:
        raise kbi

    async def main() -> None:
        async with AsyncTool():
            AsyncSteps().add(waiting).execute()
            AsyncSteps().add(lambda a: None).add(raising).execute(
                lambda code: log.append("unhandled " + code))
            await anyio.sleep(10)

    with pytest.raises(KeyboardInterrupt) as info:
        anyio.run(main, backend=backend)
    assert info.value is kbi
    assert log == ["other cancelled"]


async def test_backend_cancellation_passes_through() -> None:
    """An outer cancel scope cancels promise(): cancel handlers run innermost first, no error
    handler runs, and the backend's own cancellation exception propagates (the scope catches
    it) — it is never turned into a FutoInError."""
    log: list[Any] = []

    def inner(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda _: log.append("inner cancel"))

    def outer(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda _: log.append("outer cancel"))
        asi.add(inner, lambda a, c: log.append(("inner onerror", c)))

    root = AsyncSteps()
    root.add(outer, lambda a, c: log.append(("outer onerror", c)))
    cancelled = anyio.get_cancelled_exc_class()
    caught: list[BaseException] = []
    with anyio.move_on_after(5) as scope:
        try:
            await root.promise()
        except BaseException as e:
            caught.append(e)
            raise
    assert scope.cancelled_caught
    assert len(caught) == 1 and isinstance(caught[0], cancelled)
    assert log == ["inner cancel", "outer cancel"]
    assert not root  # out of service: it cannot be started again


# -- a Limiter under random cancels ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
async def test_limiter_under_random_cancels(seed: int) -> None:
    """Roots queue on a Limiter, hold it for random times, fail, time out or are cancelled at
    random instants (queued or inside). The limit is never exceeded, every entered section is
    left, and at the end no place is held and no one waits."""
    rnd = random.Random(seed)
    limiter = Limiter(concurrent=3, max_queue=None, rate=1000, period_ms=1000)
    inside = [0]
    peak = [0]
    entered = [0]
    left = [0]
    codes: list[str] = []

    def section(asi: AsyncSteps, n: int) -> None:
        inside[0] += 1
        entered[0] += 1
        peak[0] = max(peak[0], inside[0])

        def leave(_: object = None) -> None:
            inside[0] -= 1
            left[0] += 1

        asi.stack(lambda: None, leave)  # runs exactly once however the step ends
        r = rnd.random()
        if r < 0.2:
            asi.error("E1")
        tool = asi.tool
        assert tool is not None
        if r < 0.4:
            asi.set_timeout(rnd.randint(1, 30))
        asi.wait_external()
        tool.deferred(rnd.randint(1, 40), lambda: asi.success() if asi else None)

    async with AsyncTool() as tool:
        roots = []
        for n in range(200):
            root = AsyncSteps()
            root.add(lambda a, n=n: a.sync(limiter, lambda b: section(b, n)))
            root.execute(codes.append)
            roots.append(root)
            if rnd.random() < 0.3:
                tool.deferred(rnd.randint(0, 400), roots[rnd.randrange(len(roots))].cancel)
            if n % 10 == 0:
                await anyio.sleep(rnd.randint(0, 20) / 1000)
    stats = limiter.statistics()
    assert (stats.held, stats.waiting, stats.rate_waiting) == (0, 0, 0)
    assert peak[0] == 3
    assert entered[0] == left[0] > 0
    assert set(codes) <= {"E1", Errors.Timeout}
    assert tool.statistics().roots == 0 and tool.statistics().scheduled == 0
