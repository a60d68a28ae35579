"""Helpers of the tests that run on both backends: virtual time, the tasks a test started, and
where a ``promise()``'s parallel branches run."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import sniffio
import trio.testing
from fuzz.interp import VirtualTimeLoop

from futoin_anyio import AsyncSteps
from futoin_anyio._alarm import TASK_NAME as ALARM_TASK


def virtual_time(name: str) -> Any:
    """The ``anyio_backend`` value of ``name`` in virtual time: trio's
    ``MockClock(autojump_threshold=0)``, the fuzzer's :class:`VirtualTimeLoop` for asyncio."""
    if name == "trio":
        return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
    return ("asyncio", {"loop_factory": VirtualTimeLoop})


def own_tasks() -> set[str | None]:
    """The names of the running tasks, but the timeout alarms' system task (a service of the
    run that outlives every test's roots)."""
    return {t.name for t in anyio.get_running_tasks() if t.name != ALARM_TASK}


def first_branch_inline() -> bool:
    """Does the first coroutine branch of a ``promise()`` to start run in the caller's task?

    On trio always; on asyncio from Python 3.12, whose tasks tell their context (the other
    branches' plain steps run in it meanwhile: see ``_Driver._start_coroutine``).
    """
    return sniffio.current_async_library() == "trio" or sys.version_info >= (3, 12)


def waiting_branch(name: str, log: list[str], delay: float = 10,
                   tasks: list[set[str | None]] | None = None) -> Any:
    """A branch whose coroutine waits ``delay`` s; its cleanup and its cancel handler log
    themselves (and the coroutine the tasks running when it starts, into ``tasks``)."""

    async def wait(asi: AsyncSteps) -> None:
        if tasks is not None:
            tasks.append(own_tasks())
        try:
            await anyio.sleep(delay)
        finally:
            log.append(f"{name} cleanup")

    def steps(asi: AsyncSteps) -> None:
        asi.set_cancel(lambda asi: log.append(f"{name} cancel"))
        asi.add(wait)
    return steps
