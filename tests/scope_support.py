"""An outer deadline that expires once the root waits, however loaded the machine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


@asynccontextmanager
async def deadline_once_blocked() -> AsyncIterator[anyio.CancelScope]:
    """A cancel scope around the body whose deadline becomes *now* once every task waits.

    ``move_on_after(0.01)`` around ``await root.promise()`` can expire before the root starts
    on a busy machine (a cancelled task does not start a root: nothing runs, nothing to
    cancel); this deadline expires only once the root has run up to where it waits.
    """
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def expire() -> None:
                await anyio.wait_all_tasks_blocked()
                scope.deadline = anyio.current_time()

            tg.start_soon(expire)
            yield scope
