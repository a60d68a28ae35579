"""Completing steps and scheduling callbacks from other threads (real clock: threads and
trio's autojump clock do not mix)."""

from __future__ import annotations

import threading

import anyio
import pytest

from futoin_anyio import AsyncSteps, AsyncTool, FutoInError

pytestmark = pytest.mark.anyio


async def test_success_from_another_thread() -> None:
    def step(asi: AsyncSteps) -> None:
        asi.wait_external()
        assert asi.tool is not None and asi.tool.is_same_thread()
        threading.Thread(target=lambda: asi.success(threading.current_thread().name),
                         name="worker").start()

    asi = AsyncSteps()
    asi.add(step)
    with anyio.fail_after(10):
        assert await asi.promise() == "worker"


async def test_error_from_another_thread() -> None:
    raised: list[str] = []

    def step(asi: AsyncSteps) -> None:
        asi.wait_external()

        def work() -> None:
            try:
                asi.error("FromThread", "info")
            except FutoInError as exc:
                raised.append(exc.code)

        threads.append(threading.Thread(target=work))
        threads[0].start()

    threads: list[threading.Thread] = []
    asi = AsyncSteps()
    asi.add(step, lambda asi, e: asi.success(e, asi.state.error_info))
    with anyio.fail_after(10):
        assert await asi.promise() == ("FromThread", "info")
    await anyio.to_thread.run_sync(threads[0].join)
    assert raised == ["FromThread"]


async def test_immediate_from_another_thread() -> None:
    log: list[bool] = []
    async with AsyncTool() as tool:
        done = anyio.Event()

        def callback() -> None:
            log.append(tool.is_same_thread())
            done.set()

        def from_worker() -> None:
            log.append(tool.is_same_thread())
            tool.immediate(callback)

        await anyio.to_thread.run_sync(from_worker)
        with anyio.fail_after(10):
            await done.wait()
    assert log == [False, True]
