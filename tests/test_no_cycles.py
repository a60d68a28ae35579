"""A root that completes is freed by reference counting alone: no reference cycle is left for the
garbage collector (each would be work for it in a busy service, and memory until it runs).

The garbage collector is off while each case runs; the root (a subclass that allows weak
references) must be gone as soon as nothing references it. Failing roots are not covered:
``state.last_exception`` holds the exception, whose traceback holds the frames that hold the
steps, as with any exception kept in a variable.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from anyio.lowlevel import checkpoint

from futoin_anyio import AsyncSteps, AsyncTool, Limiter, Mutex, Throttle

pytestmark = pytest.mark.anyio


class _Root(AsyncSteps):
    """A root that can be weakly referenced (its steps are of its class too)."""

    __slots__ = ("__weakref__",)


async def _coro_step(asi: AsyncSteps) -> int:
    await checkpoint()
    return 1


def _plain(asi: AsyncSteps) -> None:
    asi.add(lambda s: s.success(1))
    asi.add(lambda s, v: None)


def _async(asi: AsyncSteps) -> None:
    asi.add(_coro_step)
    asi.add(lambda s, v: None)


def _timeout(asi: AsyncSteps) -> None:
    def step(s: AsyncSteps) -> None:
        s.set_timeout(10_000)
        s.add(_coro_step)

    asi.add(step)


def _parallel(asi: AsyncSteps) -> None:
    par = asi.parallel()
    par.add(_coro_step)
    par.add(lambda s: s.success(2))
    par.add(_coro_step)


def _loop(asi: AsyncSteps) -> None:
    asi.add(lambda s: s.repeat(3, lambda b, i: None))


def _cancel_handler(asi: AsyncSteps) -> None:
    def step(s: AsyncSteps) -> None:
        s.set_cancel(lambda c: None)
        s.success()

    asi.add(step)


def _handled_then_succeeds(asi: AsyncSteps) -> None:
    # An error handler that adds steps; the root still ends with success.
    asi.add(lambda s: s.add(lambda t: t.success()), lambda s, code: s.success())


_MUTEX = Mutex(1)
_THROTTLE = Throttle(1000, period_ms=1)
_LIMITER = Limiter(concurrent=2, max_queue=None, rate=1000, period_ms=1, burst=None)


def _mutex(asi: AsyncSteps) -> None:
    asi.sync(_MUTEX, _coro_step)


def _throttle(asi: AsyncSteps) -> None:
    asi.sync(_THROTTLE, lambda s: s.success(1))


def _limiter(asi: AsyncSteps) -> None:
    asi.sync(_LIMITER, _coro_step)


SHAPES: dict[str, Callable[[AsyncSteps], None]] = {
    "plain": _plain,
    "async": _async,
    "timeout": _timeout,
    "parallel": _parallel,
    "loop": _loop,
    "cancel_handler": _cancel_handler,
    "handled": _handled_then_succeeds,
    "mutex": _mutex,
    "throttle": _throttle,
    "limiter": _limiter,
}


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _build(shape: str) -> tuple[_Root, weakref.ref[_Root]]:
    root = _Root()
    SHAPES[shape](root)
    return root, weakref.ref(root)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.usefixtures("no_gc")
async def test_a_promise_root_is_freed_without_the_collector(shape: str) -> None:
    root, ref = _build(shape)
    await root.promise()
    del root
    assert ref() is None, f"{shape}: the finished root is only reachable through a cycle"


@pytest.mark.usefixtures("no_gc")
async def test_roots_awaited_by_contending_tasks_are_freed_without_the_collector() -> None:
    refs: list[weakref.ref[_Root]] = []

    async def one() -> None:
        root, ref = _build("mutex")
        refs.append(ref)
        await root.promise()

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(one)
    assert len(refs) == 20
    assert [r for r in refs if r() is not None] == []


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.usefixtures("no_gc")
async def test_an_executed_root_is_freed_without_the_collector(shape: str) -> None:
    done = anyio.Event()
    results: list[Any] = []
    async with AsyncTool():
        def last(asi: AsyncSteps, *args: Any) -> None:
            results.append(args)
            done.set()

        root, ref = _build(shape)
        root.add(last)
        root.execute()
        del root
        await done.wait()
        for _ in range(3):  # the driver finishes the root after its last step
            await checkpoint()
        assert results, shape
        assert ref() is None, f"{shape}: the finished root is only reachable through a cycle"
